"""How long ``compile="auto"`` takes to reach the first step and its decision, against compile false, true and regional.

    python benchmarks/compile_start.py --out OUT [--rounds 3] [--modes false,auto,true] [--stop 13] [--budget 160]
    python benchmarks/compile_start.py --out /tmp/cs --tiny --cpu-compiles --rounds 2 --stop 20 --max-steps 200  # CPU

GPT-2 small (the long recipe's model, ``recipe_gpt2.py``, built from a config: nothing from the hub) trained by
``braeburn.Trainer`` with its defaults on random token blocks (batch 8 x 1,024, max_steps 7,500, no checkpoints),
one fresh process per run, each with an empty torch compile cache, the modes alternating within each round. Each
run records the seconds from its process's start (the parent's clock) to: the imports, the model built, the
Trainer built, ``on_train_begin``, and the end of steps 1, 3 and ``--stop`` (a device sync at each), where it stops:
step 13 is where compile="auto" has decided (steps 4-13 timed), before any compiling has run, so the runs measure
what each mode does before it compiles, not the compile. Also kept: the device syncs braeburn made up to there, and
whether torch's Dynamo and Inductor were imported at the first step.

``--cpu-compiles`` makes the CPU count as a device that compiles by default, as a GPU does, so that on a CPU
compile="auto" takes the path it takes on a GPU (it times steps 4-13 and decides at step 13); on a CPU it otherwise
stays eager from the start. Writes OUT/compile_start.json (every run), OUT/compile_start.md (medians and spread) and
each run's output in OUT/logs/ (the runs' own folders, their metrics and plots, go to ``--work``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_lengths import cold_child  # noqa: E402  (a child with an empty compile cache, logged)

RESULT = "COMPILE_START_RESULT "
MARKED_STEPS = (1, 3)
COMPILE_VALUES = {"false": False, "true": True, "auto": "auto", "regional": "regional"}


def child(args) -> None:
    started_at = float(os.environ["BENCH_T0"])
    seen: dict[str, float] = {}

    def mark(name: str) -> None:
        seen[name] = round(time.time() - started_at, 3)

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from braeburn import Trainer, TrainerCallback, TrainingConfig
    from braeburn.devices.cpu import CpuDevice

    if args.cpu_compiles:
        CpuDevice.compile_by_default = lambda self, host: (True, "compile_start.py --cpu-compiles: as on a GPU")
    mark("imports")
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    torch.manual_seed(0)
    size = {"n_layer": 2, "n_embd": 64, "n_head": 2} if args.tiny else {}
    block, vocab = (64, 512) if args.tiny else (1024, 32768)  # the recipe's block and vocabulary
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=block, bos_token_id=0, eos_token_id=0, **size))
    rows = torch.randint(0, vocab, (8 * (args.stop + 8), block), generator=torch.Generator().manual_seed(0))
    dataset = [{"input_ids": row, "labels": row} for row in rows]
    mark("model")
    syncs = {"count": 0}

    class Marks(TrainerCallback):
        def on_train_begin(self, _args, state, control, **kwargs):
            mark("train_begin")

        def on_step_end(self, _args, state, control, **kwargs):
            if state.global_step in MARKED_STEPS or state.global_step == args.stop:
                sync()
                mark(f"step {state.global_step}")
            if state.global_step == 1:
                seen["dynamo_at_step_1"] = "torch._dynamo" in sys.modules
                seen["inductor_at_step_1"] = "torch._inductor" in sys.modules
            if state.global_step >= args.stop:
                seen["syncs_to_stop"] = syncs["count"]
                control.should_training_stop = True

    config = TrainingConfig(output_dir=args.workdir, overwrite_output_dir=True, compile=COMPILE_VALUES[args.mode],
                            per_device_train_batch_size=8, max_steps=args.max_steps, save_strategy="no",
                            logging_steps=50, use_cpu=not torch.cuda.is_available())
    trainer = Trainer(model, config, train_dataset=dataset, callbacks=[Marks()])
    kind = trainer.accelerator.plan.device
    synchronize = kind.synchronize

    def counted() -> None:
        syncs["count"] += 1
        synchronize()

    kind.synchronize = counted  # the compile window's clock and the prepared forward's first compiled call
    mark("trainer")
    trainer.train()
    mark("trained")
    stats = trainer.accelerator.compile_stats()
    seen["decision"] = stats.reason if stats else None
    seen["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(RESULT + json.dumps(seen), flush=True)


def run(args, mode: str, label: str) -> dict:
    cache = tempfile.mkdtemp(prefix=f"inductor-{label}-", dir=args.caches)
    command = [sys.executable, __file__, "--child", "--mode", mode, "--stop", str(args.stop), "--max-steps",
               str(args.max_steps), "--workdir", str(Path(args.work) / label)]
    command += ["--tiny"] * args.tiny + ["--cpu-compiles"] * args.cpu_compiles
    started, done, output = cold_child(command, cache, Path(args.out) / "logs" / f"{label}.log")
    result = {"label": label, "mode": mode, "process_seconds": round(time.time() - started, 3),
              "returncode": done.returncode}
    tagged = [line for line in output.splitlines() if line.startswith(RESULT)]
    if tagged:
        result.update(json.loads(tagged[-1][len(RESULT):]))
    print(json.dumps(result), flush=True)
    return result


def order(modes: list[str], round_: int) -> list[str]:
    """The modes of one round, rotated by the round: each leads in turn, so none always runs first (cold files)."""
    shift = round_ % len(modes)
    return modes[shift:] + modes[:shift]


PHASES = ("imports", "model", "trainer", "train_begin", "step 1", "step 3")


def table(results: list[dict], args) -> str:
    """Per mode: the median (min-max) seconds from process start to each mark, and Trainer-built to step 1."""
    marks = [*PHASES, f"step {args.stop}", "process_seconds"]
    lines = [f"compile_start.py: seconds from process start, median (min-max) of the rounds; stop at step {args.stop}; "
             f"device {next((r['device'] for r in results if 'device' in r), '?')}; {time.strftime('%Y-%m-%d')}", "",
             "| mode | runs | " + " | ".join(marks) + " | Trainer built -> step 1 | syncs to stop | dynamo at step 1 |",
             "|---|---|" + "---|" * len(marks) + "---|---|---|"]
    for mode in args.modes:
        runs = [r for r in results if r["mode"] == mode and r.get("returncode") == 0 and "step 1" in r]
        if not runs:
            lines.append(f"| {mode} | 0 (failed: see logs/) |" + " |" * (len(marks) + 3))
            continue
        cells = [_spread([r.get(m) for r in runs]) for m in marks]
        cells.append(_spread([r["step 1"] - r["trainer"] for r in runs]))
        cells.append(_spread([r.get("syncs_to_stop") for r in runs]))
        cells.append("/".join(str(r.get("dynamo_at_step_1")) for r in runs))
        lines.append(f"| {mode} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _spread(values: list) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="compile-start")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="false,auto,true", type=lambda s: s.split(","))
    parser.add_argument("--stop", type=int, default=13, help="the last step (13: compile=auto's decision)")
    parser.add_argument("--max-steps", type=int, default=7500)
    parser.add_argument("--budget", type=float, default=160.0, help="seconds: no new round once a round would not fit")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer GPT-2, vocabulary 512, blocks of 64 (a check)")
    parser.add_argument("--cpu-compiles", action="store_true", help="the CPU compiles by default, as a GPU does")
    parser.add_argument("--caches", default=None, help="where each run's empty compile cache is made")
    parser.add_argument("--work", default=None, help="the runs' output folders (default: a new temporary folder)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="auto", choices=sorted(COMPILE_VALUES), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    args.work = args.work or tempfile.mkdtemp(prefix="compile-start-")
    results: list[dict] = []
    began = time.time()
    for round_ in range(args.rounds):
        elapsed = time.time() - began
        if round_ and elapsed / round_ * (round_ + 1) > args.budget:
            print(f"stopping after {round_} round(s): another would pass --budget {args.budget:g} s", flush=True)
            break
        for mode in order(args.modes, round_):
            results.append(run(args, mode, f"{mode}-{round_}"))
            (Path(args.out) / "compile_start.json").write_text(json.dumps(results, indent=1))
    (Path(args.out) / "compile_start.md").write_text(table(results, args))
    print(table(results, args))


if __name__ == "__main__":
    main()
