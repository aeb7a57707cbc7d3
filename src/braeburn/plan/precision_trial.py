"""``mixed_precision="auto"`` where the device's facts do not decide it: measure, then choose.

On Apple silicon no precision is fastest on every Mac: bf16 is emulated on M1/M2 (Transformers PR #40458),
measured slower than float32 on an M4 too (nanochat #685), and fp16 needs a grad scaler. So where a device
kind offers candidates (``DeviceKind.auto_precision_candidates``), the Trainer times real steps of the user's
own model and batch in float32 and in each candidate, puts every weight, optimizer state, gradient and random
state back, and trains in what :func:`decide` picks. The choice must survive a second run of the same script:

- **Only steps that applied their update count.** A fresh fp16 grad scaler overflows on its first steps and
  skips the optimizer update, a cheaper step than a real one. A precision's first window goes on until a step
  applies its update (at most ``CALIBRATION_STEPS`` more); a window in which any step was skipped is left out.
- **Interleaved, repeated rounds.** ``ROUNDS`` rounds, each timing ``MEASURE_STEPS`` steps of every precision,
  in an order that rotates from round to round (float32, bf16, fp16; bf16, fp16, float32; ...): a Mac that
  heats up and slows down weighs on every precision alike.
- **A win beyond the spread** (:func:`clearly_faster`): every round of the candidate is faster than every round
  of float32, and the gap between the medians is larger than either precision's own spread (slowest round
  minus fastest), and at least ``MIN_GAIN``. Within the spread a second run could reverse the order, so float32
  stays. With 4 rounds of 4 steps and per-step noise of 5% (plus 1 step in 20 slowed by 30%), 1,000 simulated
  trials picked a mixed precision of float32's own cost 4 times (0.4%), and one 25% faster all 1,000 times
  (``tests/plan/test_precision_trial.py::test_the_rates_the_docs_state_over_1000_simulated_trials`` repeats both and
  holds them to at most 1% and at least 99.5%).
- **Only where it pays** (:func:`measure_reason`, :func:`stop_after_first_round`): the trial costs
  :func:`trial_steps` steps that do not train the run. It starts only where the smallest gain it can choose
  (``MIN_GAIN``) would earn them back over the run's remaining steps, and after the first round it goes on only
  where the gain measured so far would earn back the rounds still to come, in seconds measured on this run.

:func:`decide`, :func:`measure_reason` and :func:`stop_after_first_round` are pure functions of the numbers
(tested from tables); :func:`run_trials` takes the measurements, :class:`Snapshot` puts the state back.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..checkpoints.host_copy import host_copy

WARMUP_STEPS = 2  # a precision's first window builds its kernels or graphs (MPS compiles a graph per dtype)
CALIBRATION_STEPS = 20
"""After the warm-up, a fresh grad scaler may still skip overflowed steps: up to this many more steps (each halves
its scale, from 65536) until one applies its update."""
MEASURE_STEPS = 4  # timed steps per window (one device sync at each end)
ROUNDS = 4  # windows per precision; a candidate needs all of them with every update applied
MIN_GAIN = 0.05
"""A mixed precision must be at least 5% faster than float32 (and beyond the spread) to be chosen; the cost gate
asks that this gain would earn the trial back."""
LOSS_TOLERANCE = 0.02
"""The first loss (same weights, same batch, same random state) may differ from float32's by 2% (plus 1e-3)."""

_NAMES = {"no": "float32", "bf16": "bf16", "fp16": "fp16"}


@dataclass(frozen=True)
class Window:
    """One precision's timed steps in one round: their seconds together and, per step, whether the optimizer
    update was applied (False: the grad scaler found inf/NaN and skipped it)."""

    seconds: float
    applied: tuple[bool, ...]

    @property
    def usable(self) -> bool:
        return bool(self.applied) and all(self.applied)

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / len(self.applied)


@dataclass(frozen=True)
class Trial:
    """One precision's measurement: its windows in round order, the first step's loss, whether every loss was
    finite, and the error that ended it (if one did)."""

    precision: str  # "no" (float32), "bf16" or "fp16"
    windows: tuple[Window, ...] = ()
    first_loss: float | None = None
    finite: bool = True
    error: str = ""

    @property
    def step_times(self) -> list[float]:
        """Seconds per step of each window whose every update was applied."""
        return [window.seconds_per_step for window in self.windows if window.usable]


