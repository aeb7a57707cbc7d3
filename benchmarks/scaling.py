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
A braeburn run that compiles (`[compile=true]`) is timed over as many steps, from the first step after its
compile window has finished (decided, compiled, timed its compiled steps: step 25), so the compile is not in it;
each row says which steps it timed and when the compile was decided.
Efficiency = samples/s on N / (N x samples/s on 1), per round; the table gives medians and (min-max), and each
N-process rate against the first framework's in the same round. On one process braeburn wraps nothing, so
braeburn-ddp and braeburn-fsdp variants share one single-process run (braeburn-ddp with their TrainingConfig
fields). Each rank also times a fixed piece of host work and of GPU work before and after (`host_probe_ms`,
`gpu_tflops`): a slow host or GPU at that minute shows there, not only in samples/s.

A framework may carry options in brackets: TrainingConfig fields for braeburn (`braeburn-ddp[compile=true]`),
DistributedDataParallel arguments for braeburn's DDP wrap (`[broadcast_buffers=False,bucket_cap_mb=100]`),
fully_shard arguments for its FSDP wrap (`braeburn-fsdp[reshard_after_forward=False]`, and `prefetch=K`:
FSDP2's explicit prefetching of the next K units),
`unit_groups=K` (fsdp: consecutive blocks joined into K units; 0: the root alone),
`numa=MODE` for torchrun's --numa-binding, `pin=K` (each rank on its own K physical cores, one hardware thread of
each) and `gc=freeze` (gc.freeze() after the first step) (any framework). Every rank records Python's garbage
collections in the timed window (count, time, and how much of the slowest steps they were) and the CUDA caching
allocator's retries. braeburn runs report where step time went
(its step_breakdown, sampled in steps after the timed ones, so the timing is unaffected).
Writes <out>.json and <out>.md.
"""

from __future__ import annotations

import argparse
import ast
import gc
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
WORKER_OPTIONS = ("numa", "pin", "gc")  # options the worker or torchrun applies, for any framework
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
    """Times `length` steps from the end of the first step at or after `warmup` at which the run is `ready`
    (a compiled run: once the compile window has decided and timed its compiled steps), with a device sync and a
    barrier at each end, and the host CPU time in between: the training thread's, and the whole process's
    (autograd's and NCCL's threads). Each timed step's host wall time is kept too (no sync: the host's pace)."""

    def __init__(self, warmup: int, length: int):
        self.warmup, self.length = warmup, length
        self.first, self.last = None, warmup + length  # the window's ends: steps first+1 .. last are timed
        self.t0 = self.t1 = self.host_seconds = self.process_seconds = None
        self._cpu0 = (0.0, 0.0)
        self.step_ends: list[float] = []
        self.freeze_gc = False  # gc=freeze: gc.freeze() once the first step has ended (setup done)

    @property
    def done(self) -> bool:
        return self.t1 is not None

    def step_done(self, step: int, ready: bool = True) -> None:
        if self.freeze_gc:
            self.freeze_gc = False
            gc.collect()
            gc.freeze()
        if self.first is None:
            if step >= self.warmup and ready:
                self.first, self.last = step, step + self.length
                self._mark(start=True)
            return
        if self.t1 is None and step <= self.last:
            self.step_ends.append(time.perf_counter())
            if step == self.last:
                self._mark(start=False)

    def _mark(self, start: bool) -> None:
        import torch
        import torch.distributed as dist

        if not start:  # read before the sync: a sync spins on the CPU
            self.host_seconds = time.thread_time() - self._cpu0[0]
            self.process_seconds = time.process_time() - self._cpu0[1]
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()
        if dist.is_initialized():
            dist.barrier()
        if start:
            self.t0, self._cpu0 = time.perf_counter(), (time.thread_time(), time.process_time())
            self.step_ends = [self.t0]
        else:
            self.t1 = time.perf_counter()

    def step_ms(self) -> dict | None:
        """The timed steps' host wall times: median, 90th percentile and largest, in ms."""
        gaps = sorted((b - a) * 1e3 for a, b in zip(self.step_ends, self.step_ends[1:]))
        if not gaps:
            return None
        return {"median": round(statistics.median(gaps), 2), "p90": round(gaps[int(0.9 * (len(gaps) - 1))], 2),
                "max": round(gaps[-1], 2)}


