"""When validation runs, and in which order the hooks come around it, under Lightning's own Trainer and under
``braeburn.lightning.Trainer``, in the same test: the hooks a callback and the module record (with the names in
``trainer.callback_metrics`` as each hook sees them), the losses, and the metrics after fit. Lightning validates an
epoch before its ``on_train_epoch_end`` (which sees the validation's metrics), runs a sanity check before training,
and validates part way through an epoch with ``val_check_interval``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.compat.catalogue import Catalogue
from tests.compat.lightning.scripts import Classifier, classification_data, pl, quiet_trainer

CATALOGUE = Catalogue("lightning")
HOOKS = ("on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_train_epoch_start",
         "on_train_epoch_end", "on_validation_start", "on_validation_end", "on_validation_epoch_start",
         "on_validation_epoch_end")


def _recording(hook: str, module_hook: bool) -> Any:
    def record(self, *args: Any) -> None:
        trainer = self.trainer if module_hook else args[0]
        self.calls.append(f"{'module' if module_hook else 'callback'}.{hook}: {sorted(trainer.callback_metrics)} "
                          f"epoch {trainer.current_epoch} step {trainer.global_step}")
    return record


class HookRecorder(pl.Callback):
    """A user's callback with every hook braeburn.lightning calls, recording what each sees."""

    def __init__(self, calls: list[str]):
        self.calls = calls


class HookModule(Classifier):
    """The module's hooks, recorded in the same list; on_train_epoch_end logs the epoch's val_loss as it reads it."""

    def __init__(self, calls: list[str]):
        super().__init__()
        self.calls = calls

    def on_train_epoch_end(self):
        self.calls.append(f"module.on_train_epoch_end: {sorted(self.trainer.callback_metrics)} "
                          f"epoch {self.current_epoch} step {self.global_step}")
        seen = self.trainer.callback_metrics.get("val_loss")
        self.log("val_loss_at_epoch_end", -1.0 if seen is None else float(seen))


for _hook in HOOKS:
    setattr(HookRecorder, _hook, _recording(_hook, module_hook=False))
    if _hook != "on_train_epoch_end":
        setattr(HookModule, _hook, _recording(_hook, module_hook=True))


class StopAtEpoch(pl.Callback):
    """A user's own early stop: ``trainer.should_stop = True`` from ``hook`` in epoch 1 (not in the sanity check)."""

    def __init__(self, hook: str):
        self.hook = hook

    def _stop(self, trainer: Any, hook: str) -> None:
        if hook == self.hook and trainer.current_epoch == 1 and not trainer.sanity_checking:
            trainer.should_stop = True

    def on_validation_end(self, trainer, module):
        self._stop(trainer, "on_validation_end")

    def on_train_epoch_end(self, trainer, module):
        self._stop(trainer, "on_train_epoch_end")


def _run(root: Path, lightning: bool, options: dict[str, Any], ckpt_path: str | None = None) -> dict[str, Any]:
    calls: list[str] = []
    pl.seed_everything(0, verbose=False)
    module = HookModule(calls)
    options = dict(options)
    extra = options.pop("callbacks", [])
    common = {"max_epochs": 2, "log_every_n_steps": 2, "enable_checkpointing": ckpt_path is not None or
              options.get("max_epochs") == 1, "callbacks": [*extra, HookRecorder(calls)], **options}
    if lightning:
        trainer = quiet_trainer(root, False, **common)
    else:
        from braeburn.lightning import Trainer

        trainer = Trainer(accelerator="cpu", devices=1, enable_progress_bar=False, default_root_dir=str(root),
                          **common)
    trainer.fit(module, classification_data(40, 8), classification_data(20, 6, seed=1), ckpt_path=ckpt_path)
    return {"calls": calls, "losses": module.losses, "steps": trainer.global_step, "epoch": trainer.current_epoch,
            "metrics": {name: float(value) for name, value in trainer.callback_metrics.items()},
            "should_stop": trainer.should_stop}


def assert_same_run(tmp_path: Path, options: dict[str, Any]) -> dict[str, Any]:
    theirs = _run(tmp_path / "lightning", True, options)
    ours = _run(tmp_path / "braeburn", False, options)
    assert ours["calls"] == theirs["calls"]
    assert ours["losses"] == theirs["losses"]  # bitwise
    assert (ours["steps"], ours["epoch"], ours["should_stop"]) == (theirs["steps"], theirs["epoch"],
                                                                   theirs["should_stop"])
    assert ours["metrics"] == pytest.approx(theirs["metrics"], rel=1e-6, abs=1e-7)  # (weighted means: sum order)
    return theirs