@dataclass(frozen=True)
class PrecisionDecision:
    precision: str
    reason: str
    table: str  # one line: each precision's ms/step (median, range, rounds) and loss, as the Trainer prints it


# -- the rule -----------------------------------------------------------------------------------------------------
def trial_steps(candidates: int) -> int:
    """The steps a whole trial trains (warm-ups included, grad-scaler calibration not), one batch each: none of them
    trains the run."""
    precisions = candidates + 1
    return precisions * (WARMUP_STEPS + MEASURE_STEPS) + (ROUNDS - 1) * precisions * MEASURE_STEPS


def min_run_steps(candidates: int) -> int:
    """The fewest remaining batches over which a ``MIN_GAIN`` win earns the whole trial back."""
    return math.ceil(trial_steps(candidates) / MIN_GAIN)


def _run_length(remaining_steps: int, accumulation: int) -> str:
    if accumulation == 1:
        return f"{remaining_steps} steps"
    return (f"{remaining_steps} optimizer steps ({remaining_steps * accumulation} batches with "
            f"gradient_accumulation_steps={accumulation})")


def measure_reason(remaining_steps: int, processes: int, custom_step: bool, candidates: int,
                   accumulation: int = 1) -> str | None:
    """Why the run is not measured (float32 stays), or None when it is.

    Counted in batches on both sides: a trial step trains one batch, and each of the run's ``remaining_steps``
    optimizer steps trains ``accumulation`` (gradient_accumulation_steps) of them."""
    if processes > 1:
        return "several processes would each measure and might disagree"
    if custom_step:
        return "a subclass's training_step cannot be timed apart from the run"
    needed = min_run_steps(candidates)
    if remaining_steps * accumulation < needed:
        return (f"a run of {_run_length(remaining_steps, accumulation)} is too short to earn back the trial: its "
                f"{trial_steps(candidates)} steps train nothing, and the smallest gain it may choose ({MIN_GAIN:.0%}) "
                f"repays them only over {needed}+ {'steps' if accumulation == 1 else 'batches'}. Pass "
                "mixed_precision='bf16' or 'fp16' to use one without measuring")
    return None


def stop_after_first_round(trials: Sequence[Trial], restore_seconds: float, remaining_steps: int,
                           accumulation: int = 1) -> str | None:
    """After the first round: why the trial stops there (float32 stays), or None to go on.

    Goes on only where the best gain the first round shows, over the run's remaining batches (``remaining_steps``
    optimizer steps of ``accumulation`` batches each; a trial step trains one), is worth more seconds than the
    ``ROUNDS - 1`` rounds still to come cost (each: ``MEASURE_STEPS`` steps of every precision still in the trial,
    at its measured step time, plus one restore of the state per window)."""
    float32 = _find(trials, "no")
    if float32 is None or not float32.step_times:
        return "float32's first round gave no timing"
    reference = float32.step_times[0]
    alive = [t for t in trials if t.precision != "no" and _why_not(t, float32, rounds=1) is None]
    if not alive:
        return "no mixed precision is left after the first round"
    best = min(alive, key=lambda t: t.step_times[0])
    gain = 1 - best.step_times[0] / reference
    rounds_cost = (ROUNDS - 1) * sum(MEASURE_STEPS * t.step_times[0] + restore_seconds for t in (float32, *alive))
    saving = gain * reference * remaining_steps * accumulation
    if saving <= rounds_cost:
        return (f"after one round the best, {_NAMES[best.precision]}, was {gain:.0%} faster: {max(saving, 0):.1f} s "
                f"over the remaining {_run_length(remaining_steps, accumulation)}, not more than the "
                f"{rounds_cost:.1f} s the other {ROUNDS - 1} rounds would cost")
    return None


def spread(times: Sequence[float]) -> float:
    """How much one precision's rounds differ: slowest minus fastest."""
    return max(times) - min(times)


def clearly_faster(fast: Sequence[float], slow: Sequence[float]) -> bool:
    """``fast`` beats ``slow`` beyond the measured spread: every round of ``fast`` is quicker than every round of
    ``slow``, and the medians differ by more than either side's spread. Within that, another run's rounds could
    land anywhere in the two ranges and reverse the order."""
    if not fast or not slow or max(fast) >= min(slow):
        return False
    return statistics.median(slow) - statistics.median(fast) > max(spread(fast), spread(slow))


