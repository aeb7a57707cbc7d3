"""The Trainer's compile decision: measure a few eager steps, then compile only if the run will earn it back.

``compile="auto"`` cannot know before training whether compiling pays: that depends on how long
an eager step takes on this device and how many steps are left. So the Trainer runs eagerly,
times steps ``WARMUP_STEPS+1 .. WARMUP_STEPS+MEASURE_STEPS`` (a device sync after each), and
asks :func:`braeburn.plan.compile_policy.decide`. ``compile=true`` compiles after as many steps (fewer
in a short run), once the batch shapes have been seen (varying lengths compile with dynamic shapes, so a
new length is no recompilation), timing the eager steps as well where the run is long enough. After
compiling it times as many compiled steps, so the summary can say whether compiling paid off in this
run, and keeps what it measured for the next run of the same model on this machine
(:mod:`braeburn.plan.compile_gains`). Where the compiled steps measure slower than the eager ones
(:func:`braeburn.plan.compile_policy.measurably_slower`), on any device, the rest of the run trains eagerly and
one line says so.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from ..plan import compile_gains
from ..plan.compile_policy import CompileDecision, measurably_slower
from ..distributed import process_group as pg

WARMUP_STEPS = 3  # allocator growth, kernel plans, cuDNN autotuning: not representative
MEASURE_STEPS = 10


def _lengths_vary(signatures: set) -> bool:
    """Whether the batches seen differ in more than their batch size (dim 0): varying sequence lengths."""
    def without_batch(signature: tuple) -> tuple:
        return tuple((item[0], item[1][1:]) if item and isinstance(item[0], str) else item[1:]  # () for 0-d
                     for item in signature)
    return len({without_batch(signature) for signature in signatures}) > 1


class CompileWindow:
    """Decides once per run; :attr:`pending` is False once there is nothing left to measure."""

    def __init__(self, accelerator: Any):
        self.acc = accelerator
        self.pending = False
        self.decision: CompileDecision | None = None
        self._decide_at = self._clock_at = self._compiled_at = -1
        self._started = 0.0
        self._max_steps = 0
        self._batch_size: int | None = None
        self._prior: dict | None = None  # this machine's record of an earlier compile of this model
        self.eager_step_seconds: float | None = None
        self.compiled_step_seconds: float | None = None
        self.compiled_steps_timed = 0
        self._last = 0.0
        self._eager_times: list[float] = []  # each timed step's wall time
        self._compiled_times: list[float] = []
        self.back_to_eager_at: int | None = None  # the step from which compiled steps, slower, were dropped

    def begin(self, model: Any, step: int, max_steps: int, batch_size: int | None = None) -> None:
        stats = self.acc.compile_stats(model)
        if stats is not None and stats.compiled:  # compiled already (an earlier train() call)
            self.pending = False
            return
        remaining, self._max_steps, self._batch_size = max_steps - step, max_steps, batch_size
        first = self.acc.compile_decision(model)
        measurable = first.needs_timing
        if first.compile:  # asked for: compile once the shapes of some batches are known
            self._decide_at = step + min(WARMUP_STEPS + MEASURE_STEPS, max(1, remaining // 2))
            if self._decide_at == step + WARMUP_STEPS + MEASURE_STEPS:  # long enough to time the eager steps too
                self._clock_at = step + WARMUP_STEPS
        elif measurable and remaining > WARMUP_STEPS + MEASURE_STEPS:
            self._clock_at, self._decide_at = step + WARMUP_STEPS, step + WARMUP_STEPS + MEASURE_STEPS
        else:
            reason = (f"auto: {remaining} steps are too few to earn a compile back" if measurable else first.reason)
            self._finish(model, CompileDecision(False, reason))
            return
        self.pending = True

    def after_step(self, step: int, model: Any, shapes: set) -> Any:
        """Called after each optimizer step while :attr:`pending`; returns the model to train from now on."""
        if step == self._clock_at:
            self._started = self._last = self._now()
        elif 0 <= self._clock_at < step < self._decide_at:
            self._sample(self._eager_times)
        elif step == self._decide_at:
            if self._clock_at >= 0:
                self._sample(self._eager_times)
                self.eager_step_seconds = (self._last - self._started) / (step - self._clock_at)
            decision = self.acc.compile_decision(model, remaining_steps=self._remaining(step),
                                                 eager_step_seconds=self.eager_step_seconds,
                                                 shapes_vary=_lengths_vary(shapes), batch_size=self._batch_size)
            model = self._finish(model, decision, step)
        elif self._compiled_at < 0:
            pass
        elif step == self._compiled_at - 1:
            self._time_first_compiled_step(model)
        elif step == self._compiled_at:
            self._started = self._last = self._now()
        elif step < self._compiled_at + MEASURE_STEPS:
            self._sample(self._compiled_times)
        elif step == self._compiled_at + MEASURE_STEPS:
            self._sample(self._compiled_times)
            self.compiled_step_seconds = (self._last - self._started) / MEASURE_STEPS
            self.compiled_steps_timed = MEASURE_STEPS
            self.pending = False
            self._remember(model)
            model = self._eager_if_slower(model, step)
        return model

    def _sample(self, times: list[float]) -> None:
        """One step's wall time (a device sync: only on the measured steps)."""
        now = self._now()
        times.append(now - self._last)
        self._last = now

    def _eager_if_slower(self, model: Any, step: int) -> Any:
        """Back to the eager forward when the compiled steps measured slower than the eager ones (every rank agrees)."""
        slower = measurably_slower(self._eager_times, self._compiled_times)
        if not pg.all_ok(slower, self.acc.device):
            return model
        eager, compiled = statistics.median(self._eager_times), statistics.median(self._compiled_times)
        self.back_to_eager_at = step
        self.acc.print(f"braeburn: compile off again at step {step}: compiled steps took {compiled * 1000:.1f} ms "
                       f"against {eager * 1000:.1f} ms eager (medians of {len(self._compiled_times)} and "
                       f"{len(self._eager_times)} steps), so the rest of the run trains eagerly (compile=False "
                       "skips compiling)")
        return self.acc.uncompile_model(model)

    def _key(self, model: Any) -> str:
        key = self.acc.compile_key(model, self._batch_size)
        return key + "|regions" if self.decision is not None and self.decision.regional else key

    def _remember(self, model: Any) -> None:
        """Keep this run's eager and compiled step times and compile time for the next run's decision."""
        stats = self.acc.compile_stats(model)
        if (stats is None or stats.over_wrapper or not stats.compiled_calls or self.eager_step_seconds is None
                or not self.acc.is_main_process):
            return
        compile_gains.remember(self._key(model), eager_step_seconds=self.eager_step_seconds,
                               compiled_step_seconds=self.compiled_step_seconds,
                               compile_seconds=stats.compile_seconds)

    def _time_first_compiled_step(self, model: Any) -> None:
        """The whole first compiled step (forward, the backward compiled on its first call, the optimizer) is what
        compiling cost; the forward alone, which the prepared forward times, leaves the backward's compile out."""
        stats = self.acc.compile_stats(model)
        seconds = self._now() - self._started
        if stats is not None and stats.compiled_calls:
            stats.compile_seconds = max(stats.compile_seconds, seconds)

    def _remaining(self, step: int) -> int:
        return max(0, self._max_steps - step)

    def _finish(self, model: Any, decision: CompileDecision, step: int | None = None) -> Any:
        self.decision, self.pending = decision, False
        stats = self.acc.compile_stats(model)
        if stats is not None:
            stats.reason, stats.decided_at_step, stats.eager_step_seconds = decision.reason, step, self.eager_step_seconds
        if decision.compile:
            model = self.acc.compile_model(model, decision)
            self.decision = decision = self._as_compiled(model, decision)
            self._prior = compile_gains.read_records().get(self._key(model))
        if step is not None:
            self.acc.print(f"braeburn: compile {'on' if decision.compile else 'off'} at step {step}: {decision.reason}")
        if not decision.compile:
            return model
        self._compiled_at, self.pending = step + 2, True  # step+1 compiles; time the steps after it
        self._started = self._now()
        return model

    def _as_compiled(self, model: Any, decision: CompileDecision) -> CompileDecision:
        """``decision`` as the Accelerator carried it out: a regional one compiled whole (a model without repeated
        blocks, or several processes) says so, in the summary and in the compile gains' record, under the whole
        model's key rather than the regions'."""
        stats = self.acc.compile_stats(model)
        if not decision.regional or stats is None or stats.regional:
            return decision
        return dataclasses.replace(decision, reason=stats.reason, regional=False)

    def _now(self) -> float:
        self.acc.plan.device.synchronize()  # the queued device work must finish before the clock is read
        return time.perf_counter()

    # -- the report -------------------------------------------------------------------------------
    def summary(self, shapes: int, bucketing: bool) -> list[str]:
        """Lines for the end-of-run summary: what compile did and whether it paid, and the shapes seen."""
        lines = [f"  compile    {self._compile_line()}"]
        lines.append(f"  shapes     {shapes} distinct training batch shape{'s' if shapes != 1 else ''}"
                     + (" (text padded to a few lengths; --pad_to_buckets false keeps the collator's)"
                        if bucketing else ""))
        return lines

    def _compile_line(self) -> str:
        decision = self.decision
        if decision is None:
            return "off (undecided: the run ended first)"
        if not decision.compile:
            return f"off ({decision.reason})"
        stats = self.acc.compile_stats()
        if stats is not None and stats.over_wrapper:
            return f"on ({decision.reason}); compiled over the {self.acc.plan.strategy} wrapper"
        if stats is None or not stats.compiled_calls:
            return f"on ({decision.reason}); no compiled step ran"
        graphs = "?" if stats.graphs is None else stats.graphs
        if stats.graph_breaks:
            counted = (f"{len(stats.graph_breaks)} graph break(s) ({'; '.join(stats.graph_breaks)}), "
                       "recompilations not counted")
        else:
            counted = f"{stats.recompiles if stats.recompiles is not None else '?'} recompilation(s)"
        back = (f"; back to eager at step {self.back_to_eager_at}: the compiled steps were slower"
                if self.back_to_eager_at is not None else "")
        others = (f"{stats.eager_calls} call(s) outside the compiled training path (short batches, evaluation: their "
                  "blocks still run compiled)" if stats.regional else
                  f"{stats.eager_calls} eager call(s) after compiling (short batches, evaluation)")
        text = (f"on ({decision.reason}){back}; first compiled step {stats.compile_seconds:.1f} s{self._cache_words()}, "
                f"{graphs} graph(s), {counted}, {others}")
        return text + self._payoff(stats)

    def _cache_words(self) -> str:
        if not self._prior:
            return " (torch's compile caches were cold: no earlier compile of this model here)"
        return (f" (compiled here before: torch's caches on disk were warm; the first compile of this model here "
                f"took {self._prior['compile_seconds']:.1f} s)")

    def _payoff(self, stats: Any) -> str:
        eager, compiled = self.eager_step_seconds, self.compiled_step_seconds
        if eager is None or compiled is None:
            return ""
        saved = (eager - compiled) * stats.compiled_calls
        verdict = ("paid off" if saved > stats.compile_seconds else
                   "did not pay off in this run: --compile false would have been faster")
        return (f"; {eager * 1000:.1f} ms/step eager -> {compiled * 1000:.1f} ms/step compiled, "
                f"saved {saved:.1f} s against {stats.compile_seconds:.1f} s of compiling: {verdict}")

    def compile_seconds(self) -> float:
        """The first compiled step's wall time, where this run compiled (0 otherwise, or where it is not known)."""
        stats = self.acc.compile_stats()
        if not (self.decision and self.decision.compile) or stats is None or stats.over_wrapper:
            return 0.0
        return stats.compile_seconds if stats.compiled_calls else 0.0

    def record(self, shapes: int) -> dict[str, Any]:
        """The run's compile report and shape count, for metrics.jsonl."""
        stats = self.acc.compile_stats()
        compiled = stats.as_dict() if stats is not None else {}
        compiled.update(compiled=bool(self.decision and self.decision.compile),
                        reason=self.decision.reason if self.decision else "undecided",
                        eager_step_seconds=self.eager_step_seconds, compiled_step_seconds=self.compiled_step_seconds,
                        back_to_eager_at_step=self.back_to_eager_at)
        return {"batch_shapes": shapes, "compile": compiled}
