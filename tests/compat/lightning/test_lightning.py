"""The same LightningModule trained by Lightning's Trainer and by braeburn.lightning.Trainer: the same losses, step
by step, and the same validation means (bitwise on the CPU: the arithmetic is the same; the data order is the
loader's, unshuffled, since braeburn's shuffle is seeded per epoch for exact resume). Skipped without Lightning."""

from __future__ import annotations

import importlib
import re

import pytest
import torch

from .lightning_modules import Regression, hand_loop, listing, regression_data


def _lightning():
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    pytest.skip("Lightning is not installed (pip install lightning): the comparison needs the real one")


def _module_class(base: type) -> type:
    """Regression as a subclass of ``base`` (Lightning's LightningModule, or nn.Module for braeburn)."""

    class Module(Regression, base):
        def __init__(self, schedule: str):
            base.__init__(self)
            Regression.__init__(self, schedule)

    return Module


OPTIONS = dict(accelerator="cpu", devices=1, max_epochs=3, enable_progress_bar=False, enable_checkpointing=False,
               accumulate_grad_batches=2, gradient_clip_val=0.5)


@pytest.mark.parametrize("schedule", ["epoch", "step", "bare", "dict-return"])
def test_losses_match_lightning(tmp_path, monkeypatch, one_thread, schedule):
    pl = _lightning()
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    theirs = _module_class(pl.LightningModule)(schedule)
    pl.Trainer(**OPTIONS, default_root_dir=str(tmp_path / "pl"), logger=False, num_sanity_val_steps=0,
               enable_model_summary=False).fit(theirs, regression_data(samples=20), regression_data())

    from braeburn.lightning import Trainer

    ours = _module_class(pl.LightningModule)(schedule)  # the real LightningModule class, driven by braeburn
    trainer = Trainer(**OPTIONS, default_root_dir=str(tmp_path / "bb"))
    trainer.fit(ours, regression_data(samples=20), regression_data())
    assert len(ours.losses) == 15 and ours.losses == theirs.losses
    assert trainer.callback_metrics["val_mse"] == pytest.approx(float(theirs.trainer.callback_metrics["val_mse"]),
                                                                rel=1e-6)


@pytest.mark.parametrize("precision", ["bf16-mixed"])
def test_mixed_precision_matches_lightning(tmp_path, monkeypatch, one_thread, precision):
    """Both autocast the step to bfloat16 on the CPU (the same ops in the same order): the losses are equal too.
    Not "16-mixed": on the CPU Lightning switches it to bf16-mixed, braeburn autocasts to float16 as asked and
    says so (test_lightning_path.py)."""
    pl = _lightning()
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    options = {**OPTIONS, "precision": precision}
    theirs = _module_class(pl.LightningModule)("epoch")
    pl.Trainer(**options, default_root_dir=str(tmp_path / "pl"), logger=False, num_sanity_val_steps=0,
               enable_model_summary=False).fit(theirs, regression_data(samples=20))

    from braeburn.lightning import Trainer

    ours = _module_class(pl.LightningModule)("epoch")
    Trainer(**options, default_root_dir=str(tmp_path / "bb")).fit(ours, regression_data(samples=20))
    assert ours.losses == theirs.losses
    float32 = hand_loop(regression_data(samples=20), epochs=3, interval="epoch", accumulate=2, clip=0.5)
    assert ours.losses != float32  # autocast was on, in both


def test_callbacks_and_validate_match_lightning(tmp_path, monkeypatch, one_thread):
    """A lightning.Callback subclass sees the same epochs and steps; validate() returns the same means."""
    pl = _lightning()
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")

    def recorder():
        class Recorder(pl.Callback):
            def __init__(self):
                self.seen = []

            def on_train_epoch_end(self, trainer, module):
                self.seen.append((trainer.current_epoch, trainer.global_step))

        return Recorder()

    theirs, their_callback = _module_class(pl.LightningModule)("epoch"), recorder()
    their_trainer = pl.Trainer(**OPTIONS, callbacks=[their_callback], default_root_dir=str(tmp_path / "pl"),
                               logger=False, num_sanity_val_steps=0, enable_model_summary=False)
    their_trainer.fit(theirs, regression_data(samples=20))
    their_val = their_trainer.validate(theirs, regression_data(samples=10), verbose=False)

    from braeburn.lightning import Trainer

    ours, our_callback = _module_class(pl.LightningModule)("epoch"), recorder()
    our_trainer = Trainer(**OPTIONS, callbacks=[our_callback], default_root_dir=str(tmp_path / "bb"))
    our_trainer.fit(ours, regression_data(samples=20))
    our_val = our_trainer.validate(ours, regression_data(samples=10), verbose=False)
    assert our_callback.seen == their_callback.seen
    assert our_val == [{name: pytest.approx(value, rel=1e-6) for name, value in their_val[0].items()}]


