"""Scaling efficiency: samples/s on 1 process and on N, for braeburn DDP and FSDP, Accelerate and Lightning.

    python benchmarks/scaling.py --out $OUT/scaling            # N = every visible GPU (at least 2)
    python benchmarks/scaling.py --gpus 2 --workloads bert-base,gpt2-small --out results
    python benchmarks/scaling.py --tiny --gpus 2 --out /tmp/s   # tiny models, CPU processes (gloo): checks it

Each (framework, workload, world size) is one `torchrun` job of a worker (this file with --worker),
so every measurement starts from a clean process. The workloads are benchmarks/peers.py's (BERT-base
seq 128 batch 32/GPU, ResNet-50 224 batch 64/GPU when torchvision is there, GPT-2 small seq 1024
batch 8/GPU), with bf16 autocast on GPUs (fp32 on the CPU) and AdamW. The batch is per process, so
N processes train N times the samples per step (weak scaling, as the peers measure it). Timing runs
from the end of step --warmup to the end of the last step, with a device sync and a barrier at each
end; samples/s counts all processes. Efficiency = samples/s on N / (N x samples/s on 1).
Writes <out>.json and <out>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FRAMEWORKS = ("braeburn-ddp", "braeburn-fsdp", "accelerate", "lightning")


# ----------------------------------------------------------------------------- the worker (one rank)

class Clock:
    """Marks the end of step `warmup` and of step `last`, with a device sync and a barrier at each."""

    def __init__(self, warmup: int, last: int):
        self.warmup, self.last, self.t0, self.t1 = warmup, last, None, None

    def step_done(self, step: int) -> None:
        if step in (self.warmup, self.last):
            import torch
            import torch.distributed as dist

            if torch.accelerator.is_available():
                torch.accelerator.synchronize()
            if dist.is_initialized():
                dist.barrier()
            if step == self.warmup:
                self.t0 = time.perf_counter()
            else:
                self.t1 = time.perf_counter()


def _braeburn(strategy: str):
    def run(workload, dataset, clock, tiny: bool) -> None:
        from braeburn import Trainer, TrainingConfig
        from braeburn.trainer.callbacks import Callback
        from peers import collate

        class Tick(Callback):
            def on_step_end(self, trainer, state):
                clock.step_done(state.global_step)

        out = Path(os.environ.get("SCALING_TMP", "/tmp")) / f"braeburn-{os.getpid()}"
        config = TrainingConfig(output_dir=str(out), overwrite_output_dir=True, max_steps=clock.last,
                                per_device_train_batch_size=workload.batch_size, save_strategy="no",
                                learning_rate=1e-4, logging_steps=10_000, strategy=strategy, max_grad_norm=0.0,
                                compile="false")  # eager, as the peers run here; compiling would eat the time budget
        Trainer(workload.make_model(), config, train_dataset=dataset, collate_fn=collate, callbacks=[Tick()]).train()

    return run


def _accelerate(workload, dataset, clock, tiny: bool) -> None:
    import torch
    from accelerate import Accelerator
    from peers import collate

    accelerator = Accelerator(mixed_precision="no" if tiny else "bf16", cpu=tiny)
    model = workload.make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = torch.utils.data.DataLoader(dataset, batch_size=workload.batch_size, shuffle=True, collate_fn=collate,
                                         drop_last=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, batch in enumerate(loader, 1):
        accelerator.backward(model(**batch)["loss"])
        optimizer.step()
        optimizer.zero_grad()
        clock.step_done(step)
        if step == clock.last:
            break


def _lightning(workload, dataset, clock, tiny: bool) -> None:
    import lightning as L
    import torch
    from peers import collate, lightning_parts

    module, tick = lightning_parts(workload, clock)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    loader = torch.utils.data.DataLoader(dataset, batch_size=workload.batch_size, shuffle=True, collate_fn=collate,
                                         drop_last=True)
    trainer = L.Trainer(accelerator="cpu" if tiny else "gpu", devices=world, num_nodes=1,
                        strategy="ddp" if world > 1 else "auto", precision="32-true" if tiny else "bf16-mixed",
                        max_steps=clock.last, logger=False, enable_checkpointing=False, callbacks=[tick],
                        enable_model_summary=False, enable_progress_bar=False)
    trainer.fit(module, loader)


RUNNERS = {"braeburn-ddp": _braeburn("ddp"), "braeburn-fsdp": _braeburn("fsdp"), "accelerate": _accelerate,
           "lightning": _lightning}


def worker(args: argparse.Namespace) -> None:
    import torch
    from peers import WORKLOADS, SyntheticDataset

    torch.manual_seed(0)
    workload = WORKLOADS[args.workload](args.tiny)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dataset = SyntheticDataset(workload.make_sample, length=(args.steps + 2) * workload.batch_size * world)
    clock = Clock(args.warmup, args.steps)
    error = None
    try:
        RUNNERS[args.framework](workload, dataset, clock, args.tiny)
    except Exception as exc:  # reported in the table; the other measurements go on
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    rate = float("nan")
    if clock.t0 is not None and clock.t1 is not None:
        rate = (args.steps - args.warmup) * workload.batch_size * world / (clock.t1 - clock.t0)
    if int(os.environ.get("RANK", "0")) == 0:
        Path(args.result).write_text(json.dumps({"framework": args.framework, "workload": args.workload,
                                                 "processes": world, "samples_per_s": rate, "error": error}))


# ----------------------------------------------------------------------------- the driver

def measure(args, framework: str, workload: str, processes: int, scratch: Path) -> dict:
    result = scratch / f"{framework}-{workload}-{processes}.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
               __file__, "--worker", "--framework", framework, "--workload", workload, "--result", str(result),
               "--warmup", str(args.warmup), "--steps", str(args.steps)] + (["--tiny"] if args.tiny else [])
    env = dict(os.environ, SCALING_TMP=str(scratch), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    if args.tiny:
        env["BRAEBURN_DEVICE"] = "cpu"  # gloo CPU processes, whatever the machine has
    started = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.job_timeout)
        tail = (done.stdout + done.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        tail = f"timed out after {args.job_timeout} s"
    if result.exists():
        row = json.loads(result.read_text())
    else:
        row = {"framework": framework, "workload": workload, "processes": processes, "samples_per_s": float("nan"),
               "error": f"no result: {_last_error(tail)}"}
    row["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(row), flush=True)
    return row


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if "Error" in line or "error" in line]
    return lines[-1][:300] if lines else (text.strip().splitlines() or ["no output"])[-1][:300]


def markdown(rows: list[dict], n: int) -> str:
    lines = [f"| workload | framework | samples/s, 1 process | samples/s, {n} processes | scaling efficiency | note |",
             "|---|---|---|---|---|---|"]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        for framework in dict.fromkeys(r["framework"] for r in rows):
            pair = {r["processes"]: r for r in rows if r["workload"] == workload and r["framework"] == framework}
            if not pair:
                continue
            one, many = pair.get(1, {}).get("samples_per_s", float("nan")), pair.get(n, {}).get("samples_per_s",
                                                                                             float("nan"))
            efficiency = many / (n * one) if one == one and many == many and one > 0 else float("nan")
            note = "; ".join(r["error"] for r in pair.values() if r.get("error"))
            lines.append(f"| {workload} | {framework} | {one:.1f} | {many:.1f} | {efficiency:.1%} | {note} |")
    return "\n".join(lines)


def device_line(tiny: bool) -> str:
    import torch

    if not tiny and torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}; torch {torch.__version__}"
    return f"CPU ({platform.processor() or platform.machine()}), gloo; torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=None, help="N, the processes of the multi-process runs "
                        "(default: every visible GPU; 2 with --tiny)")
    parser.add_argument("--workloads", default="bert-base,resnet50,gpt2-small")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30, help="last step timed")
    parser.add_argument("--tiny", action="store_true", help="tiny models on CPU processes: checks the script")
    parser.add_argument("--job-timeout", type=int, default=150, help="seconds one measurement may take")
    parser.add_argument("--out", help="writes OUT.json and OUT.md (required)")
    for flag in ("--worker",):
        parser.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in ("--framework", "--workload", "--result"):
        parser.add_argument(flag, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if not args.out:
        parser.error("--out is required: the results go to OUT.json and OUT.md (e.g. --out $OUT/scaling)")
    import importlib.util

    import torch

    n = args.gpus or (2 if args.tiny else torch.cuda.device_count())
    if n < 2:
        parser.error(f"--gpus {n}: scaling needs at least 2 processes (this machine shows "
                     f"{torch.cuda.device_count()} GPUs); pass --tiny to check the script on CPU processes")
    workloads = [w for w in args.workloads.split(",") if w != "resnet50" or importlib.util.find_spec("torchvision")]
    scratch = Path(f"{args.out}.work")
    scratch.mkdir(parents=True, exist_ok=True)
    rows = [measure(args, framework, workload, processes, scratch) for workload in workloads
            for framework in args.frameworks.split(",") for processes in (1, n)]
    table = markdown(rows, n)
    header = f"device: {device_line(args.tiny)}; steps {args.warmup}..{args.steps}; {time.strftime('%Y-%m-%d')}"
    print(header + "\n\n" + table)
    Path(f"{args.out}.md").write_text(header + "\n\n" + table + "\n")
    Path(f"{args.out}.json").write_text(json.dumps({"device": device_line(args.tiny), "processes": n,
                                                    "argv": sys.argv, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
