"""The Trainer: a complete fit loop built on the Accelerator, its config and its callbacks (braeburn's own,
``CoreTrainer`` and ``CoreTrainingConfig``; the Transformers Trainer's names are ``braeburn.Trainer``'s, from
compat/transformers/).

Names are loaded on first use, so ``braeburn.trainer.config`` (the parser) works without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

# Paths below this package that give braeburn's public classes (``braeburn.<name>``): where scripts and the docs
# imported them before the package was laid out by concern (``from braeburn.trainer.loop import Trainer``), so an
# old script still trains with the full public Trainer, and an old pickled TrainingArguments loads as the public
# class. braeburn/__init__.py, which Python always runs before this package, sets ``resolve_public`` to its own
# lookup: the core names no peer's layer. braeburn's own classes are CoreTrainer and CoreTrainingConfig.
PUBLIC_NAMES = {
    "Trainer": "Trainer", "loop.Trainer": "Trainer",
    "TrainingConfig": "TrainingConfig", "config.TrainingConfig": "TrainingConfig",
    "TrainingArguments": "TrainingArguments", "config.TrainingArguments": "TrainingArguments",
    "HfArgumentParser": "HfArgumentParser", "TrainerCallback": "TrainerCallback", "TrainerControl": "TrainerControl",
}
resolve_public: Callable[[str], Any] | None = None


def public(path: str) -> Any:
    """``braeburn.<name>`` for ``braeburn.trainer.<path>`` in PUBLIC_NAMES; else AttributeError, as for any
    missing name."""
    if path not in PUBLIC_NAMES or resolve_public is None:
        module, _, name = path.rpartition(".")
        raise AttributeError(f"module {'.'.join(filter(None, (__name__, module)))!r} has no attribute {name!r}")
    return resolve_public(PUBLIC_NAMES[path])


_WHERE = {
    "Callback": "callbacks", "CallbackList": "callbacks",
    "CheckpointCorruptError": "checkpoint", "CheckpointError": "checkpoint", "CheckpointManager": "checkpoint",
    "ConfigError": "config", "CoreTrainingConfig": "config", "parse_config": "config",
    "EarlyStoppingCallback": "early_stopping", "MetricsLogCallback": "metrics_log", "PlotCallback": "plots",
    "ProgressCallback": "progress", "SignalCallback": "signals", "TrainingInterrupted": "signals",
    "TrainerState": "state", "NonFiniteLossError": "log_window", "CoreTrainer": "loop",
    "EvalLoopOutput": "outputs", "EvalPrediction": "outputs", "PredictionOutput": "outputs", "TrainOutput": "outputs",
}

__all__ = sorted([*_WHERE, *(name for name in PUBLIC_NAMES if "." not in name)])


def __getattr__(name: str):
    if name not in _WHERE:
        return public(name)
    where = _WHERE[name]
    return getattr(importlib.import_module(where if where.startswith(".") else f".{where}", __name__), name)
