"""Scaling efficiency: samples/s on 1 process and on N, for braeburn DDP and FSDP, Accelerate and Lightning.

    python benchmarks/scaling.py --out $OUT/scaling            # N = every visible GPU (at least 2)
    python benchmarks/scaling.py --gpus 2 --rounds 3 --workloads bert-base,gpt2-small --out results
    python benchmarks/scaling.py --frameworks 'braeburn-ddp,braeburn-ddp[broadcast_buffers=False]' --out r
    python benchmarks/scaling.py --tiny --gpus 2 --out /tmp/s   # tiny models, CPU processes (gloo): checks it

Each (framework, workload, world size) is one `torchrun` job of a worker (this file with --worker),
so every measurement starts from a clean process, and --rounds repeats the whole set in turn
(interleaved), so that a slow minute of the machine hits every framework alike. The workloads are
benchmarks/peers.py's (BERT-base seq 128 batch 32/GPU, ResNet-50 224 batch 64/GPU when torchvision is
there, GPT-2 small seq 1024 batch 8/GPU), with bf16 autocast on GPUs (fp32 on the CPU) and AdamW,
gradient clipping off for all. The batch is per process, so N processes train N times the samples
per step (weak scaling, as the peers measure it). Timing runs from the end of step --warmup to the
end of step --steps, with a device sync and a barrier at each end; samples/s counts all processes.
Efficiency = samples/s on N / (N x samples/s on 1), per round; the table gives medians and (min-max).

A framework may carry options in brackets: TrainingConfig fields for braeburn (`braeburn-ddp[compile=true]`),
DistributedDataParallel arguments for braeburn's DDP wrap (`[broadcast_buffers=False,bucket_cap_mb=100]`),
fully_shard arguments for its FSDP wrap (`braeburn-fsdp[reshard_after_forward=False]`),
and `numa=MODE` for torchrun's --numa-binding (any framework). braeburn runs report where step time went
(its step_breakdown, sampled in steps after the timed ones, so the timing is unaffected).
Writes <out>.json and <out>.md.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FRAMEWORKS = ("braeburn-ddp", "braeburn-fsdp", "accelerate", "lightning")
AFTER_TIMING = 7  # braeburn profiles 5 steps ending one step before max_steps: all after the timed window


def parse_spec(spec: str) -> tuple[str, dict]:
    """("braeburn-ddp", {"bucket_cap_mb": 100}) from "braeburn-ddp[bucket_cap_mb=100]"."""
    name, _, rest = spec.partition("[")
    options = {}
    for item in filter(None, rest.rstrip("]").split(",")):
        key, _, value = item.partition("=")
        try:
            options[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            options[key.strip()] = value.strip()
    if name not in FRAMEWORKS:
        raise SystemExit(f"--frameworks: {name!r} is not one of {', '.join(FRAMEWORKS)}")
    return name, options


# ----------------------------------------------------------------------------- the worker (one rank)

class Clock:
    """Marks the end of step `warmup` and of step `last`, with a device sync and a barrier at each, and the
    host CPU time in between: the training thread's, and the whole process's (autograd's and NCCL's threads)."""

    def __init__(self, warmup: int, last: int):
        self.warmup, self.last, self.t0, self.t1 = warmup, last, None, None
        self.host_seconds = self.process_seconds = None
        self._cpu0 = (0.0, 0.0)

    def step_done(self, step: int) -> None:
        if step not in (self.warmup, self.last):
            return
        import torch
        import torch.distributed as dist

        if step == self.last:  # read before the sync: a sync spins on the CPU
            self.host_seconds = time.thread_time() - self._cpu0[0]
            self.process_seconds = time.process_time() - self._cpu0[1]
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()
        if dist.is_initialized():
            dist.barrier()
        if step == self.warmup:
            self.t0, self._cpu0 = time.perf_counter(), (time.thread_time(), time.process_time())
        else:
            self.t1 = time.perf_counter()


def _braeburn(strategy: str):
    def run(workload, dataset, clock, tiny: bool, options: dict) -> dict | None:
        from braeburn import Trainer, TrainingConfig
        from braeburn.trainer.callbacks import Callback
        from peers import collate

        class Tick(Callback):
            def on_step_end(self, trainer, state):
                clock.step_done(state.global_step)

        fields = set(TrainingConfig.__dataclass_fields__)
        _wrap_arguments(strategy, {k: v for k, v in options.items() if k not in fields and k != "numa"})
        out = Path(os.environ.get("SCALING_TMP", "/tmp")) / f"braeburn-{os.environ.get('RUN_ID', os.getpid())}"
        settings = dict(output_dir=str(out), overwrite_output_dir=True, max_steps=clock.last + AFTER_TIMING,
                        per_device_train_batch_size=workload.batch_size, save_strategy="no", learning_rate=1e-4,
                        logging_steps=10_000, strategy=strategy, max_grad_norm=0.0, step_breakdown="true",
                        compile="false")  # eager, as the peers run here; compiling would eat the time budget
        settings.update({k: v for k, v in options.items() if k in fields})
        Trainer(workload.make_model(), TrainingConfig(**settings), train_dataset=dataset, collate_fn=collate,
                callbacks=[Tick()]).train()
        lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
        return json.loads(lines[-1]).get("run", {}).get("step_breakdown") if lines else None

    return run


def _wrap_arguments(strategy: str, extra: dict) -> None:
    """Pass ``extra`` to DistributedDataParallel (ddp) or to fully_shard (fsdp) in braeburn's wrap: a variant."""
    if not extra:
        return
    import functools

    from braeburn.distributed import fsdp, process_group

    if strategy == "fsdp":
        fsdp.wrap_fsdp = functools.partial(fsdp.wrap_fsdp, **extra)
    else:
        process_group.wrap_ddp = functools.partial(process_group.wrap_ddp, **extra)