def decide(trials: Sequence[Trial], stopped: str | None = None) -> PrecisionDecision:
    """The mixed precision that beats float32 beyond the spread by ``MIN_GAIN`` or more; else float32.

    ``trials`` holds float32 ("no") and the candidates in the device's order of preference; where two candidates
    both win and neither beats the other beyond the spread, the first in that order is kept (a second run could
    otherwise flip between them). ``stopped``: why the trial ended after its first round."""
    float32 = _find(trials, "no")
    table = format_table(trials)
    if float32 is None or float32.error:
        failed = float32.error if float32 is not None else "not measured"
        return PrecisionDecision("no", f"auto: float32, since float32's own trial failed ({failed})", table)
    if stopped:
        return PrecisionDecision("no", f"auto: float32, the trial stopped early: {stopped}", table)
    if len(float32.step_times) < ROUNDS:
        return PrecisionDecision("no", f"auto: float32, float32 has {len(float32.step_times)} of the {ROUNDS} rounds "
                                 "needed", table)
    reference, notes, winners = float32.step_times, [], []
    for trial in trials:
        if trial.precision == "no":
            continue
        why = _why_not(trial, float32, ROUNDS) or _why_not_faster(trial.step_times, reference)
        notes.append(f"{_NAMES[trial.precision]} {why}" if why else "")
        if why is None:
            winners.append(trial)
    others = "; ".join(note for note in notes if note)
    if not winners:
        return PrecisionDecision("no", f"auto: float32, measured: no mixed precision won beyond the spread ({others})",
                                 table)
    chosen = next(t for t in winners if not any(clearly_faster(o.step_times, t.step_times) for o in winners))
    times = chosen.step_times
    gain = 1 - statistics.median(times) / statistics.median(reference)
    return PrecisionDecision(chosen.precision, (
        f"auto: {_NAMES[chosen.precision]}, measured {gain:.0%} faster than float32 over {ROUNDS} interleaved rounds "
        f"(its slowest round {max(times) * 1000:.1f} ms/step, float32's fastest {min(reference) * 1000:.1f}; spread "
        f"at most {max(spread(times), spread(reference)) * 1000:.1f} ms) with a matching loss"
        + (f"; {others}" if others else "")), table)


def _find(trials: Sequence[Trial], precision: str) -> Trial | None:
    return next((trial for trial in trials if trial.precision == precision), None)


def _loss_matches(loss: float, reference: float) -> bool:
    return abs(loss - reference) <= LOSS_TOLERANCE * abs(reference) + 1e-3


def _why_not(trial: Trial, float32: Trial, rounds: int) -> str | None:
    """Why ``trial`` cannot be chosen whatever its speed, or None (``rounds``: the usable windows it needs)."""
    if trial.error:
        return f"failed ({trial.error})"
    if not trial.finite or trial.first_loss is None:
        return "a loss was not finite"
    if float32.first_loss is not None and not _loss_matches(trial.first_loss, float32.first_loss):
        return f"its loss {trial.first_loss:.4g} is not float32's {float32.first_loss:.4g} within {LOSS_TOLERANCE:.0%}"
    usable = len(trial.step_times)
    if usable < rounds:
        return (f"had {usable} of {len(trial.windows)} rounds with every update applied ({rounds} needed): the grad "
                "scaler skipped overflowed steps, which are cheaper than real ones")
    return None


def _why_not_faster(times: Sequence[float], reference: Sequence[float]) -> str | None:
    gain = 1 - statistics.median(times) / statistics.median(reference)
    if not clearly_faster(times, reference):
        return f"{gain:+.0%} against float32, within the spread of the rounds"
    if gain < MIN_GAIN:
        return f"only {gain:.0%} faster (a mixed precision needs {MIN_GAIN:.0%})"
    return None


def format_table(trials: Sequence[Trial]) -> str:
    """``float32 41.2 ms/step [40.9-41.8, 4 rounds] loss 2.3026 | bf16 failed (...) | fp16 30.1 ms/step [...]``"""
    return " | ".join(_cell(trial) for trial in trials)


