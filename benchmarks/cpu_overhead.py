"""Per-step overhead of braeburn's Trainer against a bare PyTorch loop, on a tiny MLP on the CPU.

    python benchmarks/cpu_overhead.py [--steps 2000] [--rounds 6] [--processes 1] [--measure loop] [--breakdown]

Both loops do the same math: a shuffled DataLoader (batch 16), forward, cross-entropy, backward, gradient clipping
at 1.0, AdamW (fused, as the Trainer picks on the CPU) and a linear schedule. The Trainer runs with its progress
output (plain lines, stdout to a file) and the metrics log on, logging every 50 steps; checkpoints are off.

Paired: each round runs the bare loop and braeburn back to back, in the same process, the order swapped every
round, and gives one ratio (bare us/step over braeburn's); the median and the range of the rounds' ratios are
reported, and what braeburn adds per step (its us/step less the bare loop's, per round), and the ratio of each
runner's fastest round (other jobs only ever slow a round down, so the fastest is the least disturbed). Timed on
this process's CPU time by default (one torch thread), which other jobs on a shared machine disturb less than wall
time.
``--processes P`` runs the rounds in P fresh processes one after the other, pooled (a process's memory layout
moves a step's time too).

``--measure loop`` (the default) times the training loop alone: the bare loop's for-loop, braeburn's epochs
(``CoreTrainer._train_epochs``), neither the setup nor the summary and plot at the end. ``--measure marginal``
times the whole train() at S and 2S steps, S / (t(2S) - t(S)) (the fixed costs cancel on average; the end-of-run
plot's spread does not). ``--peers`` adds Accelerate and Lightning where installed (``marginal`` only).

``--breakdown`` traces both loops (sys.settrace: Python calls and bytecodes, counts the machine's load does not
change; S and 2S steps, the difference over S) and lists where braeburn's step does what it adds, by braeburn
module and function, with the measured microseconds shared out by bytecodes (an estimate: a profiler's times on a
shared 2-core machine moved more than the whole difference between the loops). Goal: ratio >= 0.9.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import torch
from torch.utils.data import DataLoader, TensorDataset

from braeburn import Trainer, TrainingConfig
from braeburn.plan.envvars import MAX_STEPS_VAR, max_steps_cap

BATCH = 16
clock = time.process_time  # --clock wall: time.perf_counter


def data(steps: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    n = BATCH * steps
    return TensorDataset(torch.randn(n, 32, generator=generator), torch.randint(0, 10, (n,), generator=generator))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def bare(steps: int, around=contextlib.nullcontext) -> float:
    """The bare loop's seconds (its for-loop alone: the loop and the whole run are the same here); ``around``: a
    context the loop runs in (the breakdown's tracer)."""
    net, dataset = model(), data(steps)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    with around():
        started = clock()
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        return clock() - started


def braeburn(steps: int, loop_only: bool = False, around=contextlib.nullcontext) -> float:
    """braeburn.Trainer's seconds: the whole train(), or with ``loop_only`` its epochs alone (_train_epochs), run in
    the context ``around`` gives."""
    net, dataset = model(), data(steps)
    with tempfile.TemporaryDirectory() as folder:
        config = TrainingConfig(output_dir=f"{folder}/out", per_device_train_batch_size=BATCH, learning_rate=1e-3,
                                num_train_epochs=1, logging_steps=50, save_strategy="no", use_cpu=True)
        sink = io.StringIO()  # not a terminal: plain progress lines, as in a batch job's log file
        with contextlib.redirect_stdout(sink):
            trainer = Trainer(net, config, train_dataset=dataset, loss_fn=torch.nn.functional.cross_entropy)
            loop, spent = trainer._train_epochs, []

            def timed(loader):
                with around():
                    started = clock()
                    try:
                        loop(loader)
                    finally:
                        spent.append(clock() - started)

            if loop_only:
                trainer._train_epochs = timed  # an instance attribute: this trainer only
            started = clock()
            trainer.train()
            return spent[0] if loop_only else clock() - started


def accelerate(steps: int) -> float:
    """Hugging Face Accelerate around the same loop (the user's loop, Accelerate's prepare/backward)."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    net, dataset = model(), data(steps)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    net, optimizer, loader, scheduler = accelerator.prepare(net, optimizer, loader, scheduler)
    started = clock()
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(net(x), y)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return clock() - started


def lightning(steps: int) -> float:
    """Lightning's Trainer with its defaults (progress bar, logger), the same math in training_step."""
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model()

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3, fused=True)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, gradient_clip_val=1.0, default_root_dir=folder,
                            enable_checkpointing=False, log_every_n_steps=50, enable_model_summary=False)
        loader = DataLoader(data(steps), batch_size=BATCH, shuffle=True)
        started = clock()
        trainer.fit(Module(), loader)
        return clock() - started


