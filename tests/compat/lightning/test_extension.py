"""braeburn inside Lightning's own Trainer (``callbacks=[Braeburn()]``): a whole Lightning script gives Lightning's
results with the extension on, and on a (faked) Mac the extension's facts apply."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from tests.compat.catalogue import assert_identical
from tests.compat.lightning.scripts import Classifier, classification_data, both, csv_metrics, pl, quiet_trainer
from tests.devices.test_mac import fake_mac  # noqa: F401  (a fixture)
from tests.devices.test_mac_silent_errors import FakeMpsGenerator, MpsDropout

ROOT = Path(__file__).resolve().parents[3]


def whole_script(root: Path, extension: bool) -> dict:
    """ModelCheckpoint, EarlyStopping, LearningRateMonitor, a CSVLogger, fit, test, predict, load_from_checkpoint."""
    from pytorch_lightning.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
    from pytorch_lightning.loggers import CSVLogger

    model = Classifier(scheduler="epoch")
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=2, filename="{epoch}-{val_loss:.4f}")
    trainer = quiet_trainer(root, extension, max_epochs=4, log_every_n_steps=2,
                            logger=CSVLogger(str(root), name="csv"),
                            callbacks=[checkpoint, EarlyStopping(monitor="val_loss", patience=1),
                                       LearningRateMonitor(logging_interval="step")])
    train, val = classification_data(40, 8), classification_data(20, 6, seed=1)  # a short last batch
    trainer.fit(model, train, val)
    tested = trainer.test(model, classification_data(12, 5, seed=2), verbose=False)
    predicted = trainer.predict(model, classification_data(12, 5, seed=2))
    best = Classifier.load_from_checkpoint(checkpoint.best_model_path)
    return {"losses": model.losses, "metrics": dict(trainer.callback_metrics), "tested": tested,
            "predicted": predicted, "best": Path(checkpoint.best_model_path).name,
            "best_weights": [p.detach() for p in best.parameters()], "csv": csv_metrics(root),
            "epochs": trainer.current_epoch, "stopped": trainer.early_stopping_callback.stopped_epoch}


def test_a_whole_lightning_script_gives_lightnings_results_with_the_extension_on(tmp_path):
    plain, ours, printed = both(tmp_path, whole_script)
    assert plain.exit is None, plain.exit
    assert_identical(plain, ours)  # bitwise: losses, metrics, files, test/predict results, the CSV rows
    assert ours.extra["csv"] and any("lr-SGD" in row for row in ours.extra["csv"][:1])
    assert "braeburn: Lightning trains on cpu" in printed
    assert printed.count("braeburn: fit summary") == 1  # once, for fit (not for test or predict)
    assert "  time " in printed and " in " in printed


def test_the_summary_counts_batches_and_optimizer_steps_and_labels_the_cpus_peak_as_the_processs(tmp_path):
    trainer = quiet_trainer(tmp_path, True, max_epochs=1, accumulate_grad_batches=3, logger=False)
    printed = fit_printing(trainer, Classifier(), classification_data(80, 8))  # 10 batches, 4 optimizer steps
    assert trainer.global_step == 4
    summary = printed[printed.index("braeburn: fit summary"):]
    time_line = next(line for line in summary.splitlines() if line.strip().startswith("time"))
    assert " in 10 batches (4 optimizer steps; " in time_line and "ms/batch" in time_line
    assert "steps (" not in time_line.replace("optimizer steps", "")  # no batch is called a step
    memory = next(line for line in summary.splitlines() if line.strip().startswith("peak mem"))
    assert memory.endswith("(process peak since start)")  # ru_maxrss: the CPU's peak cannot be reset


def test_the_extension_is_lightnings_callback_and_one_argument_turns_it_on():
    from braeburn.lightning import Braeburn

    assert isinstance(Braeburn(), pl.Callback)
    with pytest.raises(ValueError, match="precision='fp16'.*'auto'.*'keep'"):
        Braeburn(precision="fp16")


@pytest.mark.slow  # 36 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_import_braeburn_loads_no_lightning_and_the_extension_loads_the_one_installed():
    code = ("import sys, braeburn, braeburn.lightning; assert not any(m.split('.')[0] in ('lightning', "
            "'pytorch_lightning') for m in sys.modules), 'loaded'; from braeburn.lightning import Braeburn; "
            "print(Braeburn.__mro__[1].__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("pytorch_lightning.")


@pytest.mark.slow  # 10 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_without_lightning_the_extension_says_how_to_install_it():
    code = ("import sys\nfor name in ('lightning', 'lightning.pytorch', 'pytorch_lightning'): sys.modules[name] = None\n"
            "import braeburn.lightning\ntry:\n    braeburn.lightning.Braeburn\nexcept ImportError as error:\n"
            "    print(type(error).__name__, error)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("LightningMissingError") and "pip install 'braeburn[lightning]'" in out.stdout
    # the extra installs pytorch-lightning only: the other import name needs its own package, as the docs say
    assert ("which installs pytorch-lightning (`import pytorch_lightning as pl`); a script that does `import "
            "lightning as L` needs pip install lightning") in out.stdout


def test_the_lightning_extra_installs_pytorch_lightning_and_the_docs_say_import_lightning_needs_its_own_package():
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lightning"]
    assert [requirement.split(">")[0] for requirement in extra] == ["pytorch-lightning"]
    page = " ".join((ROOT / "docs" / "migrating.md").read_text().split())
    assert "`braeburn[lightning]` installs `pytorch-lightning`" in page
    assert "a script that does `import lightning as L` needs `pip install lightning`" in page
    assert "Both of its import names work" not in page


# -- a (faked) Mac: Lightning's own MPS accelerator, answering as on a Mac, with CPU tensors --------------------


@pytest.fixture
def lightning_on_a_mac(fake_mac, monkeypatch):
    """fake_mac (braeburn's MPS facts, torch.mps faked) and Lightning's MPSAccelerator available: Lightning's
    accelerator="auto" chooses it, as on a Mac; its device is the CPU here."""
    from lightning_fabric.accelerators import mps as fabric_mps
    from pytorch_lightning.accelerators import mps

    # (their answer is cached per process: the class's own is_available is replaced, as on a Mac it answers True)
    monkeypatch.setattr(fabric_mps.MPSAccelerator, "is_available", staticmethod(lambda: True))
    monkeypatch.setattr(mps.MPSAccelerator, "is_available", staticmethod(lambda: True))
    monkeypatch.setattr(mps.MPSAccelerator, "get_parallel_devices", staticmethod(lambda devices: [torch.device("cpu")]))
    monkeypatch.setattr(mps.MPSAccelerator, "setup_device", lambda self, device: None)
    return fake_mac


def mac_trainer(root: Path, **kwargs):
    from braeburn.lightning import Braeburn

    options = dict(accelerator="auto", devices=1, enable_progress_bar=False, enable_model_summary=False,
                   default_root_dir=str(root), logger=False, callbacks=[Braeburn()])
    options.update(kwargs)
    return pl.Trainer(**options)


def fit_printing(trainer, model, *loaders, **kwargs) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, *loaders, **kwargs)
    return printed.getvalue()


def test_on_a_mac_the_extension_says_the_device_the_fallback_and_the_driver_memory(lightning_on_a_mac, tmp_path):
    lightning_on_a_mac.held = 3 * 2**30  # what the driver holds
    trainer = mac_trainer(tmp_path, max_epochs=1)
    assert type(trainer.accelerator).__name__ == "MPSAccelerator"
    printed = fit_printing(trainer, Classifier(), classification_data())
    start = next(line for line in printed.splitlines() if line.startswith("braeburn: Lightning trains on"))
    assert "Apple-silicon GPU (mps), the best usable device here" in start
    assert "PYTORCH_ENABLE_MPS_FALLBACK=1 set before torch loaded" in start
    assert "32-true, not measured: a run of 5 steps is too short" in printed  # the measurement's cost gate
    assert "Trainer(precision='bf16-mixed')" in printed and "mixed_precision=" not in printed  # Lightning's words
    summary = printed[printed.index("braeburn: fit summary"):]
    assert "3.0 GiB held by the driver" in summary and "in 5 batches (5 optimizer steps; " in summary


def test_on_a_mac_where_torch_loaded_first_one_line_names_the_fix(lightning_on_a_mac, fake_host, monkeypatch,
                                                                   tmp_path):
    fake_host("apple", torch_loaded_before_braeburn=True, env={})  # `import lightning` before braeburn, no export
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK")
    printed = fit_printing(mac_trainer(tmp_path, max_steps=1), Classifier(), classification_data())
    warning = [line for line in printed.splitlines() if "PYTORCH_ENABLE_MPS_FALLBACK=1 must be set" in line]
    assert len(warning) == 1
    assert "torch was imported before braeburn" in warning[0] and "`import braeburn` first" in warning[0]
    assert "braeburn launch" in warning[0]


class FasterMixed(Classifier):
    """A model whose steps take far longer in float32 than under autocast, as a Mac's may (far: the win must hold
    beyond the spread of the rounds on a busy machine)."""

    def training_step(self, batch, batch_idx):
        mixed = torch.is_autocast_enabled("cpu")
        time.sleep(0.001 if mixed else 0.02)
        return super().training_step(batch, batch_idx)


@pytest.mark.slow  # 8 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_on_a_mac_the_precision_is_chosen_by_measurement_and_set_in_lightnings_plugin(lightning_on_a_mac, tmp_path):
    trainer = mac_trainer(tmp_path, max_steps=1100, limit_val_batches=0)
    printed = fit_printing(trainer, FasterMixed(), classification_data(64, 8))
    # Lightning's own MixedPrecision plugin, switched at train start (bf16 unless fp16 measured faster still)
    assert trainer.precision in ("bf16-mixed", "16-mixed")
    assert type(trainer.strategy.precision_plugin).__name__ == "MixedPrecision"
    chosen = {"bf16-mixed": "bf16", "16-mixed": "fp16"}[trainer.precision]
    line = next(line for line in printed.splitlines() if line.startswith("braeburn: precision"))
    assert "timed on your model: float32" in line and f"auto: {chosen}, measured" in line
    assert "precision='keep'" in line
    assert f"precision  {trainer.precision}" in printed[printed.index("braeburn: fit summary"):]


@pytest.mark.slow  # 6 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_an_explicit_precision_is_kept_on_a_mac(lightning_on_a_mac, tmp_path):
    trainer = mac_trainer(tmp_path, max_steps=1100, precision="16-mixed", limit_val_batches=0)
    printed = fit_printing(trainer, Classifier(), classification_data(64, 8))  # long enough to be measured
    assert trainer.precision == "16-mixed"
    assert "precision 16-mixed (as the Trainer was given it)" in printed
    assert "timed on your model" not in printed


class FirstSample(Classifier):
    """Records the first input value of each batch its training_step sees (the trial's calls first, if any)."""

    def __init__(self):
        super().__init__()
        self.seen: list[float] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch[0][0, 0].item())
        return super().training_step(batch, batch_idx)