def _cell(trial: Trial) -> str:
    name, times = _NAMES[trial.precision], trial.step_times
    if trial.error and not times:
        return f"{name} failed ({trial.error})"
    left_out = len(trial.windows) - len(times)
    rounds = f"{len(times)} round{'s' * (len(times) != 1)}" + (f", {left_out} left out: skipped updates" if left_out
                                                                 else "")
    speed = (f"{statistics.median(times) * 1000:.1f} ms/step [{min(times) * 1000:.1f}-{max(times) * 1000:.1f}, "
             f"{rounds}]") if times else f"no usable round ({left_out} left out: skipped updates)"
    loss = f"loss {trial.first_loss:.4f}" if trial.finite and trial.first_loss is not None else "loss not finite"
    return f"{name} {speed} {loss}" + (f", then failed ({trial.error})" if trial.error else "")


# -- the measurement --------------------------------------------------------------------------------------------
class Snapshot:
    """Everything of the model and its training that a step changes, put back by :meth:`restore`: the state dict
    (weights, persistent buffers), the buffers outside it (``register_buffer(..., persistent=False)``: running
    statistics, caches, counters kept as tensors), the optimizer state, gradients, train/eval mode and the random
    state. Not restored: plain Python attributes that a forward changes (``self.calls += 1``, a schedule kept in a
    float), which no API of torch lists; a model that keeps such state sees the trial's steps in it (``trial_steps``
    forwards), where a tensor buffer would not.

    The copies live in host memory: the trial needs no device memory beyond what a training step in each precision
    needs (one copy of the weights in host memory, and of the optimizer state where one exists). Parameters and
    buffers are restored in place (copies), so the optimizer and the model keep the same tensors; the optimizer
    state the trial built is dropped before the saved one comes back, so the device never holds both.

    ``rng``: the random state to put back, taken before anything of the trial ran (its batch included)."""

    def __init__(self, model: Any, optimizer: Any, rng: Any, set_rng_state: Callable[[Any], None]):
        self.model, self.optimizer, self.rng, self._set_rng = model, optimizer, rng, set_rng_state
        self.weights, weight_bytes = host_copy(model.state_dict())
        self.buffers, buffer_bytes = host_copy(_buffers_outside_state_dict(model, self.weights))
        self.optimizer_state, state_bytes = host_copy(optimizer.state_dict())
        self.grads, grad_bytes = host_copy([parameter.grad for parameter in model.parameters()])
        self.training = model.training
        self.host_bytes = weight_bytes + buffer_bytes + state_bytes + grad_bytes

    def restore(self) -> None:
        self.model.load_state_dict(self.weights)
        for name, saved in self.buffers.items():
            _put_buffer(self.model, name, saved)
        self.optimizer.state.clear()
        saved = self.optimizer_state
        # load_state_dict keeps a tensor it is given when it is already on the right device: hand it a copy then.
        self.optimizer.load_state_dict(host_copy(saved)[0] if saved.get("state") else saved)
        for parameter, grad in zip(self.model.parameters(), self.grads):
            parameter.grad = None if grad is None else grad.to(parameter.device, copy=True)
        self.model.train(self.training)
        self._set_rng(self.rng)


def _buffers_outside_state_dict(model: Any, state: dict) -> dict[str, Any]:
    """The module's buffers that its state dict leaves out (non-persistent ones), by name."""
    return {name: buffer for name, buffer in model.named_buffers() if name not in state}


def _put_buffer(model: Any, name: str, saved: Any) -> None:
    """The buffer ``name`` back to ``saved``: copied in place (the tensor the module holds stays), or set anew where a
    forward replaced it with one of another shape or dtype."""
    owner_name, _, leaf = name.rpartition(".")
    owner = model.get_submodule(owner_name)
    current = getattr(owner, leaf, None)
    if isinstance(current, torch.Tensor) and current.shape == saved.shape and current.dtype == saved.dtype:
        current.copy_(saved)
    else:
        setattr(owner, leaf, saved.to(current.device if isinstance(current, torch.Tensor) else saved.device,
                                      copy=True))


class _Measured:
    """What one precision gave so far: its windows, its losses (read after each window) and its error."""

    def __init__(self):
        self.windows: list[Window] = []
        self.losses: list[float] = []
        self.error = ""

    def trial(self, precision: str) -> Trial:
        return Trial(precision, tuple(self.windows), self.losses[0] if self.losses else None,
                     all(math.isfinite(loss) for loss in self.losses), self.error)


