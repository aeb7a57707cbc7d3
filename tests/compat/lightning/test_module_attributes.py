"""What a LightningModule reads from itself and from ``self.trainer.logger`` during a run, under Lightning's own
Trainer and under ``braeburn.lightning.Trainer`` in the same test: ``self.optimizers()``, ``self.lr_schedulers()``
and ``self.print`` give Lightning's results; ``self.logger`` is None with ``logger=False``, as Lightning's; Lightning's
logger objects are refused by name, never a bare AttributeError."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.compat.lightning.scripts import Classifier, classification_data, pl, quiet_trainer


class LrLogging(Classifier):
    """Logs the optimizer's learning rate and the scheduler's last one, and prints once, as Lightning's docs do."""

    def __init__(self):
        super().__init__(lr=0.2, scheduler="epoch")
        self.read: list[Any] = []

    def training_step(self, batch, batch_idx):
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        self.log("lr", optimizer.param_groups[0]["lr"], on_step=True, on_epoch=False)
        self.read.append((optimizer.param_groups[0]["lr"], scheduler.get_last_lr()[0], type(scheduler).__name__))
        if batch_idx == 0:
            self.print(f"epoch {self.current_epoch} lr {optimizer.param_groups[0]['lr']}")
        return super().training_step(batch, batch_idx)


def _fit(root: Path, lightning: bool, module: Any, **options: Any) -> tuple[Any, torch.nn.Module, str]:
    """``module()`` seeded and fitted; the trainer and what it printed."""
    pl.seed_everything(0, verbose=False)
    module = module()
    options = {"max_epochs": 2, "log_every_n_steps": 1, "enable_checkpointing": False, **options}
    if lightning:
        trainer = quiet_trainer(root, False, **options)
    else:
        from braeburn.lightning import Trainer

        trainer = Trainer(accelerator="cpu", devices=1, enable_progress_bar=False, default_root_dir=str(root),
                          **options)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        trainer.fit(module, classification_data(40, 8), classification_data(20, 6, seed=1))
    return trainer, module, printed.getvalue()


def test_optimizers_lr_schedulers_and_print_as_lightning(tmp_path):
    their_trainer, theirs, their_print = _fit(tmp_path / "lightning", True, LrLogging)
    our_trainer, ours, our_print = _fit(tmp_path / "braeburn", False, LrLogging)
    assert ours.read == theirs.read and [r[0] for r in theirs.read][::5] == [0.2, 0.1]
    assert ours.losses == theirs.losses  # bitwise
    assert float(our_trainer.callback_metrics["lr"]) == float(their_trainer.callback_metrics["lr"])
    said = [line for line in our_print.splitlines() if line.startswith("epoch ")]
    assert said == [line for line in their_print.splitlines() if line.startswith("epoch ")] == [
        "epoch 0 lr 0.2", "epoch 1 lr 0.1"]


class ReadsLogger(Classifier):
    def __init__(self, read: Any):
        super().__init__()
        self.reader, self.seen = read, []

    def on_train_start(self):
        self.seen.append(self.reader(self))


def test_logger_false_gives_no_logger_as_lightning(tmp_path):
    for name, lightning in (("lightning", True), ("braeburn", False)):
        _, module, _ = _fit(tmp_path / name, lightning, lambda: ReadsLogger(lambda m: (m.logger, m.loggers)),
                            logger=False, max_epochs=1)
        assert module.seen == [(None, [])]


@pytest.mark.parametrize("read,named", [
    (lambda m: m.logger.log_dir, "self.logger"),
    (lambda m: m.trainer.logger.log_dir, "trainer.logger.log_dir"),
    (lambda m: m.trainer.logger.log_hyperparams({"a": 1}), "trainer.logger.log_hyperparams"),
    (lambda m: m.trainer.logger.experiment, "trainer.logger.experiment"),
])
def test_lightnings_logger_is_refused_by_name(tmp_path, read, named):
    from braeburn.lightning import LightningArgumentError

    _, lightning_module, _ = _fit(tmp_path / "lightning", True, lambda: ReadsLogger(read), max_epochs=1)
    assert lightning_module.seen[0] is not None or named.endswith("log_hyperparams")
    with pytest.raises(LightningArgumentError, match=named.replace(".", r"\.")) as caught:
        _fit(tmp_path / "braeburn", False, lambda: ReadsLogger(read), max_epochs=1)
    assert "metrics.jsonl" in str(caught.value)


class LogOptions(Classifier):
    """self.log as Lightning's docs vary it: epoch-only, step-only, logger=False, on_step and on_epoch in validation,
    log_dict with batch_size, and a value logged in on_validation_epoch_end."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.losses.append(loss.item())
        self.log("epoch_only", loss, on_step=False, on_epoch=True)
        self.log("step_only", loss * 2, on_step=True, on_epoch=False, prog_bar=True)
        self.log("not_logged", loss * 3, logger=False)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y), on_step=True, on_epoch=True)
        self.log_dict({"val_acc": (logits.argmax(-1) == y).float().mean()}, prog_bar=True, batch_size=len(y))

    def on_validation_epoch_end(self):
        self.log("epoch_seen", float(self.current_epoch))


def _metrics(values: dict) -> dict:
    return {name: round(float(value), 6) for name, value in sorted(values.items())}


def test_self_log_options_and_validate_give_lightnings_metrics(tmp_path):
    """callback_metrics and logged_metrics after fit and after validate(), and validate()'s result, as Lightning's:
    `<name>_epoch` (and `<name>_step` in logged_metrics) for a validation value logged on_step and on_epoch, nothing
    logged with logger=False in logged_metrics, and validate() starting its metrics afresh."""
    seen = {}
    for name, lightning in (("lightning", True), ("braeburn", False)):
        trainer, module, _ = _fit(tmp_path / name, lightning, LogOptions)
        after_fit = (_metrics(trainer.callback_metrics), _metrics(trainer.logged_metrics))
        result = trainer.validate(module, classification_data(20, 6, seed=1), verbose=False)
        seen[name] = (module.losses, after_fit, _metrics(trainer.callback_metrics), _metrics(trainer.logged_metrics),
                      [_metrics(values) for values in result])
    assert seen["braeburn"] == seen["lightning"]
    assert "val_loss_epoch" in seen["lightning"][2] and "val_loss_step" in seen["lightning"][3]
    assert "not_logged" in seen["lightning"][1][0] and "not_logged" not in seen["lightning"][1][1]


def test_a_second_fit_on_the_same_trainer_is_refused_before_training(tmp_path):
    """Lightning's second fit() on one Trainer trains nothing (its loops are at max_epochs); braeburn's trained the
    module again in a new version_N, silently. Now refused, naming a new Trainer and ckpt_path."""
    from braeburn.lightning import LightningArgumentError

    theirs, their_module, _ = _fit(tmp_path / "lightning", True, Classifier, max_epochs=1)
    theirs.fit(their_module, classification_data(40, 8))
    assert len(their_module.losses) == 5  # (Lightning: nothing more trained)
    ours, module, _ = _fit(tmp_path / "braeburn", False, Classifier, max_epochs=1)
    with pytest.raises(LightningArgumentError, match=r"trainer\.fit\(\) a second time") as caught:
        ours.fit(module, classification_data(40, 8))
    assert "new Trainer" in str(caught.value) and "ckpt_path" in str(caught.value)
    assert len(module.losses) == 5
    assert sorted(p.name for p in (tmp_path / "braeburn" / "lightning_logs").iterdir()) == ["version_0"]
