"""Where does braeburn's Trainer wait for the GPU? Runs a workload with CUDA's sync debug mode on,
counts the synchronising calls per step and where they come from, then times a few variants.

    python benchmarks/sync_audit.py --workload bert-base --steps 40
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from peers import WORKLOADS, StepClock, SyntheticDataset, collate  # noqa: E402

from braeburn import Trainer, TrainingConfig  # noqa: E402
from braeburn.trainer.callbacks import Callback  # noqa: E402


def run(workload, steps, warmup, audit=False, **overrides):
    torch.manual_seed(0)
    device = torch.device("cuda")
    ds = SyntheticDataset(workload.make_sample, (steps + 2) * workload.batch_size)
    clock = StepClock(device, warmup, steps)
    sites = collections.Counter()

    class Clock(Callback):
        def on_step_end(self, trainer, state, **kwargs):
            clock.step_done(state.global_step)
            if audit and state.global_step == warmup:
                torch.cuda.set_sync_debug_mode("warn")

    def showwarning(message, category, filename, lineno, file=None, line=None):
        stack = [f"{Path(f.filename).name}:{f.lineno}:{f.name}" for f in traceback.extract_stack()[:-1]
                 if "braeburn" in f.filename or "peers" in f.filename]
        sites[(str(message)[:60], " <- ".join(stack[-4:]))] += 1

    old = warnings.showwarning
    warnings.showwarning = showwarning
    try:
        with tempfile.TemporaryDirectory() as out:
            config = TrainingConfig(output_dir=out, overwrite_output_dir=True, max_steps=steps, save_strategy="no",
                                    per_device_train_batch_size=workload.batch_size, learning_rate=1e-4, **overrides)
            Trainer(workload.make_model(), config, train_dataset=ds, collate_fn=collate, callbacks=[Clock()]).train()
    finally:
        torch.cuda.set_sync_debug_mode(0)
        warnings.showwarning = old
    rate = clock.samples_per_second(workload.batch_size)
    print(f"{workload.name} {overrides or 'defaults'}{' (audited)' if audit else ''}: {rate:.1f} samples/s", flush=True)
    for (message, where), count in sites.most_common(8):
        print(f"   SYNC {count:4d} x {message} at {where}")
    torch._dynamo.reset()
    return rate


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="bert-base")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    workload = WORKLOADS[args.workload](False)
    run(workload, args.steps, args.warmup, audit=True)
    variants = ({}, {"max_grad_norm": 0.0}, {"logging_steps": 10_000})
    rates = collections.defaultdict(list)
    for _ in range(args.rounds):  # alternating rounds, so drift hits every variant alike
        for overrides in variants:
            rates[str(overrides or "defaults")].append(run(workload, args.steps, args.warmup, **overrides))
    for name, values in rates.items():
        print(f"RESULT {workload.name} {name}: " + ", ".join(f"{v:.1f}" for v in values), flush=True)


if __name__ == "__main__":
    main()
