"""What a resume changes, and what braeburn does about it: never silent.

A checkpoint counts its progress in optimizer steps of its own size (samples a step = per-device
batch x processes x gradient accumulation). The data position is kept in samples of the epoch and
regrouped into the new run's batches when loaded (``distributed.checkpoint.resume_position``). A run
that resumes with another size therefore continues from the same sample of the same epoch, and its
step count is converted into steps of the new size (the schedule goes on from there); compared in
the old units against a ``max_steps`` in the new ones, it would stop after 0-2 steps.

A new learning rate is applied to the restored optimizer and schedule (they would keep the old one);
a ``max_steps`` below the checkpoint's step is an error (or, where the caller asks, as Lightning does: the
checkpoint is restored and nothing is trained); each change is named once, old -> new.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..plan.option_spelling import advice, option
from .checkpoint import CheckpointError
from .state import TrainerState


class ResumeError(CheckpointError):
    """This run's options cannot continue the checkpoint (the message names both values and the fix)."""


@dataclass(frozen=True)
class BatchLayout:
    """How many samples one optimizer step takes, and from what."""

    per_device: int
    processes: int
    accumulation: int

    @property
    def samples_per_step(self) -> int:
        return self.per_device * self.processes * self.accumulation

    def describe(self) -> str:
        return (f"{self.samples_per_step} samples a step (per_device_train_batch_size {self.per_device} x "
                f"{self.processes} process{'es' if self.processes != 1 else ''} x gradient_accumulation_steps "
                f"{self.accumulation})")

    def changes(self, new: "BatchLayout") -> str:
        named = (("per_device_train_batch_size", self.per_device, new.per_device),
                 ("world size", self.processes, new.processes),
                 ("gradient_accumulation_steps", self.accumulation, new.accumulation))
        return ", ".join(f"{name} {old} -> {now}" for name, old, now in named if old != now)


def layout_of(state: TrainerState) -> BatchLayout | None:
    """The layout a state was trained with; None for a checkpoint written before braeburn kept it."""
    values = (state.per_device_train_batch_size, state.num_processes, state.gradient_accumulation_steps)
    return BatchLayout(*values) if all(values) else None


def reconcile(saved: TrainerState, run: TrainerState, loader: Any, optimizer: Any, scheduler: Any,
              folder: Path, max_steps_option: str, stop_past_max_steps: bool = False) -> list[str]:
    """Make ``saved`` (the checkpoint's state) continue as this run (``run``: its plan) says.

    Returns the messages to show. Moves ``loader`` back to a step boundary of the new size where the
    size changed, and rescales the optimizer's learning rate where it changed. Raises
    :class:`ResumeError` when this run's max_steps is below the checkpoint's step; with
    ``stop_past_max_steps`` the run ends at the checkpoint's step instead (restored, nothing trained).
    """
    notes = []
    old, new = layout_of(saved), layout_of(run)
    if old is not None and new is not None and old != new:
        notes.append(_convert_steps(saved, run, old, new, loader, scheduler))
    if saved.train_samples and run.train_samples and saved.train_samples != run.train_samples:
        notes.append(_other_data(saved.train_samples, run, loader))
    if saved.learning_rate is not None and run.learning_rate is not None and saved.learning_rate != run.learning_rate:
        _rescale_learning_rate(optimizer, scheduler, run.learning_rate / saved.learning_rate)
        notes.append(f"learning_rate {saved.learning_rate:g} -> {run.learning_rate:g}: the checkpoint's optimizer "
                     f"and schedule were restored with {saved.learning_rate:g}; braeburn scales them to "
                     f"{run.learning_rate:g} and continues the schedule from step {saved.global_step}."
                     + advice(" Resume with {} to keep the checkpoint's rate.", "learning_rate",
                              f"{saved.learning_rate:g}"))
    if saved.global_step > run.max_steps and stop_past_max_steps:
        notes.append(f"the checkpoint {folder} (step {saved.global_step}) is past the end that "
                     f"{option(max_steps_option.removeprefix('--'))} sets (step {run.max_steps}): its state is "
                     "restored, and nothing is trained")
        run.max_steps = saved.global_step
    if saved.global_step > run.max_steps:
        raise ResumeError(
            f"{option(max_steps_option.removeprefix('--'))} gives max_steps={run.max_steps}, below the step of the "
            f"checkpoint {folder} ({saved.global_step}{_in_new_units(old, new)}): resuming would train nothing and "
            f"end at step {saved.global_step}, not {run.max_steps}. Pass {option('max_steps')} above "
            f"{saved.global_step} (the total, counting the steps done), or resume from an earlier checkpoint.")
    for name in ("max_steps", "steps_per_epoch", "num_epochs", "per_device_train_batch_size", "num_processes",
                 "gradient_accumulation_steps", "learning_rate", "train_samples"):
        setattr(saved, name, getattr(run, name))  # the plan of this run from here on
    return notes


