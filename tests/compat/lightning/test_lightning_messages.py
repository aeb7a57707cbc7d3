"""What braeburn.lightning says when it refuses or stops: Lightning's arguments (Trainer(...), fit(...), the module's
code), never braeburn's or Transformers' command-line flags, and one error rather than braeburn's inner frames."""

from __future__ import annotations

import os
import re
import shutil
import signal
import traceback
from pathlib import Path

import pytest
import torch

import braeburn
from braeburn.compat.lightning.spelling import NO_COUNTERPART, LightningSpelling
from braeburn.lightning import LightningArgumentError, Trainer
from braeburn.plan.option_spelling import given, option, spelled
from braeburn.plan.rules import PlanError
from braeburn.trainer.config import ConfigError, TrainingConfig
from braeburn.trainer.signals import TrainingInterrupted

from .lightning_modules import Regression, regression_data

PACKAGE = Path(braeburn.__file__).resolve().parent
CORE = PACKAGE / "trainer"


def speaks_lightning(message: str) -> bool:
    """No command-line flag, except inside a whole `braeburn launch ...` command (how Lightning's devices=N runs)."""
    outside_commands = re.sub(r"`braeburn launch [^`]*`", "", message)
    return re.search(r"(?<![\w-])--[a-z]", outside_commands) is None


def _trainer(root: Path, **options) -> Trainer:
    settings = dict(accelerator="cpu", devices=1, max_epochs=1, enable_progress_bar=False, default_root_dir=str(root))
    return Trainer(**{**settings, **options})


@pytest.fixture
def cpu(cpu_only, one_thread):
    pass


def _frames_in(error: BaseException, folder: Path) -> list[str]:
    return [frame.filename for frame in traceback.extract_tb(error.__traceback__)
            if Path(frame.filename).resolve().is_relative_to(folder)]


def _two_runs_in(folder: Path, root: Path) -> None:
    """``folder`` gets the checkpoints of two runs: the first run's and a copy of another's."""
    _trainer(root, max_steps=3).fit(Regression(), regression_data())
    other = root / "lightning_logs" / "version_1"
    _trainer(root).fit(Regression(), regression_data())
    shutil.copytree(other / "checkpoint-6", folder / "checkpoint-6")


@pytest.mark.parametrize("ckpt_path", ["last", "folder"])
def test_two_runs_in_the_folder_to_resume_is_one_error_naming_ckpt_path(tmp_path, cpu, ckpt_path):
    root = tmp_path / "root"
    version_0 = root / "lightning_logs" / "version_0"
    _two_runs_in(version_0, root)
    shutil.rmtree(root / "lightning_logs" / "version_1")  # "last": the newest version with a checkpoint is version_0
    asked = "last" if ckpt_path == "last" else str(version_0)
    with pytest.raises(LightningArgumentError) as caught:
        _trainer(root).fit(Regression(), regression_data(), ckpt_path=asked)
    message = str(caught.value)
    assert f"fit(ckpt_path={asked!r}) but {version_0} holds the checkpoints of 2 different runs" in message
    assert f"fit(ckpt_path='{version_0}/checkpoint-N')" in message and speaks_lightning(message)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no chained core error
    assert _frames_in(caught.value, CORE) == []  # raised by fit(), not from inside braeburn's Trainer


@pytest.mark.parametrize("limit,said", [(dict(max_epochs=1), "`max_epochs=1` reached."),
                                        (dict(max_steps=3), "`max_steps=3` reached.")])