HOW = ("the hooks of a callback and of the module in Lightning's order, each seeing the same names in "
       "callback_metrics; losses bitwise, metrics within 1e-6")
BRAEBURN_TRAINER = "braeburn.lightning.Trainer: "


def same_run_idiom(name: str, options: dict[str, Any], how: str = HOW) -> None:
    @CATALOGUE.idiom(BRAEBURN_TRAINER + name, "identical", how)
    def idiom(tmp_path: Path) -> None:
        assert_same_run(tmp_path, options)


same_run_idiom("an epoch's validation, then on_train_epoch_end (which reads val_loss)", {},
               "the validation runs before on_train_epoch_end (callbacks', then the module's), which sees its "
               "val_loss in callback_metrics; " + HOW)
same_run_idiom("Trainer(num_sanity_val_steps=2) (the default: a sanity check before training)",
               {"num_sanity_val_steps": 2},
               "the validation hooks over the first 2 batches before on_train_start, their values forgotten; "
               "torch's random state untouched by it; " + HOW)
same_run_idiom("Trainer(num_sanity_val_steps=0)", {"num_sanity_val_steps": 0})
same_run_idiom("Trainer(check_val_every_n_epoch=2)", {"check_val_every_n_epoch": 2, "max_epochs": 3})
same_run_idiom("Trainer(val_check_interval=2) (an int: every 2 training batches)", {"val_check_interval": 2})
same_run_idiom("Trainer(val_check_interval=1) (an int: after every batch)", {"val_check_interval": 1})
same_run_idiom("Trainer(val_check_interval=0.5)", {"val_check_interval": 0.5})
same_run_idiom("Trainer(limit_val_batches=0) (no validation)", {"limit_val_batches": 0})
same_run_idiom("Trainer(max_steps=3) (stops part way through an epoch: on_train_epoch_end still called)",
               {"max_steps": 3, "max_epochs": -1})

same_run_idiom("trainer.should_stop = True in a callback's on_validation_end (a user's own early stopping)",
               {"callbacks": [StopAtEpoch("on_validation_end")], "max_epochs": 4},
               "the run stops after that epoch's end (its on_train_epoch_end called), as Lightning; " + HOW)
same_run_idiom("trainer.should_stop = True in on_train_epoch_end",
               {"callbacks": [StopAtEpoch("on_train_epoch_end")], "max_epochs": 4})
same_run_idiom("trainer.should_stop = True at a validation part way through an epoch (val_check_interval=2)",
               {"callbacks": [StopAtEpoch("on_validation_end")], "max_epochs": 4, "val_check_interval": 2},
               "the run stops at that batch, the epoch's on_train_epoch_end still called, as Lightning; " + HOW)


def test_should_stop_from_validation_stops_the_run_as_lightning(tmp_path):
    """The fast tier's check: stopped in epoch 1 of 4, as Lightning (before, the flag was ignored: 4 epochs)."""
    theirs = assert_same_run(tmp_path, {"callbacks": [StopAtEpoch("on_validation_end")], "max_epochs": 4,
                                        "num_sanity_val_steps": 0})
    assert (theirs["steps"], theirs["epoch"], theirs["should_stop"]) == (10, 2, True)


class StopAtStart(pl.Callback):
    def on_train_start(self, trainer, module):
        trainer.should_stop = True


def test_should_stop_where_braeburn_cannot_stop_as_lightning_is_refused_by_name(tmp_path):
    from braeburn.lightning import LightningArgumentError, Trainer

    trainer = Trainer(accelerator="cpu", enable_progress_bar=False, default_root_dir=str(tmp_path),
                      callbacks=[StopAtStart()])
    with pytest.raises(LightningArgumentError, match="trainer.should_stop = True in on_train_start") as caught:
        trainer.fit(Classifier(), classification_data(40, 8))
    assert "on_validation_end" in str(caught.value) and "max_epochs" in str(caught.value)


def test_lightnings_trainer_attributes_it_lacks_are_refused_by_name():
    from braeburn.lightning import LightningArgumentError, Trainer

    trainer = Trainer(accelerator="cpu")
    for name in ("lightning_module", "num_training_batches", "progress_bar_metrics", "optimizers", "state"):
        assert hasattr(pl.Trainer, name) or name in vars(pl.Trainer(logger=False, enable_progress_bar=False))
        with pytest.raises(LightningArgumentError, match=rf"trainer\.{name} is not in braeburn\.lightning"):
            getattr(trainer, name)
        # code that probes a Trainer (hasattr, getattr with a default) gets the answer of any missing name
        assert not hasattr(trainer, name) and getattr(trainer, name, "default") == "default"
    with pytest.raises(AttributeError, match="no_such_thing"):
        trainer.no_such_thing  # noqa: B018  (not Lightning's: Python's own error)
    assert trainer.should_stop is False


