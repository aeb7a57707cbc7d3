"""The Trainer's ``mixed_precision="auto"`` measurement (braeburn.plan.precision_trial), before the first step.

Where the plan left candidates to measure (MPS) and the run is long enough to earn the trial back, the Trainer
trains its own model on the first ``per_device_train_batch_size`` samples of the training set in float32 and in
each candidate, in interleaved rounds, each window from the same weights, optimizer state and random state; puts
all of it back; and trains the run in the precision :func:`braeburn.plan.precision_trial.decide` picks. One line shows
the numbers.

The trial leaves no trace in the run: the random state is taken before the trial's batch is read (a dataset or
collator that draws random numbers draws them again for the run), the batch is read from the dataset itself (the
run's loader, its order and its position are untouched), and the state is copied to host memory, so the device
holds nothing a training step does not. Its cached memory is given back afterwards. What is put back, and what is not
(plain Python attributes a forward changes): :class:`braeburn.plan.precision_trial.Snapshot`.
"""

from __future__ import annotations

import dataclasses
import gc
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..checkpoints import state as state_io
from ..data.loader import cast_float64, move_to_device
from ..plan.precision_trial import Snapshot, decide, measure_reason, run_trials

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer


def choose_precision(trainer: "Trainer", loader: Any) -> dict[str, Any] | None:
    """Measure and switch the Accelerator to the winner; returns the record for metrics.jsonl (None: nothing
    was left to measure)."""
    acc, state = trainer.accelerator, trainer.state
    candidates = acc.plan.precision_candidates
    if not candidates:
        return None
    why_not = measure_reason(state.max_steps - state.global_step, acc.num_processes,
                             trainer._has_own_training_step, len(candidates),
                             trainer.config.gradient_accumulation_steps)
    if why_not is None:
        outcome = _measure(trainer, loader, ("no", *candidates))
        if isinstance(outcome, str):
            why_not = outcome
    if why_not is not None:
        acc.set_precision("no", f"auto: float32, not measured: {why_not}")
        return {"precision": "no", "measured": False, "reason": acc.plan.precision_reason}
    trials, stopped = outcome
    decision = decide(trials, stopped)
    acc.set_precision(decision.precision, decision.reason)
    acc.print(f"braeburn: precision {decision.precision} on {acc.device}, timed on your model: {decision.table}: "
              f"{decision.reason}")
    return {"precision": decision.precision, "measured": True, "reason": decision.reason, "stopped": stopped,
            "trials": [dataclasses.asdict(trial) for trial in trials]}


def _measure(trainer: "Trainer", loader: Any, precisions: tuple[str, ...]) -> tuple[list, str | None] | str:
    """The trials and why they stopped early, or why the trial could not start (its snapshot failed)."""
    acc, kind = trainer.accelerator, trainer.accelerator.plan.device
    model, inner = trainer._prepared_model, getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    shapes, checked = set(trainer._shapes), trainer._inputs_checked
    rng = state_io.rng_state(kind)  # before the batch is read: what the dataset and collator draw, they draw again
    try:
        batch = _first_batch(loader, acc.device)
        try:
            snapshot = Snapshot(acc.unwrap_model(model), inner, rng, lambda saved: state_io.set_rng_state(saved, kind))
        except (RuntimeError, MemoryError) as error:  # the copy to host memory: out of memory, most likely
            return f"copying the weights to host memory failed ({str(error).strip().splitlines()[0][:160]})"
        model.train()
        return run_trials(precisions, _starter(trainer, batch), snapshot, kind.synchronize, kind.is_out_of_memory,
                          kind.empty_cache, trainer.state.max_steps - trainer.state.global_step,
                          accumulation=trainer.config.gradient_accumulation_steps)
    finally:
        trainer._shapes, trainer._inputs_checked = shapes, checked
        state_io.set_rng_state(rng, kind)
        batch = snapshot = None
        gc.collect()  # the trial's batch, activations, grad scalers and optimizer state
        kind.empty_cache()  # give the trial's cached blocks back before the run allocates its own


def _starter(trainer: "Trainer", batch: Any) -> Callable[[str], Callable[[], tuple[torch.Tensor, bool]]]:
    """``start(precision)`` for run_trials: one policy per precision for the whole trial (a grad scaler keeps the
    scale it found), installed again at each of its windows."""
    acc, model = trainer.accelerator, trainer._prepared_model
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    policies: dict[str, Any] = {}

    def start(precision: str) -> Callable[[], tuple[torch.Tensor, bool]]:
        policy = policies[precision] = acc.set_precision(precision, "measuring", policies.get(precision))

        def step() -> tuple[torch.Tensor, bool]:
            loss = trainer.forward_loss(model, batch)
            policy.backward(loss)
            if trainer.config.max_grad_norm > 0:
                policy.unscale_(inner)
                torch.nn.utils.clip_grad_norm_(trainer._parameters, trainer.config.max_grad_norm)
            applied = policy.step(inner)  # False: the grad scaler skipped an overflowed step
            inner.zero_grad(set_to_none=True)
            return loss.detach(), applied
        return step
    return start


def _first_batch(loader: Any, device: torch.device) -> Any:
    """The first batch of the training set, read from the dataset itself: the prepared loader's position, its
    generator and its workers are left alone."""
    original = getattr(loader, "original", loader)
    dataset, size = original.dataset, original.batch_size or 1
    batch = original.collate_fn([dataset[index] for index in range(min(size, len(dataset)))])
    if getattr(loader, "float64_to_float32", False):
        batch = cast_float64(batch, loader._cast_names, loader.float64_to_float32)  # the loader's own warning, once
    return move_to_device(batch, device)
