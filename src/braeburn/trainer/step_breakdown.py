"""Where a step's time goes on several processes: computing, waiting on communication, or waiting for the host.

The Trainer profiles a few steps near the end of the run (``torch.profiler``, bracketed by two device
syncs, once per run) and splits their wall time by what the device was doing:

* compute: some compute kernel ran (on the CPU: some op ran on the training thread);
* waiting on communication: a collective (an NCCL kernel; a gloo all-reduce) ran and no compute did, so
  the step waited for it. Communication that ran under compute is hidden, and reported apart;
* idle: nothing ran at all: the GPU waited for the host to launch work (Python, the data loader,
  kernel-launch overhead). On the CPU this is the time outside ops.

The numbers come from the profiler's own trace (its Chrome trace export, a public format), so they are
measured, not modelled. The profiler slows the host, so the device's busy time is taken from the trace and
the step's length from as many steps timed just before, without the profiler (:func:`rescale`).
:func:`split` is the pure interval arithmetic; :class:`StepBreakdownCallback` drives the profiler.
``step_breakdown="auto"`` samples on several processes only.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Iterable

from ..plan.option_spelling import advice
from .callbacks import Callback

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer
    from .state import TrainerState

SAMPLED_STEPS = 5
# Sample only runs this long: the compile window (steps 4..13) and the first steps' one-time costs are over
# before the unprofiled steps timed just ahead of the profiled ones (SAMPLED_STEPS of them).
MIN_STEPS = 26
IDLE_HINT, COMM_HINT = 0.20, 0.15  # shares above which the summary names the limit and what to try

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The same time covered by sorted, non-overlapping intervals."""
    merged: list[list[float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals: list[Interval]) -> float:
    return sum(end - start for start, end in intervals)


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Time covered by both unions ``a`` and ``b`` (each sorted and non-overlapping)."""
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return total


@dataclass(frozen=True)
class Breakdown:
    """Shares of ``wall_s`` over the sampled steps of one process."""

    steps: int
    wall_s: float
    compute: float  # some compute ran
    comm_waiting: float  # communication ran and no compute did: the step waited on it
    comm_hidden: float  # communication that ran under compute
    idle: float  # nothing ran: the device waited for the host
    on_device: bool  # kernels on an accelerator (else: ops on the CPU's training thread)
    step_s: float | None = None  # an unprofiled step's wall time, when the shares were rescaled to it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def split(compute: Iterable[Interval], comm: Iterable[Interval], steps: int, on_device: bool,
          window: Interval | None = None) -> Breakdown:
    """The pure arithmetic: ``compute`` and ``comm`` intervals (any clock, seconds or not) over ``window``
    (default: from the first interval's start to the last one's end)."""
    compute, comm = union(compute), union(comm)
    everything = union(compute + comm)
    if window is None:
        window = (everything[0][0], everything[-1][1]) if everything else (0.0, 0.0)
    wall = window[1] - window[0]
    if wall <= 0:
        return Breakdown(steps, 0.0, 0.0, 0.0, 0.0, 0.0, on_device)
    hidden = overlap(comm, compute)
    return Breakdown(steps, wall, length(compute) / wall, (length(comm) - hidden) / wall, hidden / wall,
                     max(0.0, 1.0 - length(everything) / wall), on_device)


def rescale(part: Breakdown, step_seconds: float) -> Breakdown:
    """The shares of an unprofiled step of ``step_seconds``: the profiler slows the host (it records every
    kernel launch), which would overstate the idle share of a host-bound step; the device's busy time is
    what it measured, the step's length is the one without the profiler."""
    if part.wall_s <= 0 or step_seconds <= 0:
        return part
    busy = part.compute + part.comm_waiting
    scale = part.wall_s / (part.steps * step_seconds)
    scale = min(scale, 1.0 / busy) if busy > 0 else scale  # never more busy time than the step has
    compute, waiting = part.compute * scale, part.comm_waiting * scale
    return Breakdown(part.steps, part.wall_s, compute, waiting, part.comm_hidden * scale,
                     max(0.0, 1.0 - compute - waiting), part.on_device, step_seconds)


def trace_intervals(events: list[dict], kernel_marker: str | None, main_thread: int) -> tuple[list, list, Interval]:
    """(compute, comm, window) in seconds, from a Chrome trace's events.

    With ``kernel_marker`` (an accelerator's collective-kernel name part, e.g. "nccl") the device's kernels,
    copies and memsets are split by name; without it (the CPU) compute is the ops of ``main_thread`` and
    communication the gloo collectives (they run on gloo's own threads)."""
    compute, comm, spans = [], [], []
    for event in events:
        if event.get("ph") != "X" or "dur" not in event:
            continue
        category, name = event.get("cat", ""), event.get("name", "")
        start = float(event["ts"]) / 1e6  # the trace counts microseconds
        interval = (start, start + float(event["dur"]) / 1e6)
        if kernel_marker is not None and category in ("kernel", "gpu_memcpy", "gpu_memset"):
            (comm if kernel_marker in name.lower() else compute).append(interval)
        elif kernel_marker is None and name.startswith("gloo:"):
            comm.append(interval)
        elif kernel_marker is None and category == "cpu_op" and event.get("tid") == main_thread:
            compute.append(interval)
        elif category not in ("cpu_op", "user_annotation"):
            continue  # the profiler's own records, runtime calls: not part of the steps' span
        spans.append(interval)
    window = (min(s for s, _ in spans), max(e for _, e in spans)) if spans else (0.0, 0.0)
    return compute, comm, window


def summary_line(parts: list[Breakdown | None], processes: int, first_step: int | None,
                 unmeasurable: str | None = None) -> str:
    """The summary's line (and a hint when one limit stands out)."""
    got = [p for p in parts if p is not None and p.wall_s > 0]
    if not got:
        return f"  step time  not sampled ({unmeasurable or _why_not(first_step)})"

    def share(name: str) -> str:  # one figure, or the range over the processes when they differ
        low, high = min(getattr(p, name) for p in got), max(getattr(p, name) for p in got)
        return f"{high:.0%}" if round(high * 100) == round(low * 100) else f"{low:.0%}-{high:.0%}"

    idle_words = "GPU idle waiting for the host" if got[0].on_device else "outside ops"
    line = (f"  step time  compute {share('compute')}, waiting on communication {share('comm_waiting')} "
            f"(another {share('comm_hidden')} hidden under compute), {idle_words} {share('idle')}: "
            f"steps {first_step}-{first_step + got[0].steps - 1} profiled on {len(got)} of {processes} processes"
            + (f", {1e3 * statistics.median(p.step_s for p in got):.1f} ms a step unprofiled" if got[0].step_s else ""))
    return line + _hint(got)


def _why_not(first_step: int | None) -> str:
    if first_step is None:
        return f"the run has fewer than {MIN_STEPS} steps"
    return f"the run stopped before step {first_step + SAMPLED_STEPS - 1}"


def _hint(got: list[Breakdown]) -> str:
    """Names the limit when one stands out. A process whose host is late leaves its GPU idle, and makes the
    others wait inside the next collective: that waiting is the late host's, not the network's."""
    if got[0].on_device and max(p.idle for p in got) >= IDLE_HINT:
        return ("\n             the host is the limit (a process whose GPU waits for its host holds the others "
                "in the collectives): a larger per-device batch, "
                + advice("{} (fewer kernel launches), ", "compile", "true")
                + advice("or {} ", "dataloader_num_workers") + "would keep the GPU busy")
    if min(p.comm_waiting for p in got) >= COMM_HINT:
        return ("\n             communication is the limit: a larger per-device batch or "
                + advice("{} ", "gradient_accumulation_steps") + "sends the gradients less often per sample")
    return ""


class StepBreakdownCallback(Callback):
    """Profiles steps [first, first + SAMPLED_STEPS) near the end of the run and keeps every process's
    :class:`Breakdown`. ``mode``: "auto" (several processes), "true" (also one), "false"."""

    def __init__(self, mode: str):
        self.mode = mode
        self.first_step: int | None = None
        self.parts: list[Breakdown | None] = []
        self._profiler = None
        self._clock: float | None = None  # perf_counter at the start of the unprofiled steps
        self._step_seconds = 0.0
        self.unmeasurable: str | None = None

    def on_train_begin(self, trainer: "Trainer", state: "TrainerState") -> None:
        acc = trainer.accelerator
        wanted = self.mode == "true" or (self.mode == "auto" and acc.num_processes > 1)
        first = state.max_steps - SAMPLED_STEPS
        runs_long = state.max_steps >= MIN_STEPS and first - 1 - SAMPLED_STEPS > state.global_step
        self.first_step = first if wanted and runs_long else None
        self.parts, self._profiler, self._clock = [], None, None
        device = acc.plan.device
        self.unmeasurable = (f"torch's profiler records no {device.name} kernels, so the device's busy time is "
                             "unknown" if device.is_accelerator and device.profiler_activity is None else None)
        if self.unmeasurable:
            self.first_step = None

    def idle_hooks(self) -> tuple[str, ...]:
        """Asked after on_train_begin: a run that does not sample has nothing to do at its steps."""
        return ("on_step_end",) if self.first_step is None else ()

    def on_step_end(self, trainer: "Trainer", state: "TrainerState") -> None:
        if self.first_step is None:
            return
        if state.global_step == self.first_step - 1 - SAMPLED_STEPS:  # time as many steps without the profiler
            trainer.accelerator.plan.device.synchronize()
            self._clock = time.perf_counter()
        elif state.global_step == self.first_step - 1 and self._clock is not None:
            self._start(trainer)
        elif state.global_step == self.first_step + SAMPLED_STEPS - 1 and self._profiler is not None:
            self._finish(trainer)

    def on_train_end(self, trainer: "Trainer", state: "TrainerState") -> None:
        if self._profiler is not None:  # stopped inside the window: no measurement
            self._profiler.stop()
            self._profiler = None

    def summary(self, processes: int) -> list[str]:
        """The summary's line (none when this run does not sample: auto on one process, or false)."""
        if self.mode == "false" or (self.mode == "auto" and processes == 1):
            return []
        return summary_line(self.parts, processes, self.first_step, self.unmeasurable).split("\n")

    def record(self) -> dict[str, Any] | None:
        if not self.parts:
            return None
        return {"first_step": self.first_step, "processes": [p.as_dict() if p else None for p in self.parts]}

    def _start(self, trainer: "Trainer") -> None:
        import torch

        device = trainer.accelerator.plan.device
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.profiler_activity is not None:
            activities.append(getattr(torch.profiler.ProfilerActivity, device.profiler_activity))
        device.synchronize()  # the window starts with an empty queue (one sync, once per run)
        self._step_seconds = (time.perf_counter() - self._clock) / SAMPLED_STEPS
        # Kineto prints "USDT: ... profiler_start/stop" on every start and stop; above its highest level
        # (5) it prints nothing. A level the user exported is kept; --verbose (or --log_level info) keeps it talking.
        if trainer.config.quiet_third_party:
            os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        self._profiler = torch.profiler.profile(activities=activities)
        self._profiler.start()

    def _finish(self, trainer: "Trainer") -> None:
        acc = trainer.accelerator
        acc.plan.device.synchronize()  # every queued kernel of the window is in the trace
        profiler, self._profiler = self._profiler, None
        profiler.stop()
        mine = _measure(profiler, acc.plan.device.collective_kernel_marker, threading.get_native_id())
        mine = rescale(mine, self._step_seconds) if mine is not None else None
        from ..distributed import process_group as pg

        self.parts = pg.gather_object(mine)  # every process's shares; a collective, once


def _measure(profiler, kernel_marker: str | None, main_thread: int) -> Breakdown | None:
    handle, path = tempfile.mkstemp(suffix=".json", prefix="braeburn-steps-")
    os.close(handle)
    try:
        profiler.export_chrome_trace(path)
        with open(path, encoding="utf-8") as stream:
            events = json.load(stream).get("traceEvents", [])
    except (OSError, ValueError, RuntimeError):
        return None  # a profiler that records nothing here leaves the line "not sampled"
    finally:
        os.unlink(path)
    compute, comm, window = trace_intervals(events, kernel_marker, main_thread)
    return split(compute, comm, SAMPLED_STEPS, kernel_marker is not None, window)