def test_resuming_past_max_epochs_restores_trains_nothing_and_says_so_as_lightning(tmp_path, cpu, capsys, limit, said):
    first = Regression()
    _trainer(tmp_path, max_epochs=2).fit(first, regression_data())
    capsys.readouterr()
    module = Regression()
    trainer = _trainer(tmp_path, **limit)
    trainer.fit(module, regression_data(), ckpt_path="last")  # Lightning: restored, nothing trained, exit 0
    out = capsys.readouterr().out
    assert f"`Trainer.fit` stopped: {said}" in out and trainer.global_step == 12 and module.losses == []
    assert module.calls == []  # Lightning calls no training hook then (on_fit_start and on_fit_end only)
    assert all(torch.equal(a, b) for a, b in zip(module.state_dict().values(), first.state_dict().values()))
    assert "is past the end that Trainer(" in out and "its state is restored, and nothing is trained" in out
    assert speaks_lightning(out)
    assert not list(Path(trainer.log_dir).glob("checkpoint-*"))  # nothing new to save


class _TurnsNaN(Regression):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        return loss * float("nan") if self.global_step >= 7 else loss


def test_a_nan_loss_stop_offers_lightnings_fixes(tmp_path, cpu):
    trainer = _trainer(tmp_path, max_epochs=2, log_every_n_steps=1)
    with pytest.raises(RuntimeError, match="became nan") as caught:
        trainer.fit(_TurnsNaN(), regression_data())
    message, last = str(caught.value), Path(trainer.log_dir) / "checkpoint-6"
    assert f"with fit(ckpt_path={str(last)!r}) after lowering the optimizer's learning rate in configure_optimizers()" \
        in message
    assert "Trainer(gradient_clip_val=1.0)" in message and "Trainer(precision='32-true')" in message
    assert "nan_policy" not in message and speaks_lightning(message)


def test_trainer_counts_are_refused_in_lightnings_terms(tmp_path, cpu):
    with pytest.raises(LightningArgumentError) as caught:
        _trainer(tmp_path, max_epochs=0, max_steps=-5, accumulate_grad_batches=0, log_every_n_steps=0)
    message = str(caught.value)
    assert len(caught.value.errors) == 4 and speaks_lightning(message)
    for name in ("max_epochs=0", "max_steps=-5", "accumulate_grad_batches=0", "log_every_n_steps=0"):
        assert name in message
    assert "gradient_accumulation_steps" not in message and "logging_steps" not in message


