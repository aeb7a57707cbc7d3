"""The Trainer: a complete fit loop built on the Accelerator, its config and its callbacks (braeburn's own; the
Transformers Trainer's names are ``braeburn.Trainer``'s, from compat/transformers/).

Names are loaded on first use, so ``braeburn.trainer.config`` (the parser) works without importing torch.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "Callback": "callbacks", "CallbackList": "callbacks",
    "CheckpointCorruptError": "checkpoint", "CheckpointError": "checkpoint", "CheckpointManager": "checkpoint",
    "ConfigError": "config", "TrainingConfig": "config", "parse_config": "config",
    "EarlyStoppingCallback": "early_stopping", "MetricsLogCallback": "metrics_log", "PlotCallback": "plots",
    "ProgressCallback": "progress", "SignalCallback": "signals", "TrainingInterrupted": "signals",
    "TrainerState": "state", "NonFiniteLossError": "log_window", "Trainer": "loop",
    "EvalLoopOutput": "outputs", "EvalPrediction": "outputs", "PredictionOutput": "outputs", "TrainOutput": "outputs",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'braeburn.trainer' has no attribute {name!r}")
    where = _WHERE[name]
    return getattr(importlib.import_module(where if where.startswith(".") else f".{where}", __name__), name)