def _accelerate(workload, dataset, clock, tiny: bool, options: dict) -> None:
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


def _lightning(workload, dataset, clock, tiny: bool, options: dict) -> None:
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
    framework, options = parse_spec(args.framework)
    workload = WORKLOADS[args.workload](args.tiny)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    dataset = SyntheticDataset(workload.make_sample, length=(args.steps + AFTER_TIMING + 2) * workload.batch_size
                               * world)
    clock = Clock(args.warmup, args.steps)
    error, breakdown = None, None
    try:
        breakdown = RUNNERS[framework](workload, dataset, clock, args.tiny, options)
    except Exception as exc:  # reported in the table; the other measurements go on
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    rate = float("nan")
    if clock.t0 is not None and clock.t1 is not None:
        rate = (args.steps - args.warmup) * workload.batch_size * world / (clock.t1 - clock.t0)
    steps = args.steps - args.warmup
    mine = {"rank": rank, "host_ms_per_step": clock.host_seconds * 1e3 / steps if clock.host_seconds else None,
            "process_cpu_ms_per_step": clock.process_seconds * 1e3 / steps if clock.process_seconds else None,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}
    Path(f"{args.result}.rank{rank}").write_text(json.dumps(mine))
    if rank == 0:
        Path(args.result).write_text(json.dumps({"framework": args.framework, "workload": args.workload,
                                                 "processes": world, "samples_per_s": rate, "error": error,
                                                 "step_breakdown": breakdown}))


# ----------------------------------------------------------------------------- the driver

def measure(args, spec: str, workload: str, processes: int, scratch: Path, round_: int) -> dict:
    result = scratch / f"{spec}-{workload}-{processes}-{round_}.json".replace("[", "_").replace("]", "_")
    numa = parse_spec(spec)[1].get("numa")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
               *(["--numa-binding", str(numa)] if numa else []),
               __file__, "--worker", "--framework", spec, "--workload", workload, "--result", str(result),
               "--warmup", str(args.warmup), "--steps", str(args.steps)] + (["--tiny"] if args.tiny else [])
    env = dict(os.environ, SCALING_TMP=str(scratch), RUN_ID=result.stem,
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
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
        row = {"framework": spec, "workload": workload, "processes": processes, "samples_per_s": float("nan"),
               "error": f"no result: {_last_error(tail)}"}
    ranks = [json.loads(p.read_text()) for p in sorted(scratch.glob(result.name + ".rank*"))]
    row.update(round=round_, wall_s=round(time.perf_counter() - started, 1), ranks=ranks)
    print(json.dumps(row), flush=True)
    return row


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if "Error" in line or "error" in line]
    return lines[-1][:300] if lines else (text.strip().splitlines() or ["no output"])[-1][:300]


def split_specs(text: str) -> list[str]:
    """Comma-separated framework specs; commas inside brackets belong to the spec."""
    specs, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            specs.append(current)
            current = ""
        else:
            current += char
    return [spec.strip() for spec in specs + [current] if spec.strip()]


def _spread(values: list[float], fmt: str) -> str:
    """median (min-max) of the finite values."""
    values = [v for v in values if v is not None and v == v]
    if not values:
        return "-"
    middle = format(statistics.median(values), fmt)
    return middle if len(values) == 1 else f"{middle} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def _rank_max(row: dict, key: str) -> float | None:
    values = [r[key] for r in row.get("ranks", []) if r.get(key) is not None]
    return max(values) if values else None