def test_a_plateau_scheduler_without_validation_is_refused_before_training(tmp_path, cpu):
    class Plateau(Regression):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
            return {"optimizer": optimizer, "lr_scheduler": {
                "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer), "monitor": "val_mse"}}

    with pytest.raises(LightningArgumentError, match="Pass val_dataloaders= to fit") as caught:
        _trainer(tmp_path).fit(Plateau(), regression_data())
    assert speaks_lightning(str(caught.value)) and not (tmp_path / "lightning_logs").exists()


def test_a_missing_accelerator_offers_trainer_accelerator_cpu(tmp_path, no_launcher_env, one_thread, fake_host):
    fake_host("linux_cpu")
    with pytest.raises(PlanError) as caught:
        _trainer(tmp_path, accelerator="cuda").fit(Regression(), regression_data())
    message = str(caught.value)
    assert "accelerator='cuda': CUDA is not available" in message
    assert "Or pass Trainer(accelerator='cpu') to train on the CPU" in message and speaks_lightning(message)
    assert all("compat" in frame for frame in _frames_in(caught.value, PACKAGE))  # fit()'s, not the plan's


def test_an_unsupported_precision_names_lightnings_precision(tmp_path, no_launcher_env, one_thread, fake_host):
    fake_host("cuda", cuda_capabilities=((7, 5), (7, 5)))  # a Turing GPU: no bfloat16
    with pytest.raises(PlanError) as caught:
        _trainer(tmp_path, accelerator="cuda", precision="bf16-mixed").fit(Regression(), regression_data())
    message = str(caught.value)
    assert "precision='bf16-mixed': " in message and "pass Trainer(precision='32-true') (float32)" in message
    assert speaks_lightning(message)


def test_devices_n_messages_speak_lightning():
    from braeburn.compat.lightning.options import lightning_options

    for launched in (None, 4):
        _, errors = lightning_options({"devices": 2}, launched=launched)
        assert "Trainer(devices=" in errors[0] and speaks_lightning(errors[0])


def _names_the_core_offers() -> tuple[set[str], set[str]]:
    """(names the core's messages spell with option()/given(), names they offer only through advice())."""
    source = "\n".join(path.read_text() for path in PACKAGE.rglob("*.py") if "compat" not in path.parts)
    direct = set(re.findall(r"\b(?:option|given)\('(\w+)'", source))
    optional = set(re.findall(r"\badvice\((?:\"[^\"]*\"|'[^']*'),\s*\"(\w+)\"", source))
    return direct, optional


def test_every_option_the_core_names_has_a_lightning_spelling():
    direct, optional = _names_the_core_offers()
    assert {"resume_from_checkpoint", "cpu", "output_dir", "max_steps"} <= direct and "nan_policy" in optional
    spelling = LightningSpelling(root="runs")
    for name in direct:
        spelled_option = spelling.option(name)
        assert spelled_option is not None and speaks_lightning(spelled_option), name
    for name in optional:
        spelled_option = spelling.option(name)
        assert (spelled_option is None) == (name in NO_COUNTERPART), name
        assert spelled_option is None or speaks_lightning(spelled_option), name


def test_the_command_line_spelling_is_the_default_and_comes_back_after_the_call():
    assert option("resume_from_checkpoint", "runs/checkpoint-2") == "--resume_from_checkpoint runs/checkpoint-2"
    with spelled(LightningSpelling(root="runs", ckpt_path="last")):
        assert option("resume_from_checkpoint", "runs/checkpoint-2") == "fit(ckpt_path='runs/checkpoint-2')"
        assert given("resume_from_checkpoint", "latest") == "fit(ckpt_path='last')"
        assert given("mixed_precision", "fp16") == "precision='16-mixed'"
    assert given("mixed_precision", "fp16") == "mixed_precision='fp16'"


def test_an_error_raised_inside_the_modules_code_keeps_its_traceback(tmp_path, cpu):
    class MaxLogged(Regression):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("loss_max", loss, reduce_fx="max")  # braeburn refuses it, from inside the module's step
            return loss

    with pytest.raises(ValueError, match="reduces by the mean only") as caught:
        _trainer(tmp_path).fit(MaxLogged(), regression_data())
    names = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "training_step" in names and "compute_loss" in names  # where in the module, and how braeburn got there


def test_a_validation_loader_without_batches_is_skipped_as_lightning_skips_it(tmp_path, cpu, capsys):
    empty = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(0, 4), torch.zeros(0, 1)))
    trainer = _trainer(tmp_path)
    trainer.fit(Regression(), regression_data(), empty)  # braeburn's own Trainer would ask for --eval_strategy no
    assert trainer.global_step == 6 and "eval_strategy" not in capsys.readouterr().err


def test_a_sigterm_stop_says_how_to_resume_with_fit_ckpt_path(tmp_path, cpu):
    class Terminated(Regression):
        def training_step(self, batch, batch_idx):
            if len(self.losses) == 8:  # in the second epoch, after its first checkpoint
                os.kill(os.getpid(), signal.SIGTERM)
            return super().training_step(batch, batch_idx)

    trainer = _trainer(tmp_path, max_epochs=3)
    with pytest.raises(TrainingInterrupted) as caught:
        trainer.fit(Terminated(), regression_data())
    message, checkpoint = str(caught.value), Path(trainer.log_dir) / "checkpoint-9"
    assert f"Resume with fit(ckpt_path={str(checkpoint)!r}) (or fit(ckpt_path='last'))" in message, message
    assert speaks_lightning(message)


def test_the_command_line_stop_message_keeps_its_flags():
    from braeburn.trainer.signals import stop_message

    assert "Resume with --resume_from_checkpoint out/checkpoint-3 (or --resume_from_checkpoint latest)" in \
        stop_message(signal.SIGTERM, 3, "out/checkpoint-3")