def test_the_precision_trial_leaves_a_seeded_loaders_order_as_lightnings(lightning_on_a_mac, monkeypatch, tmp_path):
    from torch.utils.data import DataLoader

    from braeburn.compat.lightning import extension_precision
    from braeburn.lightning import Braeburn

    monkeypatch.setattr(extension_precision, "why_not_measured", lambda trainer, found: None)  # as a long run
    seen = {}
    for choice in ("keep", "auto"):
        loader = DataLoader(classification_data(64, 8).dataset, batch_size=8, shuffle=True,
                            generator=torch.Generator().manual_seed(0))  # the order of the user's own generator
        model = FirstSample()
        fit_printing(mac_trainer(tmp_path / choice, max_steps=8, callbacks=[Braeburn(precision=choice)]), model,
                     loader)
        seen[choice] = model.seen
    assert len(seen["auto"]) > len(seen["keep"]) == 8  # the trial ran the training_step on a batch first
    assert seen["auto"][-8:] == seen["keep"]  # (the trial's read of a batch drew from the loader's generator)


class HeadOnlyClipRecorder(Classifier):
    """An optimizer over the last layer only (the first stays trainable); records, at each clip Lightning's way (its
    configure_gradient_clipping hook), the Trainer's value and algorithm and the gradients' norms after the clip."""

    def __init__(self):
        super().__init__()
        self.clips: list[tuple] = []

    def configure_optimizers(self):
        return torch.optim.SGD(self.net[3].parameters(), lr=0.1)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        held = [p.grad for group in optimizer.param_groups for p in group["params"]]
        body = [p.grad for p in self.net[0].parameters()]
        self.clips.append((gradient_clip_val, str(gradient_clip_algorithm), float(torch.linalg.vector_norm(
            torch.cat([g.flatten() for g in held]))), float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in body])))))