def run_trials(precisions: Sequence[str], start: Callable[[str], Callable[[], tuple[Any, bool]]], snapshot: Snapshot,
               synchronize: Callable[[], None], is_out_of_memory: Callable[[BaseException], bool],
               release_memory: Callable[[], None], remaining_steps: int | None = None,
               clock: Callable[[], float] | None = None, accumulation: int = 1) -> tuple[list[Trial], str | None]:
    """Time every precision in ``ROUNDS`` interleaved rounds of one window each, every window from the snapshot.

    ``start(precision)`` switches the run to that precision (keeping its grad scaler from window to window) and
    returns a function that trains one step and returns its loss (a device tensor: read once per window, after the
    timing) and whether the optimizer update was applied. ``precisions`` starts with float32 ("no"); an error in it
    is raised (training would meet it too), unless it is out-of-memory, which ends the trial. ``remaining_steps``:
    the run's optimizer steps, of ``accumulation`` batches each, for the gate after the first round (None: every
    round runs, as ``braeburn bench`` measures).
    Returns the trials in ``precisions``' order and why the trial stopped after its first round (or None)."""
    clock = clock or time.perf_counter
    measured = {precision: _Measured() for precision in precisions}
    restores: list[float] = []
    stopped = None
    try:
        for round_index in range(ROUNDS):
            shift = round_index % len(precisions)
            for precision in (*precisions[shift:], *precisions[:shift]):
                if not measured[precision].error:
                    _measure_window(precision, round_index == 0, start, snapshot, measured[precision], restores,
                                    (synchronize, is_out_of_memory, release_memory, clock))
            if measured[precisions[0]].error:
                break  # float32 ran out of memory: the run will meet that too, nothing to compare with
            if round_index == 0 and remaining_steps is not None:
                first = [measured[precision].trial(precision) for precision in precisions]
                stopped = stop_after_first_round(first, statistics.median(restores), remaining_steps, accumulation)
                if stopped:
                    break
    finally:
        snapshot.restore()
    return [measured[precision].trial(precision) for precision in precisions], stopped


def _measure_window(precision: str, first: bool, start: Callable, snapshot: Snapshot, into: _Measured,
                    restores: list[float], device: tuple[Callable, ...]) -> None:
    synchronize, is_out_of_memory, release_memory, clock = device
    began = clock()
    snapshot.restore()  # every window starts from the run's own state, random state included
    synchronize()
    restores.append(clock() - began)
    try:
        window, losses = _time_window(start(precision), first, synchronize, clock)
    except Exception as error:  # an op without a bf16 kernel, out of memory, a custom layer's TypeError, ...
        # (not BaseException: Ctrl-C and SystemExit still end the run)
        if precision == "no" and not is_out_of_memory(error):
            raise  # float32 is what the run trains in when nothing wins: it would meet this error too
        release_memory()
        into.error = _first_line(error)
        return
    into.windows.append(window)
    into.losses += losses


def _first_line(error: BaseException) -> str:
    """``TypeError: ...`` (the type named, but for RuntimeError and ValueError, whose text says enough: torch's)."""
    text = str(error).strip().splitlines()[0][:160] if str(error).strip() else ""
    if isinstance(error, (RuntimeError, ValueError)) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _time_window(step: Callable[[], tuple[Any, bool]], first: bool, synchronize: Callable[[], None],
                 clock: Callable[[], float]) -> tuple[Window, list[float]]:
    losses, applied = [], True
    for _ in range(WARMUP_STEPS if first else 0):
        loss, applied = step()
        losses.append(loss)
    for _ in range(CALIBRATION_STEPS if first else 0):
        if applied:
            break
        loss, applied = step()  # a fresh grad scaler still skipping: its scale halves each time
        losses.append(loss)
    synchronize()  # the queued warm-up work finishes before the clock starts
    started, flags = clock(), []
    for _ in range(MEASURE_STEPS):
        loss, applied = step()
        losses.append(loss)
        flags.append(bool(applied))
    synchronize()
    seconds = clock() - started
    values = torch.stack([loss.detach().float().reshape(()) for loss in losses]).cpu().tolist()  # one device read
    return Window(seconds, tuple(flags)), values


__all__ = ["CALIBRATION_STEPS", "LOSS_TOLERANCE", "MEASURE_STEPS", "MIN_GAIN", "ROUNDS", "WARMUP_STEPS",
           "PrecisionDecision", "Snapshot", "Trial", "Window", "clearly_faster", "decide", "format_table",
           "measure_reason", "min_run_steps", "run_trials", "spread", "stop_after_first_round", "trial_steps"]
