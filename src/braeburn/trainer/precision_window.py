"""The Trainer's ``mixed_precision="auto"`` measurement (braeburn.precision_trial), before the first step.

Where the plan left candidates to measure (MPS), the Trainer trains ``WARMUP_STEPS + MEASURE_STEPS`` steps of
its own model on the first ``per_device_train_batch_size`` samples of the training set in float32 and in each
candidate, each from the same weights, optimizer state and random state, puts all of it back, and trains
the run in the precision :func:`braeburn.precision_trial.decide` picks. One line shows the numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from .. import state as state_io
from ..data import cast_float64, move_to_device
from ..precision_trial import Snapshot, decide, measure_reason, run_trials

if TYPE_CHECKING:
    from .loop import Trainer


def choose_precision(trainer: "Trainer", loader: Any) -> dict[str, Any] | None:
    """Measure and switch the Accelerator to the winner; returns the record for metrics.jsonl (None: nothing
    was left to measure)."""
    acc, state = trainer.accelerator, trainer.state
    candidates = acc.plan.precision_candidates
    if not candidates:
        return None
    batch = _first_batch(loader, acc.device)
    why_not = measure_reason(state.max_steps - state.global_step, acc.num_processes,
                             bool(trainer._overrides.training_step))
    if why_not is None and batch is None:
        why_not = "the training set is an iterable dataset, whose first batch cannot be read without using it up"
    if why_not is not None:
        acc.set_precision("no", f"auto: float32, not measured: {why_not}")
        return {"precision": "no", "measured": False, "reason": acc.plan.precision_reason}
    trials = _measure(trainer, batch, ("no", *candidates))
    decision = decide(trials)
    acc.set_precision(decision.precision, decision.reason)
    acc.print(f"braeburn: precision {decision.precision} on {acc.device}, timed on your model: {decision.table}: "
              f"{decision.reason}")
    return {"precision": decision.precision, "measured": True, "reason": decision.reason,
            "trials": [trial.__dict__ for trial in trials]}


def _measure(trainer: "Trainer", batch: Any, precisions: tuple[str, ...]):
    acc, kind = trainer.accelerator, trainer.accelerator.plan.device
    model, optimizer = trainer._prepared_model, trainer.optimizer
    inner = getattr(optimizer, "optimizer", optimizer)
    shapes, checked = set(trainer._shapes), trainer._inputs_checked
    snapshot = Snapshot(acc.unwrap_model(model), inner, lambda: state_io.rng_state(kind),
                        lambda saved: state_io.set_rng_state(saved, kind))
    model.train()

    def start(precision: str) -> Callable[[], torch.Tensor]:
        policy = acc.set_precision(precision, "measuring")

        def step() -> torch.Tensor:
            loss = trainer._forward_loss(model, batch)
            policy.backward(loss)
            if trainer.config.max_grad_norm > 0:
                policy.unscale_(inner)
                torch.nn.utils.clip_grad_norm_(trainer._parameters, trainer.config.max_grad_norm)
            policy.step(inner)
            inner.zero_grad(set_to_none=True)
            return loss.detach()
        return step

    try:
        return run_trials(precisions, start, snapshot, kind.synchronize, kind.is_out_of_memory, kind.empty_cache)
    finally:
        trainer._shapes, trainer._inputs_checked = shapes, checked


def _first_batch(loader: Any, device: torch.device) -> Any:
    """The first batch of the training set, read from the dataset itself: the prepared loader's position, its
    generator and its workers are left alone (None for an iterable dataset)."""
    original = getattr(loader, "original", loader)
    dataset, size = original.dataset, original.batch_size or 1
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        return None
    batch = original.collate_fn([dataset[index] for index in range(min(size, len(dataset)))])
    if getattr(loader, "float64_to_float32", False):
        batch = cast_float64(batch, loader._cast_names, loader.float64_to_float32)  # the loader's own warning, once
    return move_to_device(batch, device)