class GcMeter:
    """Python's garbage collections (gc.callbacks): each one's start, length and generation."""

    def __init__(self):
        self.events: list[tuple[float, float, int]] = []
        self._start: float | None = None
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._start = now
        elif self._start is not None:
            self.events.append((self._start, now - self._start, info["generation"]))
            self._start = None

    def summary(self, step_ends: list[float]) -> dict | None:
        """Collections that began inside the timed steps: count and ms per generation, the longest, and for the
        3 slowest steps their length and the collections' share of it."""
        if len(step_ends) < 2:
            return None
        inside = [e for e in self.events if step_ends[0] <= e[0] < step_ends[-1]]
        by_generation = {str(g): {"count": sum(1 for e in inside if e[2] == g),
                                  "ms": round(sum(e[1] for e in inside if e[2] == g) * 1e3, 2)} for g in (0, 1, 2)}
        steps = []
        for a, b in zip(step_ends, step_ends[1:]):
            pause = sum(e[1] for e in inside if a <= e[0] < b)
            steps.append({"ms": round((b - a) * 1e3, 2), "gc_ms": round(pause * 1e3, 2)})
        return {"by_generation": by_generation, "longest_ms": round(max((e[1] for e in inside), default=0) * 1e3, 2),
                "slowest_steps": sorted(steps, key=lambda s: -s["ms"])[:3],
                "tracked_objects": len(gc.get_objects()), "frozen": gc.get_freeze_count()}


def pin_cores(local_rank: int, per_rank: int) -> list[int]:
    """Pin this process to its own ``per_rank`` physical cores (one hardware thread of each, disjoint across ranks);
    returns them. Threads started later (autograd's, NCCL's) inherit the set."""
    firsts: dict[str, int] = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        firsts.setdefault(siblings.read_text().strip() if siblings.exists() else str(cpu), cpu)
    cores = sorted(firsts.values())[local_rank * per_rank:(local_rank + 1) * per_rank]
    if cores:
        os.sched_setaffinity(0, cores)
    return cores


def compile_settle_steps() -> int:
    """The step by which braeburn's compile window has finished on a long run: the eager steps it times, the
    step that compiles, and the compiled steps it times (trainer/compile_window.py)."""
    from braeburn.trainer.compile_window import MEASURE_STEPS, WARMUP_STEPS

    return WARMUP_STEPS + MEASURE_STEPS + 2 + MEASURE_STEPS


def _compiles(options: dict) -> bool:
    return str(options.get("compile", "false")).lower() not in ("false", "0", "no") or bool(
        options.get("torch_compile"))