def test_the_precision_trial_clips_as_lightning_the_optimizers_parameters(lightning_on_a_mac, monkeypatch, tmp_path):
    """The trial's steps clip as Lightning's loop: through the module's configure_gradient_clipping, with the
    Trainer's value and algorithm, so Lightning's plugin clips the optimizer's parameters (the module's whole
    norm was clipped before, by norm whatever the algorithm)."""
    from braeburn.compat.lightning import extension_precision

    monkeypatch.setattr(extension_precision, "why_not_measured", lambda trainer, found: None)  # as a long run
    model = HeadOnlyClipRecorder()
    fit_printing(mac_trainer(tmp_path, max_steps=4, limit_val_batches=0, gradient_clip_val=0.01), model,
                 classification_data(64, 8))
    assert len(model.clips) > 4  # the trial's steps clipped through the hook too, before Lightning's 4
    assert {(value, algorithm) for value, algorithm, _, _ in model.clips} == {(0.01, "None")}  # as Lightning passes
    for _, _, held, body in model.clips:
        assert held <= 0.01 * (1 + 1e-5) and body > 0.01  # the optimizer's gradients clipped, the body's not


def test_a_resumed_fit_keeps_the_precision_measured_and_its_grad_scale(lightning_on_a_mac, monkeypatch, tmp_path):
    from braeburn.compat.lightning import extension_precision

    measured = []
    monkeypatch.setattr(extension_precision, "why_not_measured", lambda trainer, found: None)  # as a long run

    def measure(trainer, module, kind, found):  # a trial on a busy machine: fp16 first, bf16 the next time
        measured.append(("fp16", "bf16")[len(measured)])
        return measured[-1], "timed on your model: (faked)"
    monkeypatch.setattr(extension_precision, "measure", measure)
    first = mac_trainer(tmp_path / "first", max_steps=3)
    fit_printing(first, Classifier(), classification_data())
    path = next((tmp_path / "first").rglob("*.ckpt"))
    saved = torch.load(path, weights_only=False)
    assert saved["callbacks"]["Braeburn"]["precision"] == "fp16" and first.precision == "16-mixed"
    resumed = mac_trainer(tmp_path / "again", max_steps=6)
    scales = []
    monkeypatch.setattr(Classifier, "on_train_start", lambda self: scales.append(
        (self.trainer.scaler.get_scale(), self.trainer.scaler._get_growth_tracker())), raising=False)
    printed = fit_printing(resumed, Classifier(), classification_data(), ckpt_path=str(path))
    assert measured == ["fp16"]  # not measured again: the resumed run goes on as it was
    assert resumed.precision == "16-mixed"
    assert scales == [(saved["MixedPrecision"]["scale"], saved["MixedPrecision"]["_growth_tracker"])]
    assert "precision 16-mixed (as measured by the run this resumes" in printed