def _breakdown(row: dict, key: str) -> float | None:
    parts = [p for p in ((row.get("step_breakdown") or {}).get("processes") or []) if p]
    return max(p[key] for p in parts) if parts else None


def markdown(rows: list[dict], n: int) -> str:
    lines = [f"| workload | framework | samples/s, 1 process | samples/s, {n} processes | scaling efficiency "
             f"| peak GiB/GPU, 1 / {n} | host ms/step, 1 / {n} | {n} processes: GPU idle / waiting on comm | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        for spec in dict.fromkeys(r["framework"] for r in rows):
            mine = [r for r in rows if r["workload"] == workload and r["framework"] == spec]
            if not mine:
                continue
            by = {k: [r for r in mine if r["processes"] == k] for k in (1, n)}
            rate = {k: {r["round"]: r["samples_per_s"] for r in by[k]} for k in (1, n)}
            efficiency = [rate[n][i] / (n * rate[1][i]) for i in rate[n] if i in rate[1] and rate[1][i] > 0]
            memory = " / ".join(_spread([_rank_max(r, "peak_gib") for r in by[k]], ".1f").split(" (")[0]
                                for k in (1, n))
            host = " / ".join(_spread([_rank_max(r, "host_ms_per_step") for r in by[k]], ".1f").split(" (")[0]
                              for k in (1, n))
            shares = (f"{_spread([_breakdown(r, 'idle') for r in by[n]], '.0%')} / "
                      f"{_spread([_breakdown(r, 'comm_waiting') for r in by[n]], '.0%')}")
            note = "; ".join(sorted({r["error"] for r in mine if r.get("error")}))
            lines.append(f"| {workload} | {spec} | {_spread(list(rate[1].values()), '.0f')} | "
                         f"{_spread(list(rate[n].values()), '.0f')} | {_spread(efficiency, '.1%')} | {memory} | "
                         f"{host} | {shares} | {note} |")
    return "\n".join(lines)


def device_line(tiny: bool) -> str:
    import torch

    if not tiny and torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}; torch {torch.__version__}"
    return f"CPU ({platform.processor() or platform.machine()}), gloo; torch {torch.__version__}"


def _short_run(args) -> None:
    """BRAEBURN_MAX_STEPS=N (the doc tests): a quick check of the script, not a measurement. The first workload and
    framework only, one round, timing steps N//2+1..N (the Trainer in the workers stops at N too)."""
    from braeburn.plan.envvars import MAX_STEPS_VAR, max_steps_cap

    cap = max_steps_cap()
    if cap is None:
        return
    args.workloads, args.frameworks = args.workloads.split(",")[0], split_specs(args.frameworks)[0]
    args.warmup, args.steps, args.rounds = cap // 2, cap, 1
    print(f"{MAX_STEPS_VAR}={cap}: a quick check, not a measurement: {args.frameworks} on {args.workloads}, "
          f"steps {args.warmup}..{args.steps}, one round")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=None, help="N, the processes of the multi-process runs "
                        "(default: every visible GPU; 2 with --tiny)")
    parser.add_argument("--workloads", default="bert-base,resnet50,gpt2-small")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30, help="last step timed")
    parser.add_argument("--tiny", action="store_true", help="tiny models on CPU processes: checks the script")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every measurement, interleaved")
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
    _short_run(args)
    import importlib.util

    import torch

    n = args.gpus or (2 if args.tiny else torch.cuda.device_count())
    if n < 2:
        parser.error(f"--gpus {n}: scaling needs at least 2 processes (this machine shows "
                     f"{torch.cuda.device_count()} GPUs); pass --tiny to check the script on CPU processes")
    workloads = [w for w in args.workloads.split(",") if w != "resnet50" or importlib.util.find_spec("torchvision")]
    scratch = Path(f"{args.out}.work")
    scratch.mkdir(parents=True, exist_ok=True)
    specs = split_specs(args.frameworks)
    for spec in specs:
        parse_spec(spec)  # a typo fails now, not after an hour of measurements
    rows = [measure(args, spec, workload, processes, scratch, round_) for round_ in range(args.rounds)
            for workload in workloads for spec in specs for processes in (1, n)]
    table = markdown(rows, n)
    header = (f"device: {device_line(args.tiny)}; steps {args.warmup}..{args.steps}; {args.rounds} round(s), "
              f"interleaved; median (min-max); {time.strftime('%Y-%m-%d')}")
    print(header + "\n\n" + table)
    Path(f"{args.out}.md").write_text(header + "\n\n" + table + "\n")
    Path(f"{args.out}.json").write_text(json.dumps({"device": device_line(args.tiny), "processes": n,
                                                    "argv": sys.argv, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