def _resumed(root: Path, lightning: bool, epochs: int) -> dict[str, Any]:
    """One epoch, then a new Trainer resumes its checkpoint to ``epochs``: what the second fit records."""
    _run(root, lightning, {"max_epochs": 1})
    first = root / "lightning_logs" / "version_0" / "checkpoints" / "epoch=0-step=5.ckpt"
    return _run(root, lightning, {"max_epochs": epochs}, ckpt_path=str(first))


@pytest.mark.parametrize("epochs", [3, 1])
def test_a_resumed_fit_calls_lightnings_hooks(tmp_path, epochs):
    """Resumed at an epoch's end: the sanity check again, no hook of the finished epoch (to max_epochs=1: nothing
    trained, the sanity check alone), as Lightning."""
    theirs = _resumed(tmp_path / "lightning", True, epochs)
    ours = _resumed(tmp_path / "braeburn", False, epochs)
    assert ours["calls"] == theirs["calls"] and ours["losses"] == theirs["losses"]
    assert any(call.startswith("module.on_train_start: []") for call in theirs["calls"]) == (epochs > 1)


@pytest.mark.slow  # 9 idioms, two fits each
@pytest.mark.parametrize("idiom", CATALOGUE.params())
def test_lightning_validation_idiom(idiom, tmp_path):
    idiom.run(tmp_path)


def test_on_train_epoch_end_sees_the_epochs_validation(tmp_path):
    """The fast tier's check: the epoch's val_loss is in callback_metrics when on_train_epoch_end runs; each hook
    sees Lightning's current_epoch and global_step (on_train_end: the epoch count after the last, as Lightning)."""
    theirs = assert_same_run(tmp_path, {"max_epochs": 1, "num_sanity_val_steps": 0})
    epoch_end = [call for call in theirs["calls"] if ".on_train_epoch_end" in call]
    assert all("'val_loss'" in call for call in epoch_end) and len(epoch_end) == 2
    assert theirs["metrics"]["val_loss_at_epoch_end"] == pytest.approx(theirs["metrics"]["val_loss"])
    assert "callback.on_train_end: ['train_loss', 'train_loss_epoch', 'train_loss_step', 'val_acc', 'val_loss', " \
        "'val_loss_at_epoch_end'] epoch 1 step 5" in theirs["calls"]


@pytest.mark.parametrize("options,words", [
    ({"limit_val_batches": 0.5}, ["limit_val_batches=0.5", "pass 0"]),
    ({"check_val_every_n_epoch": None}, ["check_val_every_n_epoch=None", "check_val_every_n_epoch=N"]),
    ({"val_check_interval": 2, "accumulate_grad_batches": 2}, ["val_check_interval=2", "accumulate_grad_batches=2"]),
    ({"val_check_interval": 1.5}, ["val_check_interval=1.5", "(0, 1]"]),
    ({"num_sanity_val_steps": -2}, ["num_sanity_val_steps=-2"]),
])
def test_validation_options_braeburn_does_not_do_are_refused_by_name(options, words):
    from braeburn.lightning import LightningArgumentError, Trainer

    with pytest.raises(LightningArgumentError) as caught:
        Trainer(accelerator="cpu", **options)
    assert len(caught.value.errors) == 1 and all(word in str(caught.value) for word in words)


class Plateau(Classifier):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}


@pytest.mark.parametrize("options,words", [
    ({"val_check_interval": 6}, ["val_check_interval=6", "5 training batches"]),
    ({"check_val_every_n_epoch": 2, "model": Plateau}, ["ReduceLROnPlateau", "check_val_every_n_epoch=2"]),
    ({"val_check_interval": 0.5, "model": Plateau}, ["ReduceLROnPlateau", "val_check_interval=0.5"]),
])
def test_validation_that_cannot_match_lightning_is_refused_before_training(tmp_path, options, words):
    from braeburn.lightning import LightningArgumentError, Trainer

    model = options.pop("model", Classifier)()
    trainer = Trainer(accelerator="cpu", enable_progress_bar=False, default_root_dir=str(tmp_path), **options)
    with pytest.raises(LightningArgumentError) as caught:
        trainer.fit(model, classification_data(40, 8), classification_data(20, 6, seed=1))
    assert all(word in str(caught.value) for word in words) and model.losses == []
    assert not (tmp_path / "lightning_logs").exists() or not any((tmp_path / "lightning_logs").iterdir())