def _braeburn(strategy: str):
    def run(workload, dataset, clock, tiny: bool, options: dict) -> dict | None:
        from braeburn import Trainer, TrainingConfig
        from braeburn.trainer.callbacks import Callback
        from peers import collate

        seen = clock.compile = {}

        class Tick(Callback):
            def on_step_end(self, trainer, state):
                window = trainer._compile_window  # decided, and done timing its steps, when no longer pending
                if window.decision is not None and "decided_by_step" not in seen:
                    seen.update(decided_by_step=state.global_step, compiled=window.decision.compile,
                                reason=window.decision.reason)
                if not window.pending and "settled_by_step" not in seen:
                    seen.update(settled_by_step=state.global_step, back_to_eager_at=window.back_to_eager_at)
                clock.step_done(state.global_step, ready=not window.pending)

        fields = set(TrainingConfig.__dataclass_fields__)
        _wrap_arguments(strategy, {k: v for k, v in options.items() if k not in fields and k not in WORKER_OPTIONS})
        out = Path(os.environ.get("SCALING_TMP", "/tmp")) / f"braeburn-{os.environ.get('RUN_ID', os.getpid())}"
        # a compiled run is timed only once its compile window has finished: room for that before the window
        start = max(clock.warmup, compile_settle_steps() + 1) if _compiles(options) else clock.warmup
        settings = dict(output_dir=str(out), overwrite_output_dir=True,
                        max_steps=start + clock.length + AFTER_TIMING,
                        per_device_train_batch_size=workload.batch_size, save_strategy="no", learning_rate=1e-4,
                        logging_steps=10_000, strategy=strategy, max_grad_norm=0.0, step_breakdown="true",
                        compile="false")  # eager unless a variant asks: compiling is timed apart (see Clock)
        settings.update({k: v for k, v in options.items() if k in fields})
        Trainer(workload.make_model(), TrainingConfig(**settings), train_dataset=dataset, collate_fn=collate,
                callbacks=[Tick()]).train()
        lines = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
        return json.loads(lines[-1]).get("run", {}).get("step_breakdown") if lines else None

    return run


def _wrap_arguments(strategy: str, extra: dict) -> None:
    """Pass ``extra`` to DistributedDataParallel (ddp) or to fully_shard (fsdp) in braeburn's wrap: a variant.
    ``prefetch=K`` (fsdp) has each unit ask for the next K units' all-gathers in forward and the K before it in
    backward (FSDP2's explicit prefetching) instead of FSDP2's implicit one-ahead."""
    if not extra:
        return
    import functools

    from braeburn.distributed import fsdp, process_group

    if strategy == "fsdp":
        prefetch = int(extra.pop("prefetch", 0))
        wrap = functools.partial(fsdp.wrap_fsdp, **extra)
        fsdp.wrap_fsdp = (lambda *a, **k: _set_prefetch(wrap(*a, **k), prefetch)) if prefetch else wrap
    else:
        process_group.wrap_ddp = functools.partial(process_group.wrap_ddp, **extra)


def _set_prefetch(model, ahead: int):
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule) and m is not model]  # in forward order
    for i, unit in enumerate(units):
        unit.set_modules_to_forward_prefetch(units[i + 1:i + 1 + ahead])
        unit.set_modules_to_backward_prefetch(units[max(0, i - ahead):i][::-1])
    return model


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
        if clock.done:
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


def host_probe_ms() -> float:
    """A fixed piece of host work (small CPU tensor ops, as a host-bound step's launches are, and plain Python):
    its time says how fast this host runs at this minute, apart from the GPU."""
    import torch

    started, x = time.perf_counter(), torch.ones(8)
    for _ in range(5000):
        x = x.add(1.0)
    sum(i * i for i in range(100_000))
    return round((time.perf_counter() - started) * 1e3, 2)


def gpu_probe_tflops() -> float | None:
    """bf16 4096^3 matrix products on random data, timed with device events: this GPU's speed at this minute."""
    import torch

    if not torch.cuda.is_available():
        return None
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(5):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(50):
        a @ b
    end.record()
    end.synchronize()
    del a, b
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()  # the peak memory reported is the training's
    return round(50 * 2 * 4096**3 / (start.elapsed_time(end) * 1e-3) / 1e12, 1)