class CheckpointedDropout(Classifier):
    """A block checkpointed with torch.utils.checkpoint whose dropout draws from the (fake) MPS generator."""

    def __init__(self, generator, checkpointed: bool):
        super().__init__()
        self.drop, self.checkpointed = MpsDropout(generator, 0.5), checkpointed
        self.grads: list[torch.Tensor] = []

    def forward(self, x):
        block = lambda h: self.drop(torch.tanh(self.net[0](h)))  # noqa: E731
        h = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return self.net[3](h)

    def on_after_backward(self):
        self.grads.append(self.net[0].weight.grad.clone())


def test_on_a_mac_a_checkpointed_dropout_replays_the_mps_random_state(lightning_on_a_mac, monkeypatch, tmp_path):
    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    runs = {}
    for checkpointed in (False, True):
        torch.manual_seed(0)
        fake.generator.manual_seed(1)
        model = CheckpointedDropout(fake.generator, checkpointed)
        fit_printing(mac_trainer(tmp_path / str(checkpointed), max_steps=3), model, classification_data())
        runs[checkpointed] = model.grads
    for got, want in zip(runs[True], runs[False], strict=True):
        torch.testing.assert_close(got, want)  # without the extension: new masks in the recompute, no error


def test_on_a_mac_the_mps_generator_is_saved_in_lightnings_checkpoint_and_put_back(lightning_on_a_mac, monkeypatch,
                                                                                   tmp_path):
    fake = FakeMpsGenerator(seed=7)
    fake.install(monkeypatch)
    trainer = mac_trainer(tmp_path, max_steps=2)
    fit_printing(trainer, Classifier(), classification_data())
    path = next(tmp_path.rglob("*.ckpt"))
    saved = torch.load(path, weights_only=False)["callbacks"]["Braeburn"]["device_rng"]
    assert saved["kind"] == "mps" and torch.equal(saved["state"], fake.generator.get_state())
    expected = fake.generator.get_state()
    fake.generator.manual_seed(123)  # the generator moves on (another process, a restart)
    resumed = mac_trainer(tmp_path / "again", max_steps=2)
    fit_printing(resumed, Classifier(), classification_data(), ckpt_path=str(path))
    assert torch.equal(fake.generator.get_state(), expected)  # put back at resume; nothing trained past max_steps