def _head_only_class(base: type) -> type:
    """Regression whose optimizer holds only the last layer; the first stays trainable (its gradients pile up, as
    Lightning's optimizer.zero_grad leaves them): a clip of the model's parameters would see their norm too."""

    class HeadOnly(_module_class(base)):
        def configure_optimizers(self):
            return torch.optim.SGD(self.layer[2].parameters(), lr=self.lr, momentum=0.9)

    return HeadOnly


def test_gradient_clip_val_clips_the_optimizers_parameters_as_lightning(tmp_path, monkeypatch, one_thread):
    """Lightning clips what the optimizer holds (its precision plugin's main_params(optimizer)), not the model's
    parameters: with an optimizer over part of the model the norms differ, and so would every step after the first."""
    pl = _lightning()
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    options = dict(accelerator="cpu", devices=1, max_steps=6, enable_progress_bar=False, enable_checkpointing=False,
                   gradient_clip_val=0.05)
    theirs = _head_only_class(pl.LightningModule)("none")
    pl.Trainer(**options, default_root_dir=str(tmp_path / "pl"), logger=False, num_sanity_val_steps=0,
               enable_model_summary=False).fit(theirs, regression_data(samples=24))

    from braeburn.lightning import Trainer

    ours = _head_only_class(pl.LightningModule)("none")
    Trainer(**options, default_root_dir=str(tmp_path / "bb")).fit(ours, regression_data(samples=24))
    assert len(ours.losses) == 6 and ours.losses == theirs.losses
    for (name, mine), (_, their) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert torch.equal(mine, their), name
    assert not torch.equal(ours.layer[2].weight, _head_only_class(torch.nn.Module)("none").layer[2].weight)


def test_a_rerun_writes_where_lightning_writes_and_leaves_the_first_run_alone(tmp_path, monkeypatch, one_thread):
    """The same script run twice into one default_root_dir, by Lightning (its default logger and checkpoint) and by
    braeburn: both write the second run into lightning_logs/version_1, each with the checkpoint of the same step,
    and neither changes a file of the first run."""
    pl = _lightning()
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    from braeburn.lightning import Trainer

    options = dict(accelerator="cpu", devices=1, max_epochs=1, enable_progress_bar=False, enable_model_summary=False)
    trainers = {"lightning": lambda root: pl.Trainer(**options, default_root_dir=str(root), num_sanity_val_steps=0),
                "braeburn": lambda root: Trainer(**options, default_root_dir=str(root))}
    runs = {}
    for name, make in trainers.items():
        root, seen = tmp_path / name, []
        for _ in range(2):
            before = listing(root) if root.exists() else {}
            make(root).fit(_module_class(pl.LightningModule)("epoch"), regression_data())
            after = listing(root)
            assert {path: after[path] for path in before} == before, name  # no file of the first run changed
            seen.append(sorted((path.split("/")[1], _step(path)) for path in set(after) - set(before)
                               if _step(path) is not None))
        runs[name] = seen
    assert runs["braeburn"] == runs["lightning"] == [[("version_0", 6)], [("version_1", 6)]]


def _step(path: str) -> int | None:
    """The step of the checkpoint file ``path``: epoch=E-step=S.ckpt, which both write (braeburn beside its
    checkpoint-S/ folder)."""
    match = re.search(r"/checkpoints/epoch=\d+-step=(\d+)\.ckpt$", path)
    return int(match.group(1)) if match else None


# Lightning's own callbacks: each drives Lightning's Trainer (it crashed inside Lightning part way into the run).
_OWN_CALLBACKS = {"ModelCheckpoint": dict(monitor="val_mse"), "EarlyStopping": dict(monitor="val_mse"),
                  "LearningRateMonitor": {}, "Timer": dict(duration={"seconds": 1}),
                  "StochasticWeightAveraging": dict(swa_lrs=0.01), "TQDMProgressBar": {}, "ModelSummary": {},
                  "GradientAccumulationScheduler": dict(scheduling={0: 2})}


@pytest.mark.parametrize("name", sorted(_OWN_CALLBACKS))
def test_lightnings_own_callbacks_are_refused_before_training(tmp_path, name):
    from braeburn.lightning import LightningArgumentError, Trainer

    callback = getattr(_lightning().callbacks, name)(**_OWN_CALLBACKS[name])
    with pytest.raises(LightningArgumentError) as caught:
        Trainer(accelerator="cpu", devices=1, max_epochs=1, default_root_dir=str(tmp_path), callbacks=[callback])
    assert caught.value.errors[0].startswith(f"callbacks=[{name}]: Lightning's own {name} drives Lightning's Trainer")
    assert "--" not in caught.value.errors[0] and not any(tmp_path.iterdir())
