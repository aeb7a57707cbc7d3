"""Progress: a rich bar on a terminal; plain periodic lines when stdout is a file or a pipe.

The bar shows the step, loss, learning rate, samples/s, device memory and ETA. It never reads a
device tensor: the loss and memory it shows are those of the last logging step (``on_log``), and
its position is refreshed at most ten times a second, so a step costs a clock read here.
"""

from __future__ import annotations

import sys
import time
from typing import IO, TYPE_CHECKING

from .callbacks import Callback
from .state import TrainerState

if TYPE_CHECKING:
    from .loop import Trainer

REFRESH_SECONDS = 0.1


def memory_line(stats: dict[str, int]) -> str:
    """The summary's memory line: the peak where the device counts one, else what it can tell."""
    if stats.get("peak_bytes"):
        return f"peak mem   {human_bytes(stats['peak_bytes'])}"
    if "allocated_bytes" not in stats:
        return "memory     not measured on this device"
    limit = ""
    if stats.get("limit_bytes"):
        limit = f", out-of-memory limit {human_bytes(stats['limit_bytes'])}"
    elif stats.get("recommended_bytes"):
        limit = ", no limit"
    return (f"memory     {human_bytes(stats['allocated_bytes'])} in use at the end{limit} "
            "(this device has no peak counter)")


def human_bytes(count: float | None) -> str:
    if not count:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


def human_seconds(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def describe_logs(logs: dict[str, float]) -> str:
    parts = []
    if "loss" in logs:
        parts.append(f"loss {logs['loss']:.4f}")
    if "learning_rate" in logs:
        parts.append(f"lr {logs['learning_rate']:.2e}")
    if "samples_per_second" in logs:
        parts.append(f"{logs['samples_per_second']:.0f} samples/s")
    if logs.get("memory_bytes"):
        parts.append(f"mem {human_bytes(logs['memory_bytes'])}")
    parts += [f"{k} {v:.4f}" for k, v in logs.items() if k.startswith("eval_") and isinstance(v, float)]
    return " | ".join(parts)


class ProgressCallback(Callback):
    """A rich progress bar when ``stream`` is a terminal, otherwise one line per log."""

    def __init__(self, stream: IO[str] | None = None, rich_bar: bool | None = None, disable: bool | None = None):
        self.stream = stream
        self.rich_bar = False if disable else rich_bar  # disable (--disable_tqdm): log lines, no bar
        self._progress = None
        self._task = None
        self._next_refresh = 0.0
        self._start = 0.0
        self._start_step = 0

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        if not trainer.is_main_process:
            return
        stream = self.stream or sys.stdout
        use_rich = stream.isatty() if self.rich_bar is None else self.rich_bar
        self._start, self._start_step = time.perf_counter(), state.global_step
        if use_rich:
            self._progress = _rich_progress(stream)
            self._task = self._progress.add_task("train", total=state.max_steps, completed=state.global_step,
                                                 info="")
            self._progress.start()

    def on_step_end(self, trainer: "Trainer", state: TrainerState) -> None:
        if self._progress is None:
            return
        now = time.perf_counter()
        if now >= self._next_refresh:
            self._next_refresh = now + REFRESH_SECONDS
            self._progress.update(self._task, completed=state.global_step)

    def on_log(self, trainer: "Trainer", state: TrainerState, logs: dict[str, float]) -> None:
        if not trainer.is_main_process:
            return
        if self._progress is not None:
            self._progress.update(self._task, completed=state.global_step, info=describe_logs(logs))
            return
        done = state.global_step - self._start_step
        elapsed = time.perf_counter() - self._start
        left = (state.max_steps - state.global_step) * elapsed / done if done else 0.0
        percent = 100 * state.global_step / max(state.max_steps, 1)
        line = (f"step {state.global_step}/{state.max_steps} ({percent:.0f}%) | epoch {state.epoch_progress:.2f} | "
                f"{describe_logs(logs)} | ETA {human_seconds(left)}")
        print(line, file=self.stream or sys.stdout, flush=True)

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=state.global_step)
            self._progress.stop()
            self._progress = None


def _rich_progress(stream: IO[str]):
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                    console=Console(file=stream), refresh_per_second=5, transient=False)