def available(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


# -- the paired measurement ------------------------------------------------------------------------------------
def step_us(run, steps: int, measure: str) -> float:
    """Microseconds a step of ``run``: its loop's time over the steps, or the marginal (t(2S) - t(S)) / S."""
    if measure == "loop":
        return run(steps) / steps * 1e6
    return (run(2 * steps) - run(steps)) / steps * 1e6


def runners(measure: str, peers: bool) -> dict:
    loop = lambda steps: braeburn(steps, loop_only=True)
    found = {"bare": bare, "braeburn": loop if measure == "loop" else braeburn}
    if peers and measure == "marginal":
        found.update({name: run for name, run in (("accelerate", accelerate), ("lightning", lightning))
                      if available(name)})
    return found


def measure_rounds(steps: int, rounds: int, measure: str, peers: bool = False, first: int = 0) -> list[dict]:
    """One dict of us/step per runner a round; the runners' order turns by one place each round (round ``first`` +
    i), so that no runner always runs first in a pair."""
    found = runners(measure, peers)
    names = list(found)
    out = []
    for index in range(first, first + rounds):
        shift = index % len(names)
        out.append({name: step_us(found[name], steps, measure) for name in names[shift:] + names[:shift]})
    return out


def summarize(rows: list[dict]) -> dict:
    """Per round: the ratio bare/braeburn (braeburn's share of the bare loop's step rate) and the microseconds
    braeburn adds; their median and range, and each runner's median us/step."""
    ratios = [row["bare"] / row["braeburn"] for row in rows]
    added = [row["braeburn"] - row["bare"] for row in rows]
    spread = lambda values: {"median": statistics.median(values), "min": min(values), "max": max(values)}
    per_step = {name: spread([row[name] for row in rows]) for name in rows[0]}
    fastest = {"ratio": per_step["bare"]["min"] / per_step["braeburn"]["min"],  # other jobs only ever slow a round
               "added_us": per_step["braeburn"]["min"] - per_step["bare"]["min"]}
    return {"rounds": len(rows), "ratio": spread(ratios), "added_us": spread(added), "us_per_step": per_step,
            "fastest": fastest}


def report(summary: dict, args: argparse.Namespace) -> str:
    ratio, added, per_step = summary["ratio"], summary["added_us"], summary["us_per_step"]
    lines = ["| runner | us/step (median) | min-max | vs bare loop |", "|---|---|---|---|"]
    for name, values in per_step.items():
        lines.append(f"| {name} | {values['median']:.1f} | {values['min']:.1f}-{values['max']:.1f} | "
                     f"{per_step['bare']['median'] / values['median']:.3f} |")
    lines += ["", f"braeburn / bare loop, paired: median {ratio['median']:.3f} (rounds {ratio['min']:.3f}-"
                  f"{ratio['max']:.3f}); braeburn adds {added['median']:.1f} us a step (rounds {added['min']:.1f}-"
                  f"{added['max']:.1f}) to the bare loop's {per_step['bare']['median']:.1f}",
              f"the runners' fastest rounds (the least disturbed): {summary['fastest']['ratio']:.3f}, braeburn adds "
              f"{summary['fastest']['added_us']:.1f} us",
              f"goal: >= 0.9; {_verdict(ratio)}",
              f"({args.measure}: {args.steps} steps, {summary['rounds']} paired rounds in {args.processes} "
              f"process(es), {args.clock} clock, one torch thread)"]
    return "\n".join(lines)


def _verdict(ratio: dict) -> str:
    if ratio["min"] >= 0.9:
        return "met in every round"
    if ratio["max"] < 0.9:
        return "missed in every round"
    return f"the rounds straddle 0.9 (median {'at or above' if ratio['median'] >= 0.9 else 'below'} it)"


def rounds_in_processes(args: argparse.Namespace) -> list[dict]:
    """Each process runs args.rounds rounds (the order continuing where the last process left it); pooled."""
    rows = []
    for process in range(args.processes):
        command = [sys.executable, os.path.abspath(__file__), "--child", str(process * args.rounds),
                   *_child_arguments(args)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def _child_arguments(args: argparse.Namespace) -> list[str]:
    return ["--steps", str(args.steps), "--rounds", str(args.rounds), "--clock", args.clock, "--measure",
            args.measure, "--warmup", str(args.warmup)] + (["--peers"] if args.peers else [])


# -- the step breakdown ----------------------------------------------------------------------------------------
class _Tracer:
    """Python function calls and bytecodes run, per code object (sys.settrace's call and opcode events): counts that
    do not depend on the machine's load, unlike a profiler's times on a shared machine."""

    def __init__(self):
        self.counts: dict = defaultdict(lambda: [0, 0])

    def __call__(self, frame, event, arg):
        if event == "call":
            frame.f_trace_opcodes = True
            self.counts[frame.f_code][0] += 1
        elif event == "opcode":
            self.counts[frame.f_code][1] += 1
        return self


def _traced(run, steps: int) -> dict:
    tracer = _Tracer()
    run(steps, lambda: _tracing(tracer))
    return {_where(code): counts for code, counts in tracer.counts.items()}


@contextlib.contextmanager
def _tracing(tracer):
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(None)


def _where(code) -> tuple[str, int, str]:
    return code.co_filename, code.co_firstlineno, code.co_name


def marginal_counts(run, steps: int) -> dict:
    """Per function (file, line, name): [calls, bytecodes] a step, from ``steps`` and 2 x ``steps``."""
    one, two = _traced(run, steps), _traced(run, 2 * steps)
    empty = (0, 0)
    return {key: [(two.get(key, empty)[i] - one.get(key, empty)[i]) / steps for i in (0, 1)]
            for key in set(one) | set(two)}


def place(key: tuple) -> str:
    """A function's module, as the breakdown groups it: braeburn's by file, everything else as torch/Python."""
    file = key[0]
    if "/braeburn/" in file and "/benchmarks/" not in file:
        return "braeburn/" + file.rsplit("/braeburn/", 1)[1]
    if "/torch/" in file:
        return "torch (Python)"
    return "the Python standard library" if "/lib/python3" in file else "other"


def _traced_loop(steps: int, around) -> None:
    braeburn(steps, loop_only=True, around=around)


def breakdown(steps: int, added_us: float | None = None, top: int = 25) -> tuple[list, list]:
    """(modules, functions): rows of (where, Python calls a step, bytecodes a step, scaled us) beyond the bare
    loop, the most bytecodes first; ``scaled``: ``added_us`` (the measured microseconds braeburn adds) shared out
    by braeburn's bytecodes, None without it. Only the braeburn loop's epochs are traced (_train_epochs)."""
    plain = marginal_counts(bare, steps)
    mine = marginal_counts(_traced_loop, steps)
    zero = (0.0, 0.0)
    diff = {key: [mine.get(key, zero)[i] - plain.get(key, zero)[i] for i in (0, 1)] for key in set(plain) | set(mine)}
    diff = {key: counts for key, counts in diff.items() if not _outside_the_loop(key)}
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for key, (calls, codes) in diff.items():
        modules[place(key)][0] += calls
        modules[place(key)][1] += codes
    own = sum(codes for where, (_, codes) in modules.items() if where.startswith("braeburn/"))
    share = lambda where, codes: (added_us * codes / own if added_us is not None and own > 0
                                  and where.startswith("braeburn/") else None)
    row = lambda where, calls, codes: (where, calls, codes, share(where, codes))
    module_rows = sorted((row(where, *values) for where, values in modules.items()), key=lambda r: -abs(r[2]))
    functions = sorted((row(f"{place(key)}:{key[1]}({key[2]})", *values) for key, values in diff.items()
                        if place(key).startswith("braeburn/") and values[0] > 0), key=lambda r: -r[2])
    return [r for r in module_rows if abs(r[1]) >= 0.01 or abs(r[2]) >= 0.5], functions[:top]


def _outside_the_loop(key: tuple) -> bool:
    """The benchmark's own frames: the bare loop's function and the timing wrapper around braeburn's loop."""
    return key[0] == __file__ or key[0].endswith("cpu_overhead.py")


def breakdown_report(modules: list, functions: list, steps: int) -> str:
    def table(title: str, rows: list) -> list[str]:
        out = [f"| {title} | Python calls a step | bytecodes a step | us a step, by bytecodes |", "|---|---|---|---|"]
        for where, calls, codes, scaled in rows:
            out.append(f"| {where} | {calls:+.2f} | {codes:+.0f} | {'' if scaled is None else f'{scaled:.1f}'} |")
        return out

    calls, codes = sum(r[1] for r in modules), sum(r[2] for r in modules)
    return "\n".join([f"step breakdown, beyond the bare loop (sys.settrace, {steps} and {2 * steps} steps of each "
                      f"loop: {calls:+.1f} Python calls and {codes:+.0f} bytecodes a step in all; the measured "
                      "microseconds shared out by braeburn's bytecodes, an estimate: a tensor operation or a "
                      "C call costs more than a bytecode):", ""] + table("where", modules) + [""]
                     + table("braeburn function (a call or more a step)", functions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6, help="paired rounds (per process with --processes)")
    parser.add_argument("--processes", type=int, default=1, help="fresh processes the rounds run in, one by one")
    parser.add_argument("--measure", choices=("loop", "marginal"), default="loop")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="cpu",
                        help="this process's CPU time (one torch thread), which other jobs disturb less, or wall time")
    parser.add_argument("--breakdown", action="store_true", help="profile where braeburn's extra time per step goes")
    parser.add_argument("--peers", action="store_true", help="Accelerate and Lightning too (--measure marginal)")
    parser.add_argument("--warmup", type=int, default=120, help="steps of each runner first (imports, kernels)")
    parser.add_argument("--json", help="write the rounds and the summary to this file")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)  # a process of --processes: its first round
    args = parser.parse_args()
    cap = max_steps_cap()  # BRAEBURN_MAX_STEPS: a quick check that the script runs (the doc tests), not a measurement
    if cap is not None:
        args.steps, args.rounds, args.processes, args.warmup = max(2, cap // 2), 2, 1, cap
        print(f"{MAX_STEPS_VAR}={cap}: {args.steps} steps, 2 rounds: the figures mean nothing")
    global clock
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    if args.child is not None or args.processes == 1:
        for run in runners(args.measure, args.peers).values():
            run(args.warmup)  # warm up: imports, kernels, and the end-of-run plot (matplotlib loads once)
        rows = measure_rounds(args.steps, args.rounds, args.measure, args.peers, first=args.child or 0)
        if args.child is not None:
            print(json.dumps(rows))
            return
    else:
        rows = rounds_in_processes(args)
    summary = summarize(rows)
    print(report(summary, args))
    if args.breakdown:
        steps = min(args.steps, 200)  # counts, not times: a few hundred steps give them exactly (tracing is slow)
        modules, functions = breakdown(steps, summary["added_us"]["median"])
        print("\n" + breakdown_report(modules, functions, steps))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"arguments": vars(args), "rounds": rows, "summary": summary}, out, indent=1)


if __name__ == "__main__":
    main()
