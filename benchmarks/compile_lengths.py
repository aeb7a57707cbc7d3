"""Which way of compiling is fastest for a run's length: eager, by regions or whole, through braeburn's Trainer.

    python benchmarks/compile_lengths.py --out OUT [--steps 7500] [--marks 500,3000] [--eager-stop 5000]
    python benchmarks/compile_lengths.py --out /tmp/cl --tiny --steps 40 --marks 10,20 --eager-stop 30  # CPU check

The long recipe of ``benchmarks/recipes.py`` (GPT-2 small from scratch on Python source, batch 8 x 1,024, bf16,
AdamW with clipping and a linear schedule: ``recipe_gpt2.py``) trained by ``braeburn.Trainer`` with its defaults,
one fresh process per run and each with an empty torch compile cache (``TORCHINDUCTOR_CACHE_DIR``: the cold case,
and no compile record of an earlier run for ``compile="auto"`` to read):

- ``compile=false``, ``regional`` and ``true`` for ``--steps`` optimizer steps, each recording the seconds from the
  process's start to the end of steps ``--marks`` (a device sync there). A run of N steps costs the same up to step
  N whatever its length (the schedule changes the numbers, not the work), so one long run gives the time to step
  500, 3,000 and 7,500 of each way; what follows the last step (evaluation, the last checkpoint, exit) is the same
  for the three. The eager run stops at ``--eager-stop``: once its time there exceeds another way's time to
  ``--steps``, eager cannot be the fastest at that length.
- ``compile="auto"`` with max_steps = each mark and ``--steps``: what the Trainer chooses for that length, and
  its time to the end of the run's steps (the run at ``--steps`` stops after 100 steps, once it has decided).

Writes OUT/compile_lengths.json (every run) and OUT/compile_lengths.md (the table).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULT = "COMPILE_LENGTHS_RESULT "


def child(args) -> None:
    """One Trainer run: the marks' times since the process started (the parent's clock, BENCH_T0)."""
    started_at = float(os.environ["BENCH_T0"])
    import torch

    import recipe_gpt2
    from braeburn import Trainer, TrainerCallback, TrainingConfig

    marks, stop = set(args.marks), args.stop
    seen: dict[int, float] = {}
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

    class Marks(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            if state.global_step in marks:
                sync()
                seen[state.global_step] = round(time.time() - started_at, 2)
            if stop and state.global_step >= stop:
                control.should_training_stop = True

    train, held_out = recipe_gpt2._blocks(Path(args.gpt2_cache))
    model = recipe_gpt2._model(args)
    config = TrainingConfig(output_dir=args.workdir, overwrite_output_dir=True, compile=args.compile,
                            per_device_train_batch_size=recipe_gpt2.BATCH, per_device_eval_batch_size=16,
                            learning_rate=recipe_gpt2.LEARNING_RATE, warmup_steps=recipe_gpt2.WARMUP,
                            max_steps=args.max_steps, use_cpu=not torch.cuda.is_available())
    trainer = Trainer(model, config, train_dataset=recipe_gpt2._Blocks(train),
                      eval_dataset=recipe_gpt2._Blocks(held_out), callbacks=[Marks()])
    trainer.train()
    trained = round(time.time() - started_at, 2)
    stats = trainer.accelerator.compile_stats()
    print(RESULT + json.dumps({"marks": seen, "trained_at": trained, "steps_run": trainer.state.global_step,
                               "compile_stats": stats.as_dict() if stats else None}), flush=True)


def cold_child(command: list[str], cache: str, log: Path) -> tuple[float, subprocess.CompletedProcess, str]:
    """Runs a benchmark's child process with ``cache`` as its (empty) compile cache and this checkout's braeburn,
    writes the command and its output to ``log``; returns when it started (the child's marks count from there, its
    imports included: BENCH_T0), the finished process and its output."""
    started = time.time()
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "BENCH_T0": repr(started),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1] / "src"),
                                                       os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(" ".join(command) + "\n\n" + output)
    return started, done, output


def run(args, compile_value: str, max_steps: int, marks: list[int], stop: int, label: str) -> dict:
    workdir = Path(args.out) / "work" / label
    cache = tempfile.mkdtemp(prefix=f"inductor-{label}-", dir=args.caches)  # cold: nothing compiled before
    command = [sys.executable, __file__, "--child", "--compile", compile_value, "--max-steps", str(max_steps),
               "--marks", ",".join(map(str, marks)), "--stop", str(stop), "--workdir", str(workdir),
               "--gpt2-cache", args.gpt2_cache] + (["--tiny"] if args.tiny else [])
    started, done, output = cold_child(command, cache, Path(args.out) / "logs" / f"{label}.log")
    result = {"label": label, "compile": compile_value, "max_steps": max_steps, "stop": stop,
              "process_seconds": round(time.time() - started, 2), "returncode": done.returncode}
    tagged = [line for line in output.splitlines() if line.startswith(RESULT)]
    if tagged:
        result.update(json.loads(tagged[-1][len(RESULT):]))
        result["marks"] = {int(k): v for k, v in result["marks"].items()}
    print(json.dumps(result), flush=True)
    return result


def plan(args) -> list[tuple[str, int, list[int], int, str]]:
    """(compile, max_steps, marks, stop, label) of every run, in the order they run."""
    marks = [*args.marks, args.steps]
    runs = [("false", args.steps, [m for m in marks if m <= args.eager_stop] + [args.eager_stop], args.eager_stop,
             "eager"), ("regional", args.steps, marks, 0, "regional"), ("true", args.steps, marks, 0, "whole")]
    runs += [("auto", length, [length], 0, f"auto-{length}") for length in args.marks]
    runs += [("auto", args.steps, [100], 100, f"auto-{args.steps}-decision")]
    return runs


def table(results: list[dict], args) -> str:
    lengths = [*args.marks, args.steps]
    lines = [f"GPT-2 small, the long recipe through braeburn.Trainer, cold compile caches; seconds from process start "
             f"to the end of step N (device synced); {time.strftime('%Y-%m-%d')}", "",
             "| way | compiled? | " + " | ".join(f"to step {n}" for n in lengths) + " | whole process |",
             "|---|---|" + "---|" * len(lengths) + "---|"]
    for r in results:
        if r["compile"] == "auto":
            continue
        cells = [str(r.get("marks", {}).get(n, f"> {r['marks'][max(r['marks'])]} (stopped at {max(r['marks'])})"
                                              if r.get("marks") else "-")) for n in lengths]
        stats = r.get("compile_stats") or {}
        lines.append(f"| {r['label']} (compile={r['compile']}) | {stats.get('reason', '-')} | " + " | ".join(cells)
                     + f" | {r['process_seconds']} |")
    lines += ["", "| compile=auto, max_steps | its choice | to its last step | whole process |", "|---|---|---|---|"]
    for r in results:
        if r["compile"] == "auto":
            stats = r.get("compile_stats") or {}
            choice = ("regional" if stats.get("regional") else "whole") if stats.get("compiled") else "eager"
            last = r.get("marks", {}).get(r["max_steps"], "-")
            lines.append(f"| {r['max_steps']} | {choice}: {stats.get('reason', '-')} | {last} | {r['process_seconds']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="compile-lengths")
    parser.add_argument("--steps", type=int, default=7500)
    parser.add_argument("--marks", default="500,3000", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--eager-stop", type=int, default=5000)
    parser.add_argument("--gpt2-cache", default=None, help="the recipe's tokenizer and ids (default: OUT/gpt2-data)")
    parser.add_argument("--gpt2-files", type=int, default=0, help="a sample of this many corpus files (a check)")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer GPT-2 (a check on a CPU)")
    parser.add_argument("--caches", default=None, help="where each run's empty compile cache is made")
    parser.add_argument("--only", default="", help="comma-separated labels to run (default: all)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compile", default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--max-steps", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.gpt2_tiny = args.tiny
    if args.child:
        return child(args)
    import recipe_gpt2

    Path(args.out).mkdir(parents=True, exist_ok=True)
    args.gpt2_cache = args.gpt2_cache or str(Path(args.out) / "gpt2-data")
    print("gpt2 data:", json.dumps(recipe_gpt2.prepare(Path(args.gpt2_cache), args.gpt2_files)), flush=True)
    results = []
    for spec in plan(args):
        if not args.only or spec[4] in args.only.split(","):
            results.append(run(args, *spec))
            (Path(args.out) / "compile_lengths.json").write_text(json.dumps(results, indent=1))
    (Path(args.out) / "compile_lengths.md").write_text(table(results, args))
    print(table(results, args))


if __name__ == "__main__":
    main()