def worker(args: argparse.Namespace) -> None:
    import torch
    from peers import WORKLOADS, SyntheticDataset

    torch.manual_seed(0)
    framework, options = parse_spec(args.framework)
    workload = WORKLOADS[args.workload](args.tiny)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    length = args.steps - args.warmup
    longest = max(args.steps, compile_settle_steps() + 1 + length) + AFTER_TIMING + 2
    dataset = SyntheticDataset(workload.make_sample, length=longest * workload.batch_size * world)
    clock = Clock(args.warmup, length)
    clock.freeze_gc = options.get("gc") == "freeze"
    pinned = pin_cores(int(os.environ.get("LOCAL_RANK", "0")), int(options["pin"])) if "pin" in options else None
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    collections = GcMeter()
    probes = {"host_probe_ms": host_probe_ms(), "gpu_tflops": gpu_probe_tflops(), "load": os.getloadavg()[0]}
    error, breakdown = None, None
    try:
        breakdown = RUNNERS[framework](workload, dataset, clock, args.tiny, options)
    except Exception as exc:  # reported in the table; the other measurements go on
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    rate = float("nan")
    if clock.done:
        rate = length * workload.batch_size * world / (clock.t1 - clock.t0)
    elif error is None:
        error = f"the timed window never began or ended (ready from step {clock.first}, last {clock.last})"
    probes["host_probe_end_ms"] = host_probe_ms()
    mine = {"rank": rank, "host_ms_per_step": clock.host_seconds * 1e3 / length if clock.host_seconds else None,
            "process_cpu_ms_per_step": clock.process_seconds * 1e3 / length if clock.process_seconds else None,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
            "step_ms": clock.step_ms(), "steps_ms": [round((b - a) * 1e3, 2) for a, b in
                                                      zip(clock.step_ends, clock.step_ends[1:])],
            "gc": collections.summary(clock.step_ends), "pinned": pinned,
            "alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries") if torch.cuda.is_available() else None,
            **probes}
    Path(f"{args.result}.rank{rank}").write_text(json.dumps(mine))
    if rank == 0:
        timed = [clock.first + 1, clock.last] if clock.first is not None else None
        Path(args.result).write_text(json.dumps({"framework": args.framework, "workload": args.workload,
                                                 "processes": world, "samples_per_s": rate, "error": error,
                                                 "timed_steps": timed, "compile": getattr(clock, "compile", None),
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
    row.update(round=round_, wall_s=round(time.perf_counter() - started, 1), ranks=ranks,
               started_at=round(time.time() - (time.perf_counter() - started), 1))
    print(json.dumps(row), flush=True)
    return row


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if "Error" in line or "error" in line]
    return lines[-1][:300] if lines else (text.strip().splitlines() or ["no output"])[-1][:300]


def single_process_spec(spec: str) -> str:
    """The spec whose one-process run stands for ``spec``'s. On one process braeburn wraps nothing (no DDP, no
    FSDP), so braeburn-ddp and braeburn-fsdp variants that differ only in their wrap's arguments share one run,
    measured once a round: braeburn-ddp with the spec's TrainingConfig fields (and the worker's options)."""
    name, options = parse_spec(spec)
    if not name.startswith("braeburn-"):
        return spec
    from braeburn import TrainingConfig

    wraps = {"fsdp_units"}  # FSDP's own TrainingConfig field: nothing to wrap on one process (and refused with ddp)
    kept_names = (set(TrainingConfig.__dataclass_fields__) - wraps) | set(WORKER_OPTIONS)
    kept = [item for item in spec.partition("[")[2].rstrip("]").split(",")
            if item.partition("=")[0].strip() in kept_names]
    return "braeburn-ddp" + (f"[{','.join(kept)}]" if kept else "")


def jobs(specs: list[str], workloads: list[str], n: int, rounds: int,
         single: bool = True) -> list[tuple[int, str, str, int]]:
    """(round, workload, spec, processes) in the order they run: rounds interleaved, each one-process run once
    (none with ``single=False``: the N-process rates against each other only)."""
    order = []
    for round_ in range(rounds):
        for workload in workloads:
            for spec in specs:
                one = (round_, workload, single_process_spec(spec), 1)
                order += [job for job in ((one,) if single else ()) + ((round_, workload, spec, n),)
                          if job not in order]
    return order


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


def _slowest(row: dict, key: str) -> float | None:
    """Over the ranks: the slowest timed step's length (``ms``), or the garbage collections inside it (``gc_ms``)."""
    steps = [step for r in row.get("ranks", []) for step in ((r.get("gc") or {}).get("slowest_steps") or [])[:1]]
    return max(steps, key=lambda step: step["ms"])[key] if steps else None


def markdown(rows: list[dict], n: int) -> str:
    first = next((r["framework"] for r in rows if r["processes"] == n), "")
    lines = [f"| workload | framework | samples/s, 1 process | samples/s, {n} processes | scaling efficiency "
             f"| {n} processes against {first} | peak GiB/GPU, 1 / {n} | host ms/step, 1 / {n} "
             f"| {n} processes: GPU idle / waiting on comm | {n} processes: slowest step ms / Python gc in it ms "
             f"| note |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine_n = {spec: {r["round"]: r for r in rows if r["workload"] == workload and r["framework"] == spec
                         and r["processes"] == n} for spec in dict.fromkeys(r["framework"] for r in rows)}
        for spec, by_round in mine_n.items():
            if not by_round:
                continue
            singles = {r["round"]: r for r in rows if r["workload"] == workload and r["processes"] == 1
                       and r["framework"] == single_process_spec(spec)}
            by = {1: list(singles.values()), n: list(by_round.values())}
            rate = {k: {i: r["samples_per_s"] for i, r in rows_.items()} for k, rows_ in ((1, singles), (n, by_round))}
            efficiency = [rate[n][i] / (n * rate[1][i]) for i in rate[n] if i in rate[1] and rate[1][i] > 0]
            reference = {r["round"]: r["samples_per_s"] for r in mine_n.get(first, {}).values()}
            against = [rate[n][i] / reference[i] for i in rate[n] if reference.get(i, 0) > 0]
            memory = " / ".join(_spread([_rank_max(r, "peak_gib") for r in by[k]], ".1f").split(" (")[0]
                                for k in (1, n))
            host = " / ".join(_spread([_rank_max(r, "host_ms_per_step") for r in by[k]], ".1f").split(" (")[0]
                              for k in (1, n))
            shares = (f"{_spread([_breakdown(r, 'idle') for r in by[n]], '.0%')} / "
                      f"{_spread([_breakdown(r, 'comm_waiting') for r in by[n]], '.0%')}")
            slowest = (f"{_spread([_slowest(r, 'ms') for r in by[n]], '.0f')} / "
                       f"{_spread([_slowest(r, 'gc_ms') for r in by[n]], '.0f')}")
            note = "; ".join(sorted({r["error"] for r in by[1] + by[n] if r.get("error")}))
            lines.append(f"| {workload} | {spec} | {_spread(list(rate[1].values()), '.0f')} | "
                         f"{_spread(list(rate[n].values()), '.0f')} | {_spread(efficiency, '.1%')} | "
                         f"{_spread(against, '.1%')} | {memory} | {host} | {shares} | {slowest} | {note} |")
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
    parser.add_argument("--no-single", action="store_true",
                        help="skip the one-process runs (no efficiency; the N-process rates side by side)")
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
    header = (f"device: {device_line(args.tiny)}; steps {args.warmup}..{args.steps} (compiled runs: the same "
              f"number of steps once compiling has finished); {args.rounds} round(s), interleaved; "
              f"median (min-max); {time.strftime('%Y-%m-%d')}")
    rows = []
    for round_, workload, spec, processes in jobs(specs, workloads, n, args.rounds, single=not args.no_single):
        rows.append(measure(args, spec, workload, processes, scratch, round_))
        write_results(args, rows, n, header)  # what is done so far survives a run cut short
    print(header + "\n\n" + markdown(rows, n))


def write_results(args, rows: list[dict], n: int, header: str) -> None:
    Path(f"{args.out}.md").write_text(header + "\n\n" + markdown(rows, n) + "\n")
    Path(f"{args.out}.json").write_text(json.dumps({"device": device_line(args.tiny), "processes": n,
                                                    "argv": sys.argv, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