def test_the_cores_range_errors_name_lightnings_arguments(tmp_path):
    config = TrainingConfig(output_dir=str(tmp_path), max_grad_norm=float("nan"), save_steps=2**70)
    with spelled(LightningSpelling(root=str(tmp_path))):
        errors = [str(error) for error in config.validate()]
    assert "gradient_clip_val=nan: must be a finite number, such as the default 1.0; pass " \
           "Trainer(gradient_clip_val=1.0)" in errors
    assert any(error.startswith("save_steps=") and "64-bit" in error for error in errors)  # no Lightning argument
    assert all(speaks_lightning(error) for error in errors), errors
    command_line = [str(error) for error in config.validate()]
    assert any("pass --max_grad_norm 1.0" in error for error in command_line)


def test_a_nan_gradient_clip_val_is_refused_in_lightnings_words(tmp_path, cpu):
    with pytest.raises(LightningArgumentError) as caught:
        _trainer(tmp_path, gradient_clip_val=float("nan"))
    assert "gradient_clip_val=nan: must be a finite number >= 0" in str(caught.value)
    assert speaks_lightning(str(caught.value))


def test_lightning_logs_that_is_a_file_names_default_root_dir(tmp_path, cpu):
    (tmp_path / "lightning_logs").write_text("a file of the user's")
    with pytest.raises(ConfigError) as caught:
        _trainer(tmp_path).fit(Regression(), regression_data())
    message = str(caught.value)
    assert "is a file, not a folder; pass a folder path to Trainer(default_root_dir=...) (or move" in message
    assert speaks_lightning(message) and (tmp_path / "lightning_logs").read_text() == "a file of the user's"


def test_an_empty_training_dataloader_trains_nothing_and_leaves_no_run_folder(tmp_path, cpu, capsys):
    class Hooks(Regression):
        def on_fit_start(self):
            self.calls.append("on_fit_start")

        def on_fit_end(self):
            self.calls.append("on_fit_end")

    empty = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(0, 4), torch.zeros(0, 1)))
    module, trainer = Hooks(), _trainer(tmp_path)
    with pytest.warns(UserWarning, match="Total length of `DataLoader` across ranks is zero"):
        trainer.fit(module, empty)  # as Lightning: a warning, nothing trained, no error
    assert "`Trainer.fit` stopped: No training batches." in capsys.readouterr().out
    assert module.calls == ["on_fit_start", "on_fit_end"] and trainer.global_step == 0 and trainer.log_dir is None
    assert not (tmp_path / "lightning_logs").exists()


def test_numbers_of_the_wrong_type_are_refused_together_in_lightnings_words(tmp_path):
    with pytest.raises(LightningArgumentError) as caught:
        _trainer(tmp_path, gradient_clip_val="1", max_epochs="2", accumulate_grad_batches=2.5, num_nodes=True,
                 precision="64-true")
    errors = caught.value.errors
    assert len(errors) == 5 and all(speaks_lightning(error) for error in errors)
    for expected in ("`gradient_clip_val` should be an int or a float, not a str", "`max_epochs` should be an int",
                     "`accumulate_grad_batches` should be an int, not a float", "`num_nodes` should be an int",
                     "precision='64-true'"):
        assert any(expected in error for error in errors), (expected, errors)


def test_one_callback_without_a_list_is_taken_as_lightning_takes_it(tmp_path, cpu):
    class Started:
        calls = 0

        def on_train_start(self, trainer, module):
            Started.calls += 1

    _trainer(tmp_path, callbacks=Started()).fit(Regression(), regression_data())
    assert Started.calls == 1


def _lightning_class(name: str, package: str = "pytorch_lightning.callbacks") -> type:
    """A class named and placed as Lightning's own (Lightning itself is not needed)."""
    base = type("Callback", (), {"__module__": "lightning.pytorch.callbacks.callback"})
    return type(name, (base,), {"__module__": f"{package}.{name.lower()}", "on_train_start": lambda *a: None})