def samples_in(dataset: Any) -> int:
    """``len(dataset)``, or 0 when it has no length (a stream)."""
    try:
        return len(dataset)
    except (TypeError, NotImplementedError):
        return 0


def _other_data(before: int, run: TrainerState, loader: Any) -> str:
    """What a resume on a train_dataset of another size does: the epoch and batch it goes on from."""
    epoch, done, batches = loader.epoch, loader.batches_yielded, len(loader)
    where = (f"the checkpoint had trained {done} batches of epoch {epoch}, and the epoch now has {batches}: epoch "
             f"{epoch} ends there, and training goes on with epoch {epoch + 1}" if done >= batches else
             f"training goes on from batch {done} of the {batches} that epoch {epoch} now has, in the order of "
             f"{run.train_samples} samples, so the rest of this epoch is not exactly the samples the checkpoint had "
             "not yet trained on")
    return (f"train_dataset {before} -> {run.train_samples} samples since the checkpoint: {where}; an epoch is now "
            f"{run.steps_per_epoch} steps, and the run ends at step {run.max_steps}. Resume with the same "
            "train_dataset to continue exactly where the checkpoint stopped.")


def _in_new_units(old: BatchLayout | None, new: BatchLayout | None) -> str:
    return "" if old is None or new is None or old == new else ", in steps of this run's size"


def _convert_steps(saved: TrainerState, run: TrainerState, old: BatchLayout, new: BatchLayout, loader: Any,
                   scheduler: Any) -> str:
    changed, before = old.changes(new), saved.global_step
    if old.samples_per_step == new.samples_per_step:
        return (f"{changed}: the same {new.samples_per_step} samples a step, so the run continues exactly at step "
                f"{before}.")
    saved.global_step = _step_at_loader_position(loader, new.accumulation, run.steps_per_epoch)
    inner = getattr(scheduler, "scheduler", scheduler)
    if isinstance(getattr(inner, "last_epoch", None), int):
        inner.last_epoch = saved.global_step  # the schedule goes on from the same point of the new plan
    return (f"{changed}: the checkpoint took {old.describe()}, this run takes {new.describe()}. Its step {before} "
            f"is step {saved.global_step} at the new size: training continues from there to step {run.max_steps} "
            f"(epoch {loader.epoch}, batch {loader.batches_yielded} of {len(loader)}), on the samples of this epoch "
            "not yet trained on (at most one step's samples are seen twice, none skipped), and the learning-rate "
            "schedule from that step.")


def _step_at_loader_position(loader: Any, accumulation: int, steps_per_epoch: int) -> int:
    """The new run's step count at the loader's restored position; a position inside an accumulation
    window moves back to the window's start (those batches are trained on again, none is skipped)."""
    done = loader.batches_yielded
    if done >= len(loader):
        return (loader.epoch + 1) * steps_per_epoch
    boundary = done - done % accumulation
    if boundary != done:
        loader.load_state_dict({"epoch": loader.epoch, "batches_yielded": boundary})
    return loader.epoch * steps_per_epoch + boundary // accumulation


def _rescale_learning_rate(optimizer: Any, scheduler: Any, ratio: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] *= ratio
        if "initial_lr" in group:
            group["initial_lr"] *= ratio
    inner = getattr(scheduler, "scheduler", scheduler)
    if isinstance(getattr(inner, "base_lrs", None), list):
        inner.base_lrs = [lr * ratio for lr in inner.base_lrs]
