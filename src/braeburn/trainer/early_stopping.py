"""Early stopping: end training when an eval metric stops improving."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .callbacks import Callback
from .state import TrainerState

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer


class EarlyStoppingCallback(Callback):
    """Stop after ``patience`` evaluations in a row without an improvement of more than ``min_delta``.

    ``mode`` is "min", "max", or "auto" (max for metrics named like accuracy, f1, precision,
    recall, auc or score; min otherwise). Needs evaluation during training (eval_strategy).

    Transformers' spelling works too: ``EarlyStoppingCallback(early_stopping_patience=1,
    early_stopping_threshold=0.0)`` (positionally as well) watches the Trainer's
    ``metric_for_best_model`` in the direction of ``greater_is_better``, as Transformers does.
    """

    def __init__(self, metric: str | int | None = None, patience: int | float | None = None, min_delta: float = 0.0,
                 mode: str = "auto", *, early_stopping_patience: int | None = None,
                 early_stopping_threshold: float | None = None):
        if isinstance(metric, int) and not isinstance(metric, bool):  # Transformers' positional (patience, threshold)
            metric, early_stopping_patience, early_stopping_threshold = None, metric, patience
            patience = None
        patience = early_stopping_patience if early_stopping_patience is not None else patience
        patience = 3 if patience is None else patience
        min_delta = early_stopping_threshold if early_stopping_threshold is not None else min_delta
        if patience < 1:
            raise ValueError(f"EarlyStoppingCallback(patience={patience}): must be >= 1")
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"EarlyStoppingCallback(mode={mode!r}): choose auto, min or max")
        self.early_stopping_patience, self.early_stopping_threshold = patience, abs(min_delta)
        self.patience, self.min_delta = patience, abs(min_delta)
        self.metric, self.mode = "", mode
        if metric is not None:
            self._watch(metric, mode)
        self.best: float | None = None
        self.bad_evaluations = 0

    def _watch(self, metric: str, mode: str) -> None:
        self.metric = metric if metric.startswith("eval_") else f"eval_{metric}"
        if mode == "auto":
            wants_max = any(word in self.metric for word in ("acc", "f1", "precision", "recall", "auc", "score"))
            mode = "max" if wants_max else "min"
        self.mode = mode

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        if not self.metric:  # Transformers' way: the Trainer's metric_for_best_model and greater_is_better
            config = trainer.config
            self._watch(config.metric_for_best_model or "eval_loss", "max" if config.greater_is_better else "min")
        if trainer.config.eval_strategy == "no":
            raise ValueError("EarlyStoppingCallback needs evaluations during training, but eval_strategy='no'. "
                             "Pass --eval_strategy epoch (or steps) and an eval_dataset.")

    def improved(self, value: float) -> bool:
        if self.best is None:
            return math.isfinite(value)
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_evaluate(self, trainer: "Trainer", state: TrainerState, metrics: dict[str, float]) -> None:
        if self.metric not in metrics:
            raise KeyError(f"EarlyStoppingCallback watches {self.metric!r}, which the evaluation did not report; "
                           f"it reported {', '.join(sorted(metrics))}. Pass one of those as metric=.")
        value = float(metrics[self.metric])
        if self.improved(value):
            self.best, self.bad_evaluations = value, 0
            return
        self.bad_evaluations += 1
        if self.bad_evaluations >= self.patience:
            state.request_stop(f"early stopping: {self.metric} has not improved on {self.best:.6g} for "
                               f"{self.patience} evaluation(s)")