@pytest.mark.parametrize("entry, shown", [("garbage", "a str"), ({"device_rng": "garbage"}, "{'device_rng': str}"),
                                          ({"device_rng": {"kind": "mps"}}, "{'device_rng': dict with keys ['kind']}"),
                                          ({"device_rng": {"kind": "mps", "state": "junk"}},
                                           "{'device_rng': dict with keys ['kind', 'state']}")])
def test_a_damaged_braeburn_entry_in_a_checkpoint_is_one_error_naming_it_and_the_fix(lightning_on_a_mac, monkeypatch,
                                                                                     tmp_path, entry, shown):
    FakeMpsGenerator(seed=7).install(monkeypatch)
    fit_printing(mac_trainer(tmp_path / "first", max_steps=2), Classifier(), classification_data())
    path = next((tmp_path / "first").rglob("*.ckpt"))
    checkpoint = torch.load(path, weights_only=False)
    checkpoint["callbacks"]["Braeburn"] = entry
    torch.save(checkpoint, path)
    with pytest.raises(ValueError) as caught:  # (was an AttributeError, TypeError or KeyError from inside)
        fit_printing(mac_trainer(tmp_path / "again", max_steps=3), Classifier(), classification_data(),
                     ckpt_path=str(path))
    message = str(caught.value)
    assert message.startswith(f"the checkpoint's callbacks['Braeburn'] entry is {shown}")
    assert "del ckpt['callbacks']['Braeburn']" in message


def test_a_braeburn_entry_of_another_device_or_with_unknown_keys_is_left_alone(lightning_on_a_mac, monkeypatch,
                                                                               tmp_path):
    fake = FakeMpsGenerator(seed=7)
    fake.install(monkeypatch)
    fit_printing(mac_trainer(tmp_path / "first", max_steps=2), Classifier(), classification_data())
    path = next((tmp_path / "first").rglob("*.ckpt"))
    checkpoint = torch.load(path, weights_only=False)
    checkpoint["callbacks"]["Braeburn"] = {"device_rng": {"kind": "cuda", "state": [torch.zeros(3)]}, "later": 1}
    torch.save(checkpoint, path)
    before = fake.generator.get_state()
    fit_printing(mac_trainer(tmp_path / "again", max_steps=3), Classifier(), classification_data(),
                 ckpt_path=str(path))
    assert not torch.equal(fake.generator.get_state(), torch.zeros(3))  # another device's state is not put here
    assert fake.generator.get_state().shape == before.shape


def test_on_the_cpu_lightnings_checkpoint_holds_nothing_of_braeburns(tmp_path):
    trainer = quiet_trainer(tmp_path, True, max_steps=2, logger=False)
    fit_printing(trainer, Classifier(), classification_data())
    assert "Braeburn" not in torch.load(next(tmp_path.rglob("*.ckpt")), weights_only=False)["callbacks"]


class UsesOpsMpsLacks(Classifier):
    """Each training step runs two ops MPS lacks, which torch runs on the CPU with its one-per-process warning."""

    def __init__(self):
        super().__init__()
        from tests.devices.test_mac import FakeMpsFallback

        self.run_op = FakeMpsFallback()

    def training_step(self, batch, batch_idx):
        self.run_op("aten::angle")
        self.run_op("aten::cumprod.out")
        return super().training_step(batch, batch_idx)


def test_on_a_mac_the_summary_counts_every_op_that_ran_on_the_cpu(lightning_on_a_mac, tmp_path):
    before = torch.is_warn_always_enabled()
    printed = fit_printing(mac_trainer(tmp_path, max_steps=3), UsesOpsMpsLacks(), classification_data())
    summary = printed[printed.index("braeburn: fit summary"):]
    assert "on the CPU aten::angle (3x), aten::cumprod.out (3x)" in summary
    assert torch.is_warn_always_enabled() == before  # torch's warn-always put back at fit end


def test_on_a_rosetta_python_lightning_trains_on_the_cpu_and_the_line_says_why_with_the_fix(fake_host, tmp_path):
    fake_host("apple", machine="x86_64", rosetta=True, mps_built=False, mps_available=False)
    printed = fit_printing(quiet_trainer(tmp_path, True, max_steps=1, logger=False), Classifier(),
                           classification_data())
    start = next(line for line in printed.splitlines() if line.startswith("braeburn: Lightning trains on"))
    assert "mps is here but not usable" in start and "Rosetta" in start and "fix:" in start
