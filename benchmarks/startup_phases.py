"""Where a short run's process time goes, phase by phase: the MRPC recipe's braeburn command, timed from the
process's start to its exit.

    python benchmarks/startup_phases.py --out OUT -- examples/text_classification.py --task_name mrpc ...

Runs the example in a child process whose phases are timed by wrapping the functions that do them (no profiler
in the timed run): interpreter start, imports, data, model, the Trainer's setup, the first step, the other steps,
checkpoints, the end of train() (plot, last save), save_model, evaluation, the result file, and exit (the
process's end after main() returned). Work on other threads (each checkpoint's write, the plot's drawing) is timed
as spans beside the phases. With --profile, a second run under cProfile writes OUT/phases.prof.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TAG = "PHASES "


def _process_age() -> float:
    """Seconds since this process started (Linux: /proc/self/stat's start time against the boot clock)."""
    ticks = os.sysconf("SC_CLK_TCK")
    start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
    return time.clock_gettime(time.CLOCK_BOOTTIME) - start


def _wrap(owner, name: str, marks: list, label: str) -> None:
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        marks.append((f"{label} begins", time.perf_counter()))
        try:
            return original(*args, **kwargs)
        finally:
            marks.append((f"{label} ends", time.perf_counter()))
    setattr(owner, name, timed)


def _wrap_span(owner, name: str, spans: list, label: str) -> None:
    """Times a call that may run on another thread (the checkpoint writer, the plot): its own list of spans."""
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        begun = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spans.append((label, begun, time.perf_counter()))
    setattr(owner, name, timed)


def child(example: str, argv: list[str], profile: str | None) -> None:
    zero = time.perf_counter() - _process_age()  # the process's start on the perf_counter clock
    marks = [("interpreter up", time.perf_counter())]
    sys.path.insert(0, str(Path(example).parent))
    sys.argv = [example, *argv]
    import torch  # noqa: F401
    marks.append(("torch imported", time.perf_counter()))
    module = __import__(Path(example).stem)  # the example's own imports (transformers, braeburn, ...)
    marks.append(("example imported", time.perf_counter()))
    from braeburn.trainer import checkpoint, loop, plots
    from braeburn.trainer.callbacks import Callback

    spans: list = []  # work on other threads: each checkpoint's write, the plot's drawing
    _wrap_span(checkpoint.CheckpointManager, "save", spans, "checkpoint write")
    _wrap_span(plots, "plot_history", spans, "plot drawn")

    for name in ("read_splits", "build_model", "write_json"):
        if hasattr(module, name):
            _wrap(module, name, marks, name)
    trainer_type = module.Trainer
    for name in ("train", "save_model", "evaluate", "_setup_training", "_save", "_save_at_stop"):
        _wrap(trainer_type, name, marks, name)
    _wrap(loop.Trainer, "_train_epochs", marks, "steps")
    _wrap(plots.PlotCallback, "wait", marks, "waiting for the plot")

    class Steps(Callback):
        def on_step_end(self, trainer, state):
            if state.global_step == 1:
                marks.append(("first step done", time.perf_counter()))

    init = trainer_type.__init__

    def init_with_callback(self, *args, **kwargs):
        kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), Steps()]
        marks.append(("Trainer() begins", time.perf_counter()))
        init(self, *args, **kwargs)
        marks.append(("Trainer() ends", time.perf_counter()))
    trainer_type.__init__ = init_with_callback
    if profile:
        import cProfile

        cProfile.runctx("module.main()", globals(), {"module": module}, profile)
    else:
        module.main()
    marks.append(("main() returned", time.perf_counter()))
    print(TAG + json.dumps({"marks": [(label, round(at - zero, 3)) for label, at in marks],
                            "spans": [(label, round(a - zero, 3), round(b - zero, 3)) for label, a, b in spans]}),
          flush=True)


def measure(example: str, argv: list[str], profile: str | None = None) -> dict:
    command = [sys.executable, __file__, "--child", example, *(["--profile-out", profile] if profile else []), "--", *argv]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, errors="replace")
    seconds = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith(TAG)]
    if done.returncode or not lines:
        sys.exit(f"the run failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    told = json.loads(lines[-1][len(TAG):])
    return {"process_seconds": round(seconds, 3), "marks": told["marks"] + [["exit", round(seconds, 3)]],
            "spans": told["spans"], "log": done.stdout[-4000:]}


def phases(marks: list) -> list[tuple[str, float]]:
    """Consecutive marks as (from -> to, seconds): every second of the process lies in one row."""
    rows, last_label, last = [], "process start", 0.0
    for label, at in marks:
        rows.append((f"{last_label} -> {label}", round(at - last, 3)))
        last_label, last = label, at
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/startup-phases")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)  # the child's cProfile file
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.child:
        child(args.child, command, args.profile_out)
        return
    args_profile = str(Path(args.out) / "phases.prof") if args.profile else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [measure(command[0], command[1:]) for _ in range(args.rounds)]
    if args_profile:
        measure(command[0], command[1:], args_profile)
    (out / "phases.json").write_text(json.dumps({"command": command, "runs": runs}, indent=1))
    for index, run in enumerate(runs, start=1):
        print(f"run {index}: {run['process_seconds']:.2f} s")
        for label, seconds in phases(run["marks"]):
            print(f"  {seconds:7.3f} s  {label}")
        for label, begun, ended in run["spans"]:
            print(f"  {ended - begun:7.3f} s  {label} (another thread, {begun:.3f} -> {ended:.3f} s)")


if __name__ == "__main__":
    main()
