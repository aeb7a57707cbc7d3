"""Progress: a rich bar on a terminal; plain periodic lines when stdout is a file or a pipe.

A banner first says what is about to happen (examples, epochs, steps, the batch a step takes, the output
folder). The bar shows the step, loss, learning rate, samples/s, device memory and ETA, and each log and
evaluation also stays on screen as a line above it. Without a terminal (a log file, CI, nohup, a scheduler)
there is a line per log, and a plain "step n/N, ETA" line at least every HEARTBEAT_SECONDS between them.
Nothing here reads a device tensor: the loss and memory shown are those of the last logging step
(``on_log``), and a step costs a clock read.
"""

from __future__ import annotations

import sys
import time
from typing import IO, TYPE_CHECKING

from torch.utils.data import DataLoader

from .callbacks import Callback
from .state import TrainerState

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer

REFRESH_SECONDS = 0.1
HEARTBEAT_SECONDS = 30.0  # without a terminal, a line at least this often even when logs are far apart


def run_banner(trainer: "Trainer", state: TrainerState) -> str:
    """What the run is about to do, in one line (the Transformers Trainer's "***** Running training *****")."""
    config, processes = trainer.config, trainer.accelerator.num_processes
    examples = examples_phrase(trainer.train_dataset)
    per_step = config.per_device_train_batch_size * processes * config.gradient_accumulation_steps
    epochs = f"{state.num_epochs} epoch{'s' if state.num_epochs != 1 else ''}"
    resumed = f", from step {state.global_step}" if state.global_step else ""
    return (f"braeburn: training on {examples}: {epochs}, {state.max_steps} optimizer steps{resumed}, "
            f"{per_step} samples a step ({config.per_device_train_batch_size} per device x {processes} "
            f"process{'es' if processes != 1 else ''} x {config.gradient_accumulation_steps} accumulated); "
            f"a log line every {config.logging_steps} steps; output in {trainer.output_dir}")


def examples_phrase(data: object) -> str:
    """How many examples a run trains on: a dataset's length, or, for a DataLoader (the Lightning path passes the
    user's own), its sampler's or dataset's length, not its number of batches."""
    if isinstance(data, DataLoader):
        examples = _length(data.sampler) or _length(data.dataset)
        if examples is None and _length(data) is not None:
            return f"{len(data)} batches"
    else:
        examples = _length(data)
    return f"{examples} examples" if examples is not None else "an iterable dataset"


def _length(sized: object) -> int | None:
    try:
        return len(sized)  # type: ignore[arg-type]
    except TypeError:  # no __len__, or an iterable dataset's DataLoader
        return None


def memory_line(stats: dict[str, int]) -> str:
    """The summary's memory line: the peak where the device counts one, else what it can tell."""
    if stats.get("peak_bytes"):
        since = " (process peak since start)" if stats.get("peak_is_process_lifetime") else ""
        return f"peak mem   {human_bytes(stats['peak_bytes'])}{since}"
    if "allocated_bytes" not in stats:
        return "memory     not measured on this device"
    limit = ""
    if stats.get("limit_bytes"):
        limit = f", out-of-memory limit {human_bytes(stats['limit_bytes'])}"
    elif stats.get("recommended_bytes"):
        limit = ", no limit"
    driver = f", {human_bytes(stats['driver_bytes'])} held by the driver" if "driver_bytes" in stats else ""
    return (f"memory     {human_bytes(stats['allocated_bytes'])} in use at the end{driver}{limit} "
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
        driver = f" (driver {human_bytes(logs['driver_memory_bytes'])})" if logs.get("driver_memory_bytes") else ""
        parts.append(f"mem {human_bytes(logs['memory_bytes'])}{driver}")
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
        self._next_heartbeat = float("inf")
        self._start = 0.0
        self._start_step = 0

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        if not trainer.is_main_process:
            return
        stream = self.stream or sys.stdout
        use_rich = stream.isatty() if self.rich_bar is None else self.rich_bar
        self._start, self._start_step = time.perf_counter(), state.global_step
        if hasattr(trainer, "accelerator"):
            print(run_banner(trainer, state), file=stream, flush=True)
        self._next_heartbeat = self._start + HEARTBEAT_SECONDS
        if use_rich:
            self._progress = _rich_progress(stream)
            self._task = self._progress.add_task("train", total=state.max_steps, completed=state.global_step,
                                                 info="")
            self._progress.start()

    def on_step_end(self, trainer: "Trainer", state: TrainerState) -> None:
        now = time.perf_counter()
        if self._progress is None:
            if now >= self._next_heartbeat:  # no terminal, no log for a while: say where the run is
                self._print_line(state, now, "")
            return
        if now >= self._next_refresh:
            self._next_refresh = now + REFRESH_SECONDS
            self._progress.update(self._task, completed=state.global_step)

    def on_log(self, trainer: "Trainer", state: TrainerState, logs: dict[str, float]) -> None:
        if not trainer.is_main_process:
            return
        if self._progress is not None:
            self._progress.update(self._task, completed=state.global_step, info=describe_logs(logs))
            # kept above the bar: every loss and evaluation stays on screen, not only the last one
            self._progress.console.print(f"step {state.global_step}/{state.max_steps} | {describe_logs(logs)}",
                                         highlight=False)
            return
        self._print_line(state, time.perf_counter(), describe_logs(logs))

    def _print_line(self, state: TrainerState, now: float, described: str) -> None:
        done = state.global_step - self._start_step
        left = (state.max_steps - state.global_step) * (now - self._start) / done if done else 0.0
        percent = 100 * state.global_step / max(state.max_steps, 1)
        middle = f" | {described}" if described else ""
        print(f"step {state.global_step}/{state.max_steps} ({percent:.0f}%) | epoch {state.epoch_progress:.2f}{middle} | "
              f"ETA {human_seconds(left)}", file=self.stream or sys.stdout, flush=True)
        self._next_heartbeat = now + HEARTBEAT_SECONDS

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
