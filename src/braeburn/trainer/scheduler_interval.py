"""When the Trainer steps a scheduler the user gave: after every optimizer step (the Transformers Trainer's rule),
once per epoch when asked as Lightning asks, or after each evaluation for ReduceLROnPlateau (Transformers' rule).

A scheduler is given as ``optimizers=(opt, sched)`` / ``lr_scheduler=sched``, or as Lightning's dict
``{"scheduler": sched, "interval": "epoch", "frequency": 1, "monitor": "eval_loss"}``. braeburn cannot tell from a
bare StepLR whether it was written for steps or epochs (Lightning steps a bare one per epoch, Transformers per
step), so for the schedulers usually written per epoch it says once what it does and how to ask for the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..plan.option_spelling import advice, option
from ..accelerator.prepared_optim import USUALLY_PER_EPOCH

_INTERVALS = ("step", "epoch")
_LIGHTNING_KEYS = {"scheduler", "interval", "frequency", "monitor", "name", "strict"}
_PLATEAU = {"ReduceLROnPlateau", "GreedyLR"}  # step(metric): Transformers steps them after each evaluation


@dataclass(frozen=True)
class SchedulerInterval:
    """How often the Trainer steps the scheduler: ``interval`` "step" (optimizer steps) or "epoch", every
    ``frequency`` of them; a plateau scheduler steps after each evaluation with ``monitor`` (default: the
    metric_for_best_model, else eval_loss)."""

    interval: str = "step"
    frequency: int = 1
    monitor: str | None = None
    given: bool = False  # the user said the interval (a Lightning dict)


def split_scheduler(given: Any) -> tuple[Any, SchedulerInterval]:
    """(the scheduler, its interval) from a scheduler or a Lightning scheduler dict; a bad dict raises the fix."""
    if not isinstance(given, Mapping):
        return given, SchedulerInterval()
    unknown = set(given) - _LIGHTNING_KEYS
    interval, frequency = given.get("interval", "epoch"), given.get("frequency", 1)  # Lightning's defaults
    if "scheduler" not in given or unknown or interval not in _INTERVALS or \
            isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
        raise ValueError(f"lr_scheduler={dict(given)!r} is not a scheduler dict braeburn understands: give "
                         "{'scheduler': sched, 'interval': 'step' or 'epoch', 'frequency': n >= 1, 'monitor': "
                         "'eval_loss'} (Lightning's keys), or the scheduler itself to step it per optimizer step")
    return given["scheduler"], SchedulerInterval(interval, frequency, given.get("monitor"), given=True)


def is_plateau(scheduler: Any) -> bool:
    return type(scheduler).__name__ in _PLATEAU


def per_step_note(scheduler: Any, interval: SchedulerInterval, steps_per_epoch: int) -> str | None:
    """What to say once when a bare, usually-per-epoch scheduler will step per optimizer step."""
    name = type(scheduler).__name__
    if interval.given or steps_per_epoch <= 1 or name not in USUALLY_PER_EPOCH:
        return None
    return (f"the lr_scheduler you gave ({name}) steps after every optimizer step ({steps_per_epoch} per epoch), as "
            "the Transformers Trainer steps it; Lightning steps a bare scheduler once per epoch. If it is meant per "
            "epoch, pass optimizers=(optimizer, {'scheduler': scheduler, 'interval': 'epoch'}).")


class SchedulerSteps:
    """Steps the prepared scheduler at the moments its interval names (stateless: a resumed run agrees)."""

    def __init__(self, prepared: Any, interval: SchedulerInterval, metric_for_best_model: str | None):
        self.prepared, self.interval = prepared, interval
        self.plateau = is_plateau(getattr(prepared, "scheduler", prepared))
        # steps every this many optimizer steps (0: never after one; interval is frozen, so this is read once)
        self._every_steps = interval.frequency if not self.plateau and interval.interval == "step" else 0
        name = interval.monitor or metric_for_best_model or "loss"
        self.monitor = name if name.startswith("eval_") else f"eval_{name}"

    def after_optimizer_step(self, global_step: int) -> None:
        """Called after each optimizer step that updated the weights (global_step counts this one)."""
        every = self._every_steps
        if every and global_step % every == 0:
            self.prepared.step()

    def after_epoch(self, epoch: int) -> None:
        if not self.plateau and self.interval.interval == "epoch" and (epoch + 1) % self.interval.frequency == 0:
            self.prepared.scheduler.step()  # the inner one: the epoch ended, whatever the last batch's step did

    def after_evaluate(self, metrics: Mapping[str, float]) -> None:
        """A plateau scheduler steps on the monitored metric after each evaluation during training."""
        if not self.plateau:
            return
        if self.monitor not in metrics:
            raise KeyError(f"the ReduceLROnPlateau scheduler monitors {self.monitor!r}, which the evaluation did not "
                           f"return (it returned {sorted(metrics)}): set "
                           + advice("{} (or ", "metric_for_best_model") + "the scheduler dict's 'monitor'"
                           + advice(")", "metric_for_best_model")
                           + f" to one of them, or return it from {option('compute_metrics')}")
        self.prepared.scheduler.step(metrics[self.monitor])


__all__ = ["SchedulerInterval", "SchedulerSteps", "is_plateau", "per_step_note", "split_scheduler"]
