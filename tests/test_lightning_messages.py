"""What braeburn.lightning says when it refuses or stops: Lightning's arguments (Trainer(...), fit(...), the module's
code), never braeburn's or Transformers' command-line flags, and one error rather than braeburn's inner frames."""

from __future__ import annotations

import re
import shutil
import traceback
from pathlib import Path

import pytest
import torch

import braeburn
from braeburn.compat.lightning.spelling import NO_COUNTERPART, LightningSpelling
from braeburn.lightning import LightningArgumentError, Trainer
from braeburn.plan.option_spelling import given, option, spelled
from braeburn.plan.rules import PlanError
from braeburn.trainer.resume import ResumeError

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


def test_resuming_past_max_epochs_names_trainer_arguments(tmp_path, cpu):
    _trainer(tmp_path, max_epochs=2).fit(Regression(), regression_data())
    with pytest.raises(ResumeError) as caught:
        _trainer(tmp_path, max_epochs=1).fit(Regression(), regression_data(), ckpt_path="last")
    message = str(caught.value)
    assert message.startswith("Trainer(max_epochs=...) gives max_steps=6, below the step of the checkpoint")
    assert "Pass Trainer(max_steps=...) above 12" in message and speaks_lightning(message)
    assert _frames_in(caught.value, CORE) == []


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


def test_devices_n_messages_give_whole_launcher_commands():
    from braeburn.compat.lightning.options import lightning_options

    for launched in (None, 4):
        _, errors = lightning_options({"devices": 2}, launched=launched)
        assert "`braeburn launch --num-processes 2 script.py`" in errors[0] and speaks_lightning(errors[0])


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
