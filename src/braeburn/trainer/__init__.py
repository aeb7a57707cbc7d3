"""The Trainer: a complete fit loop built on the Accelerator, its config and its callbacks.

Names are loaded on first use, so ``braeburn.trainer.config`` (the parser) works without importing torch.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "Callback": "callbacks", "CallbackList": "callbacks",
    "CheckpointCorruptError": "checkpoint", "CheckpointError": "checkpoint", "CheckpointManager": "checkpoint",
    "ConfigError": "config", "TrainingConfig": "config", "TrainingArguments": "config", "parse_config": "config",
    "HfArgumentParser": "..compat.transformers.trainer_api", "TrainerCallback": "..compat.transformers.callbacks",
    "TrainerControl": "..compat.transformers.callbacks",
    "EarlyStoppingCallback": "early_stopping", "MetricsLogCallback": "metrics_log", "PlotCallback": "plots",
    "ProgressCallback": "progress", "SignalCallback": "signals", "TrainingInterrupted": "signals",
    "TrainerState": "state",
    "EvalPrediction": "loop", "NonFiniteLossError": "loop", "PredictionOutput": "loop", "Trainer": "loop",
    "TrainOutput": "loop", "EvalLoopOutput": "..compat.transformers.overrides",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'braeburn.trainer' has no attribute {name!r}")
    where = _WHERE[name]
    return getattr(importlib.import_module(where if where.startswith(".") else f".{where}", __name__), name)