def test_lightnings_own_callbacks_are_refused_by_name_with_the_way_out(tmp_path):
    checkpoint = _lightning_class("ModelCheckpoint")
    mine = type("BestOnly", (checkpoint,), {"__module__": "my_project.callbacks"})
    callbacks = [checkpoint(), _lightning_class("EarlyStopping")(), _lightning_class("LearningRateMonitor")(),
                 _lightning_class("StochasticWeightAveraging", "lightning.pytorch.callbacks")(), mine()]
    with pytest.raises(LightningArgumentError) as caught:
        _trainer(tmp_path, callbacks=callbacks)
    errors = caught.value.errors
    assert len(errors) == 5 and all(speaks_lightning(error) for error in errors)
    assert errors[0].startswith("callbacks=[ModelCheckpoint]: Lightning's own ModelCheckpoint drives Lightning's")
    assert "checkpoint at the end of every epoch" in errors[0] and "fit(ckpt_path='last')" in errors[0]
    assert "does not stop early" in errors[1] and "Lightning's own Trainer" in errors[1]
    assert "learning rate with each log record of metrics.jsonl" in errors[2]
    assert "remove it, or run this script with Lightning's own Trainer" in errors[3]
    assert errors[4].startswith("callbacks=[BestOnly (a ModelCheckpoint)]")
    user_callback = type("Mine", (_lightning_class("Callback").__mro__[1],), {"__module__": "my_project"})
    _trainer(tmp_path, callbacks=[user_callback()])  # a subclass of Lightning's base Callback alone is the user's


def test_braeburns_own_extension_is_refused_by_trainer_naming_lightnings_trainer_as_its_place(tmp_path):
    extension = _lightning_class("Braeburn", "braeburn.compat.lightning")  # placed as braeburn.lightning.Braeburn
    extension.__module__ = "braeburn.compat.lightning.extension"
    with pytest.raises(LightningArgumentError) as caught:
        _trainer(tmp_path, callbacks=[extension()])  # refused by Trainer(...), before fit writes anything
    assert len(caught.value.errors) == 1
    error = caught.value.errors[0]
    assert error.startswith("callbacks=[Braeburn()]: braeburn.lightning.Braeburn brings braeburn into Lightning's own")
    assert "remove Braeburn() here" in error and "Trainer(..., callbacks=[braeburn.lightning.Braeburn()])" in error
    assert not any(tmp_path.iterdir())


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        for _ in range(8):
            x = torch.randn(4)
            yield x, x.sum(0, keepdim=True)


@pytest.mark.parametrize("which", ["train", "val"])
def test_an_iterable_dataset_is_refused_before_anything_is_written(tmp_path, cpu, which):
    stream = torch.utils.data.DataLoader(_Stream(), batch_size=4)
    loaders = (stream, None) if which == "train" else (regression_data(), stream)
    with pytest.raises(LightningArgumentError) as caught:
        _trainer(tmp_path).fit(Regression(), *loaders)
    message = str(caught.value)
    assert f"fit({which}_dataloaders=...) (or the module's {which}_dataloader()) is a DataLoader over _Stream, " \
           "an IterableDataset" in message
    assert "map-style Dataset (with __len__ and __getitem__), or run this script with Lightning's own" in message
    assert not (tmp_path / "lightning_logs").exists()


@pytest.mark.parametrize("given,label,reason", [
    ({}, "32-true", "float32, Lightning's default (precision='32-true')"),
    ({"precision": "32-true"}, "32-true", "float32, as asked (precision='32-true')"),
    ({"precision": 32}, "32-true", "float32, as asked (precision=32)")])
def test_the_run_header_and_summary_name_lightnings_precision(tmp_path, cpu, capsys, monkeypatch, given, label,
                                                              reason):
    import braeburn.accelerator.core

    monkeypatch.setattr(braeburn.accelerator.core, "_said_once", set())  # the header is said once per process
    _trainer(tmp_path, **given).fit(Regression(), regression_data())
    out = capsys.readouterr().out
    assert f"; precision {label}: {reason}\n" in out and f"  precision  {label} ({reason})\n" in out, out
    assert "mixed_precision" not in out
