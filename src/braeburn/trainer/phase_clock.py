"""Where train()'s time went, for the summary: steps, compiling, checkpoints and evaluation, adding up to the whole.

The Trainer times, on its own thread, what interrupts the steps: evaluations, the part of each checkpoint
that runs on the training thread (taking the snapshot, or the whole save where it is not written in the
background), and waiting for a background write to finish. Compiling is the first compiled step's wall
time (:mod:`braeburn.plan.compile_policy`). The steps' own time is what is left, so the line always adds up
to the time the summary reports. No device sync is added: a phase that starts while steps are still
queued on the device includes their end (at most a step or two).
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from typing import Iterator

EVALUATION, CHECKPOINT, WRITE_WAIT = "evaluation", "checkpoints on the training thread", "waiting for a checkpoint write"


class PhaseClock:
    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - started
            self.counts[phase] += 1

    def line(self, total: float, steps: int, compile_seconds: float) -> str:
        """``time  179.5 s = 127.8 s in 5000 steps (25.6 ms/step) + 34.2 s compiling + ...``"""
        parts = []
        if compile_seconds > 0:
            parts.append(f"{compile_seconds:.1f} s compiling")
        for phase in (CHECKPOINT, WRITE_WAIT, EVALUATION):
            if self.counts[phase]:
                parts.append(f"{self.seconds[phase]:.1f} s {phase} ({self.counts[phase]}x)")
        in_steps = max(0.0, total - compile_seconds - sum(self.seconds.values()))
        per_step = f" ({in_steps / steps * 1000:.1f} ms/step, data and logging included)" if steps else ""
        return f"  time       {total:.1f} s = " + " + ".join([f"{in_steps:.1f} s in {steps} steps{per_step}", *parts])


__all__ = ["CHECKPOINT", "EVALUATION", "PhaseClock", "WRITE_WAIT"]
