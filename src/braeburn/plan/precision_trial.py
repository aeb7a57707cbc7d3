"""``mixed_precision="auto"`` where the device's facts do not decide it: measure, then choose.

On Apple silicon no precision is fastest on every Mac: bf16 is emulated on M1/M2 (Transformers PR #40458),
measured slower than float32 on an M4 too (nanochat #685), and fp16 needs a grad scaler. So where a device
kind offers candidates (``DeviceKind.auto_precision_candidates``), the Trainer times a few real steps of the
user's own model and batch in float32 and in each candidate, puts every weight, optimizer state, gradient and
random state back, and trains in what :func:`decide` picks.

Two pieces, both device-agnostic:

- :func:`decide` is the rule, a pure function of the measured :class:`Trial` rows (tested with fake timings):
  the fastest precision whose losses stay finite and whose first loss matches float32's within
  ``LOSS_TOLERANCE`` wins, if it is at least ``MIN_GAIN`` faster than float32; otherwise float32 stays.
- :func:`run_trials` times the steps (one device sync at each end of a timed window) and restores the state
  after each candidate (:class:`Snapshot`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

WARMUP_STEPS = 2  # the first steps of a precision build its kernels or graphs (MPS compiles a graph per dtype)
MEASURE_STEPS = 5
MIN_GAIN = 0.05
"""A mixed precision must be this much faster than float32 (5%) to be chosen: closer is within step-time noise."""
LOSS_TOLERANCE = 0.02
"""The first loss (same weights, same batch, same random state) may differ from float32's by 2% (plus 1e-3)."""
MIN_RUN_STEPS = 100
"""Runs shorter than this keep float32 unmeasured: the trial's 3 x 7 steps would not be earned back."""

_NAMES = {"no": "float32", "bf16": "bf16", "fp16": "fp16"}


@dataclass(frozen=True)
class Trial:
    """One precision's measurement: seconds per step, the first step's loss, whether every loss was finite."""

    precision: str  # "no" (float32), "bf16" or "fp16"
    seconds_per_step: float | None = None  # None when the trial failed (``error`` says how)
    first_loss: float | None = None
    finite: bool = True
    error: str = ""


@dataclass(frozen=True)
class PrecisionDecision:
    precision: str
    reason: str
    table: str  # one line: each precision's ms/step and loss, as the Trainer prints it


def measure_reason(remaining_steps: int, processes: int, custom_step: bool) -> str | None:
    """Why the run is not measured (float32 stays), or None when it is."""
    if processes > 1:
        return "several processes would each measure and might disagree"
    if custom_step:
        return "a subclass's training_step cannot be timed apart from the run"
    if remaining_steps < MIN_RUN_STEPS:
        return (f"a run of {remaining_steps} steps is too short to earn back the measurement "
                f"({MIN_RUN_STEPS}+ steps are measured)")
    return None


def _loss_matches(loss: float, reference: float) -> bool:
    return abs(loss - reference) <= LOSS_TOLERANCE * abs(reference) + 1e-3


def _why_not(trial: Trial, float32: Trial) -> str | None:
    """Why ``trial`` cannot be chosen, or None."""
    if trial.error or trial.seconds_per_step is None:
        return f"failed ({trial.error or 'no timing'})"
    if not trial.finite or trial.first_loss is None:
        return "a loss was not finite"
    if float32.first_loss is not None and not _loss_matches(trial.first_loss, float32.first_loss):
        return f"its loss {trial.first_loss:.4g} is not float32's {float32.first_loss:.4g} within {LOSS_TOLERANCE:.0%}"
    return None


def decide(trials: Sequence[Trial]) -> PrecisionDecision:
    """The fastest finite candidate whose loss matches float32's, if MIN_GAIN faster; else float32.

    ``trials`` holds float32 ("no") and the candidates, in any order."""
    float32 = next((t for t in trials if t.precision == "no"), None)
    table = format_table(trials)
    if float32 is None or float32.seconds_per_step is None or float32.error:
        failed = float32.error if float32 is not None else "not measured"
        return PrecisionDecision("no", f"auto: float32, since float32's own trial failed ({failed})", table)
    ruled_out, usable = [], []
    for trial in trials:
        if trial.precision == "no":
            continue
        why = _why_not(trial, float32)
        (ruled_out.append(f"{_NAMES[trial.precision]} {why}") if why else usable.append(trial))
    others = f"; {'; '.join(ruled_out)}" if ruled_out else ""
    if not usable:
        return PrecisionDecision("no", f"auto: float32, measured: no mixed precision qualified{others}", table)
    best = min(usable, key=lambda t: t.seconds_per_step)
    gain = 1 - best.seconds_per_step / float32.seconds_per_step
    if gain < MIN_GAIN:
        return PrecisionDecision("no", f"auto: float32, measured: {_NAMES[best.precision]} was {gain:.0%} faster, "
                                 f"within noise (a mixed precision needs {MIN_GAIN:.0%}){others}", table)
    return PrecisionDecision(best.precision, f"auto: {_NAMES[best.precision]}, measured {gain:.0%} faster than "
                             f"float32 with a matching loss{others}", table)


