"""Lightning's own callbacks (``ModelCheckpoint``, ``EarlyStopping``, ...) passed to ``braeburn.lightning.Trainer``.

They read and drive Lightning's Trainer itself (its loops, state, strategy, loggers and optimizers), which
braeburn.lightning does not run: passed through, each would crash inside Lightning part way into training. So
every callback that takes its behaviour from a class of the ``lightning`` or ``pytorch_lightning`` packages is
refused before training, by name, with what braeburn offers instead where it offers something. A callback of the
user's own (a subclass of Lightning's base ``Callback`` alone, or any object with Lightning's hooks) is kept.
"""

from __future__ import annotations

from typing import Any

_LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning")
_BASE = "Callback"  # Lightning's base class: its hooks do nothing; a subclass of it alone is the user's own code

OWN_TRAINER = ("run this script with Lightning's own Trainer and braeburn's extension: from lightning import Trainer; "
                "Trainer(..., callbacks=[braeburn.lightning.Braeburn()])")
# What braeburn.lightning does instead of each of Lightning's callbacks, where it does something.
_INSTEAD = {
    "ModelCheckpoint": "braeburn.lightning saves its own checkpoint at the end of every epoch, in "
                       "lightning_logs/version_N/checkpoint-<step> (the last one kept; Trainer(enable_checkpointing="
                       "False) turns them off), and fit(ckpt_path='last') resumes it: remove ModelCheckpoint. For "
                       f"monitor=, save_top_k= or every_n_train_steps=, {OWN_TRAINER}",
    "EarlyStopping": "braeburn.lightning trains to max_epochs or max_steps and does not stop early: remove "
                     f"EarlyStopping and bound the run with Trainer(max_epochs=N), or {OWN_TRAINER}",
    "LearningRateMonitor": "braeburn already writes the learning rate with each log record of metrics.jsonl in the "
                           "run's version_N (every Trainer(log_every_n_steps=N) steps): remove LearningRateMonitor",
    "ProgressBar": "braeburn shows its own progress (Trainer(enable_progress_bar=False) turns it off): remove it",
    "ModelSummary": "braeburn prints no model summary: remove it",
    "Timer": f"braeburn.lightning has no time limit: bound the run with Trainer(max_steps=N) or max_epochs, or "
             f"{OWN_TRAINER}",
    "GradientAccumulationScheduler": "for a fixed count, pass Trainer(accumulate_grad_batches=N) instead; for a "
                                     f"schedule, {OWN_TRAINER}",
}
# braeburn's own extension for Lightning's Trainer (extension.py), by module and name: checked without importing it.
_EXTENSION = ("braeburn.compat.lightning.extension", "Braeburn")
_EXTENSION_ERROR = ("callbacks=[Braeburn()]: braeburn.lightning.Braeburn brings braeburn into Lightning's own Trainer, "
                    "and braeburn.lightning.Trainer is braeburn's Trainer already (its device facts, precision and "
                    "summary are on): remove Braeburn() here, or keep it and use Lightning's own Trainer: from "
                    "lightning import Trainer; Trainer(..., callbacks=[braeburn.lightning.Braeburn()])")

# Lightning's subclasses that take the way out of their family.
_FAMILY = {"TQDMProgressBar": "ProgressBar", "RichProgressBar": "ProgressBar", "RichModelSummary": "ModelSummary"}


def lightning_class(callback: Any) -> str | None:
    """The name of the Lightning class ``callback`` takes its behaviour from (its own class, or the nearest
    Lightning class it derives from, Lightning's base ``Callback`` aside); None for a callback of the user's own."""
    for cls in type(callback).__mro__:
        if cls.__module__.split(".")[0] in _LIGHTNING_PACKAGES and cls.__name__ != _BASE:
            return cls.__name__
    return None


def callback_errors(callbacks: list[Any]) -> list[str]:
    """One error per Lightning callback in ``callbacks``, naming it and the way out."""
    errors = []
    for callback in callbacks:
        if any((cls.__module__, cls.__name__) == _EXTENSION for cls in type(callback).__mro__):
            errors.append(_EXTENSION_ERROR)
            continue
        name = lightning_class(callback)
        if name is None:
            continue
        shown = name if type(callback).__name__ == name else f"{type(callback).__name__} (a {name})"
        instead = _INSTEAD.get(_FAMILY.get(name, name), f"remove it, or {OWN_TRAINER}")
        errors.append(f"callbacks=[{shown}]: Lightning's own {name} drives Lightning's Trainer (its loops, state and "
                      f"loggers), which braeburn.lightning does not run, so it would fail part way into training; "
                      f"{instead}")
    return errors


__all__ = ["OWN_TRAINER", "callback_errors", "lightning_class"]