def format_table(trials: Sequence[Trial]) -> str:
    """``float32 41.2 ms/step loss 2.3026 | bf16 52.0 ms/step loss 2.3031 | fp16 failed (...)``"""
    cells = []
    for trial in trials:
        name = _NAMES[trial.precision]
        if trial.error or trial.seconds_per_step is None:
            cells.append(f"{name} failed ({trial.error or 'no timing'})")
            continue
        loss = f"loss {trial.first_loss:.4f}" if trial.finite and trial.first_loss is not None else "loss not finite"
        cells.append(f"{name} {trial.seconds_per_step * 1000:.1f} ms/step {loss}")
    return " | ".join(cells)


# -- the measurement --------------------------------------------------------------------------------------------
class Snapshot:
    """Weights and buffers, optimizer state, gradients and every random state, put back by :meth:`restore`.

    Parameters are restored in place (``load_state_dict`` copies), so the optimizer keeps the same tensors."""

    def __init__(self, model: Any, optimizer: Any, rng_state: Callable[[], Any], set_rng_state: Callable[[Any], None]):
        self.model, self.optimizer, self._set_rng = model, optimizer, set_rng_state
        self.weights = {name: value.detach().clone() for name, value in model.state_dict().items()}
        self.optimizer_state = copy.deepcopy(optimizer.state_dict())
        self.grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
        self.training = model.training
        self.rng = rng_state()

    def restore(self) -> None:
        self.model.load_state_dict(self.weights)
        self.optimizer.load_state_dict(self.optimizer_state)
        for parameter, grad in zip(self.model.parameters(), self.grads):
            parameter.grad = None if grad is None else grad.clone()
        self.model.train(self.training)
        self._set_rng(self.rng)


def run_trials(precisions: Sequence[str], start: Callable[[str], Callable[[], Any]], snapshot: Snapshot,
               synchronize: Callable[[], None], is_out_of_memory: Callable[[BaseException], bool],
               release_memory: Callable[[], None]) -> list[Trial]:
    """Time ``WARMUP_STEPS + MEASURE_STEPS`` steps in each precision, from the same state each time.

    ``start(precision)`` switches the run to that precision and returns a function that trains one step and
    returns its loss (a device tensor: read once per precision, after the timing). float32 ("no") is first;
    an error in it is raised (training would meet it too) unless it is out-of-memory."""
    trials = []
    try:
        for precision in precisions:
            snapshot.restore()  # every precision starts from the run's own state, random state included
            try:
                trials.append(_time(precision, start(precision), synchronize))
            except (RuntimeError, ValueError) as error:  # an op without a bf16 kernel, out of memory, ...
                if precision == "no" and not is_out_of_memory(error):
                    raise
                release_memory()
                trials.append(Trial(precision, error=str(error).strip().splitlines()[0][:160] or type(error).__name__))
    finally:
        snapshot.restore()
    return trials


def _time(precision: str, step: Callable[[], Any], synchronize: Callable[[], None]) -> Trial:
    import torch

    losses = [step() for _ in range(WARMUP_STEPS)]
    synchronize()  # the queued warm-up work finishes before the clock starts
    started = time.perf_counter()
    losses += [step() for _ in range(MEASURE_STEPS)]
    synchronize()
    seconds = (time.perf_counter() - started) / MEASURE_STEPS
    values = torch.stack([loss.detach().float().reshape(()) for loss in losses]).cpu()  # one read of the device
    return Trial(precision, seconds, float(values[0]), bool(torch.isfinite(values).all()))


__all__ = ["LOSS_TOLERANCE", "MIN_GAIN", "MIN_RUN_STEPS", "PrecisionDecision", "Snapshot", "Trial", "decide",
           "format_table", "measure_reason", "run_trials"]
