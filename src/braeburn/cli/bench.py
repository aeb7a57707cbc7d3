"""`braeburn bench`: which device here trains a given model fastest, and how close to its peak?

For each usable device (the CPU and MPS or CUDA) it measures the matmul peak (fp32, and bf16 where
supported), host-to-device bandwidth, and the training throughput of built-in workloads
(braeburn/workloads.py), with the speed-up over the CPU and MFU (model FLOPs per sample x samples/s
/ the measured matmul peak). `braeburn bench script.py` times the user's own script's steps instead.
Every timing is bracketed by the device kind's synchronize(), after warm-up steps.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from ..devices.base import DeviceKind
from .console import make_console

EXIT_OK, EXIT_USAGE = 0, 2
DTYPE_OF = {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="all", help="mlp, cnn, bert-base, gpt2-small, a comma list, or all")
    parser.add_argument("--size", default="auto", choices=("auto", "tiny", "full"),
                        help="full models, or tiny ones (CI); auto (default): full where an accelerator is benchmarked, "
                             "tiny where only the CPU is (full BERT-base and GPT-2 steps take minutes there)")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per device (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--batch-size", "--batch_size", dest="batch_size", type=int, default=None,
                        help="batch size (default: the workload's own)")
    parser.add_argument("--devices", default=None, help="comma list of device kinds (default: every usable one)")
    parser.add_argument("--mixed-precision", "--mixed_precision", dest="mixed_precision", default="no",
                        choices=("no", "bf16", "fp16", "auto"),
                        help="autocast dtype for the workloads (default float32); auto: what the Trainer would "
                             "choose, measured per workload where the device has no rule (MPS), with the table")
    parser.add_argument("--max-seconds", type=float, default=30.0,
                        help="stop warming up, and then timing, a workload on a device after this long each (at least "
                             "one step each; default 30)")
    parser.add_argument("--plot", metavar="PNG", help="save a bar chart of samples/s (needs matplotlib)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("script", nargs="?", help="time this training script's steps instead (through the Accelerator)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    parser.set_defaults(func=run)


# -- what to run --------------------------------------------------------------------------------


def choose_devices(text: str | None, host) -> list[DeviceKind]:
    """The device kinds to compare: those named (each must be usable), or every usable one."""
    from ..devices.registry import KIND_NAMES, KINDS, get_kind

    if not text:
        return [kind for kind in KINDS if kind.availability(host).usable]
    kinds = []
    for name in (n.strip().lower() for n in text.split(",") if n.strip()):
        if name not in KIND_NAMES:
            raise ValueError(f"--devices {text!r}: unknown device {name!r}; choose from {', '.join(KIND_NAMES)}")
        availability = get_kind(name).availability(host)
        if not availability.usable:
            fix = f" Fix: {availability.fix}." if availability.fix else ""
            raise ValueError(f"--devices {text!r}: {name} is not usable here: {availability.reason}.{fix} "
                             f"Or leave {name} out of --devices")
        kinds.append(get_kind(name))
    return kinds


def resolve_size(asked: str, kinds: list[DeviceKind]) -> tuple[str, str | None]:
    """The workloads' size, and a line saying why when ``auto`` chose it: full models where an accelerator is
    benchmarked; the tiny ones where only the CPU is, where one full BERT-base or GPT-2 step can take a minute."""
    if asked != "auto":
        return asked, None
    if any(kind.is_accelerator for kind in kinds):
        return "full", None
    return "tiny", ("--size auto: the tiny models, since only the CPU is benchmarked here; --size full times the "
                    "real ones (BERT-base, GPT-2 small: up to a few minutes a workload on a CPU, each phase cut at "
                    "--max-seconds)")


def choose_workloads(text: str) -> list[str]:
    from .workloads import WORKLOADS, get_workload

    if text == "all":
        return list(WORKLOADS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        get_workload(name)  # raises with the choices
    return names


# -- measurements -----------------------------------------------------------------------------


def _timed(kind: DeviceKind, work, min_seconds: float, min_reps: int = 2) -> float:
    """Seconds per call of ``work()``, repeated until ``min_seconds`` passed; synchronized by the kind."""
    work()
    kind.synchronize()
    reps, start = 0, time.perf_counter()
    while True:
        work()
        reps += 1
        if reps >= min_reps:
            kind.synchronize()  # host-device sync: only here, so the device queue stays full while timing
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                return elapsed / reps


def matmul_tflops(kind: DeviceKind, dtype_name: str, n: int, min_seconds: float) -> float:
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    device = kind.torch_device()
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    seconds = _timed(kind, lambda: torch.mm(a, b), min_seconds)
    return 2 * n**3 / seconds / 1e12


def host_to_device_gbps(kind: DeviceKind, nbytes: int, min_seconds: float) -> float | None:
    """Copy bandwidth from host memory (pinned where the kind gains from it) to the device; None for the CPU."""
    import torch

    if not kind.is_accelerator:
        return None
    source = torch.empty(nbytes, dtype=torch.uint8, pin_memory=kind.pin_memory_helps)
    target = torch.empty(nbytes, dtype=torch.uint8, device=kind.torch_device())
    seconds = _timed(kind, lambda: target.copy_(source, non_blocking=kind.pin_memory_helps), min_seconds)
    return nbytes / seconds / 1e9


def device_peaks(kind: DeviceKind, host, size: str, precision: str) -> dict:
    full = size == "full"
    n = (4096 if kind.is_accelerator else 1024) if full else 256
    min_seconds = 0.25 if full else 0.02
    dtypes = ["fp32"] + [d for d in ("bf16", "fp16") if d == "bf16" or DTYPE_OF.get(precision, d) == d]
    peaks = {}
    for dtype in dtypes:
        if dtype == "fp32" or kind.precision_support(dtype, host).supported:
            peaks[dtype] = matmul_tflops(kind, dtype, n, min_seconds)
    return {"device": kind.name, "description": kind.describe(host), "matmul_tflops": peaks,
            "h2d_gbps": host_to_device_gbps(kind, (256 << 20) if full else (4 << 20), min_seconds)}


def _policy(kind: DeviceKind, host, precision: str):
    from ..plan.precision import make_policy

    if precision == "no":
        return make_policy("no", False, kind.torch_device()), "no"
    support = kind.precision_support(precision, host)
    if not support.supported or (support.needs_grad_scaler and not support.grad_scaler_supported):
        return make_policy("no", False, kind.torch_device()), "no"  # reported as float32 in the table
    return make_policy(precision, support.needs_grad_scaler, kind.torch_device()), precision


def _one_batch(built, kind: DeviceKind, batch_size: int):
    import copy

    import torch

    from .workloads import to_device

    device = kind.torch_device()
    model = copy.deepcopy(built.model).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, optimizer, to_device(built.make_batch(batch_size), device)  # one batch, reused: no host copies


def resolve_precision(built, kind: DeviceKind, host, asked: str, batch_size: int) -> tuple[str, dict]:
    """The precision to time on ``kind`` and what to report about it: as asked; for "auto", the plan's rule, or,
    where the device kind leaves candidates to measure (MPS), the Trainer's own trial on this workload."""
    if asked != "auto":
        return asked, {}
    from ..plan.rules import RunOptions, make_plan

    plan = make_plan(RunOptions(accelerator=kind.name), host)
    if not plan.precision_candidates:
        return plan.precision, {"precision_reason": plan.precision_reason}
    from ..checkpoints import state as state_io
    from ..plan.precision_trial import Snapshot, decide, run_trials

    model, optimizer, batch = _one_batch(built, kind, batch_size)
    snapshot = Snapshot(model, optimizer, state_io.rng_state(kind), lambda s: state_io.set_rng_state(s, kind))
    policies: dict = {}

    def start(precision: str):
        policy = policies.get(precision) or _policy(kind, host, precision)[0]  # one grad scaler per precision
        policies[precision] = policy

        def step():
            with policy.autocast():
                loss = built.loss(model, batch)
            policy.backward(loss)
            applied = policy.step(optimizer)
            optimizer.zero_grad(set_to_none=True)
            return loss.detach(), applied
        return step

    decision = decide(*run_trials(("no", *plan.precision_candidates), start, snapshot, kind.synchronize,
                                  kind.is_out_of_memory, kind.empty_cache))
    del model, optimizer, batch, snapshot, policies
    gc.collect()
    kind.empty_cache()
    return decision.precision, {"precision_table": decision.table, "precision_reason": decision.reason}


def expected_seconds(step_seconds: float, warmup: int, steps: int, max_seconds: float) -> float:
    """How long a workload's warm-up and timed steps take on a device, from its first step's time: each phase
    stops once ``max_seconds`` have passed, after at least one step."""
    within = max(1, math.ceil(max_seconds / step_seconds)) if step_seconds > 0 else steps + warmup
    return step_seconds * (min(warmup, within) + min(steps, within))


def _warm_up(step, kind: DeviceKind, warmup: int, steps: int, max_seconds: float, label: str, size: str) -> int:
    """Up to ``warmup`` untimed steps, stopped after ``max_seconds`` (at least one); returns how many ran. A slow
    workload says how long it will take here and how to shorten it, from its second (warm) step's time: the first
    pays one-time costs (allocation, kernel selection). Where the warm-up stops after one step, the first step's
    time gives an upper estimate."""
    started = last = time.perf_counter()
    done = 0
    while done < warmup and not (done and time.perf_counter() - started >= max_seconds):
        step()
        done += 1
        if done <= 2:  # the first two steps are timed for the estimate (untimed steps: the sync costs nothing)
            kind.synchronize()
            now = time.perf_counter()
            seconds, last = now - last, now
            if done == 2 or done == warmup or now - started >= max_seconds:  # a warm step, or the only one
                _estimate(seconds, warm=done == 2, warmup=warmup, steps=steps, max_seconds=max_seconds,
                          label=label, size=size)
    return done


def _estimate(step_seconds: float, *, warm: bool, warmup: int, steps: int, max_seconds: float, label: str,
              size: str) -> None:
    total = expected_seconds(step_seconds, warmup, steps, max_seconds)
    if total < 10:
        return
    quicker = "fewer --steps, or a lower --max-seconds," if size == "tiny" else "--size tiny, or fewer --steps,"
    took = "s a step, so about" if warm else "s for the first step (which pays one-time costs), so at most about"
    _say(f"{label}: {step_seconds:.1f} {took} {_duration(total)} for this one (warm-up and timing each stop after "
         f"--max-seconds {max_seconds:g}); {quicker} is quicker")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def time_training(built, kind: DeviceKind, host, precision: str, batch_size: int, warmup: int, steps: int,
                  max_seconds: float, label: str = "", size: str = "") -> dict:
    """samples/s of full training steps (forward, backward, AdamW step) on one synthetic batch."""
    model, optimizer, batch = _one_batch(built, kind, batch_size)
    policy, used = _policy(kind, host, precision)

    def step() -> None:
        with policy.autocast():
            loss = built.loss(model, batch)
        policy.backward(loss)
        policy.step(optimizer)
        optimizer.zero_grad(set_to_none=True)

    warmed = _warm_up(step, kind, warmup, steps, max_seconds, label or kind.name, size)
    kind.synchronize()
    done, start = 0, time.perf_counter()
    while done < steps:
        step()
        done += 1
        if time.perf_counter() - start >= max_seconds:  # host-side check only: no sync mid-run
            break
    kind.synchronize()
    seconds = time.perf_counter() - start
    del model, optimizer, batch
    gc.collect()
    kind.empty_cache()
    return {"device": kind.name, "precision": used, "batch_size": batch_size, "steps": done, "warmup": warmed,
            "step_ms": seconds / done * 1e3, "samples_per_s": done * batch_size / seconds}


# -- the workload comparison --------------------------------------------------------------------


def _add_mfu(row: dict, flops_per_sample: float, peaks: dict) -> None:
    peak = peaks["matmul_tflops"].get(DTYPE_OF[row["precision"]])
    achieved = flops_per_sample * row["samples_per_s"] / 1e12
    row["achieved_tflops"] = achieved
    row["mfu"] = achieved / peak if peak else None


def bench_workload(name: str, args, kinds: list[DeviceKind], host, peaks: dict) -> dict:
    from .workloads import build, training_flops_per_sample

    built = build(name, args.size)
    batch_size = args.batch_size or built.batch_size
    flops = training_flops_per_sample(built)
    rows = []
    for kind in kinds:
        _say(f"{name} ({args.size}, batch {batch_size}) on {kind.name}: {args.warmup} warm-up + up to "
             f"{args.steps} timed steps...")
        precision, measured = resolve_precision(built, kind, host, args.mixed_precision, batch_size)
        row = {**time_training(built, kind, host, precision, batch_size, args.warmup, args.steps, args.max_seconds,
                               label=f"{name} ({args.size}) on {kind.name}", size=args.size),
               **measured}
        _say(f"{name} on {kind.name}: {row['samples_per_s']:.1f} samples/s")
        _add_mfu(row, flops, peaks[kind.name])
        rows.append(row)
    cpu = next((r for r in rows if not _kind(r["device"]).is_accelerator), None)
    for row in rows:
        row["speedup_vs_cpu"] = row["samples_per_s"] / cpu["samples_per_s"] if cpu else None
    return {"workload": name, "size": args.size, "sample": built.sample, "batch_size": batch_size,
            "flops_per_sample": flops, "devices": rows}


def _say_shared_caveats(kinds: list[DeviceKind], host) -> None:
    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    for kind in kinds:
        caveat = kind.shared_timing_caveat(host, load, torch.get_num_threads())
        if caveat:
            _say(caveat)


def _say(text: str) -> None:
    """Progress on stderr (stdout stays the table, or the JSON with --json): long runs are not silent."""
    print(f"braeburn bench: {text}", file=sys.stderr, flush=True)


def _kind(name: str) -> DeviceKind:
    from ..devices.registry import get_kind

    return get_kind(name)


def verdict(result: dict) -> str:
    """One plain sentence: which device to train this workload on."""
    rows = sorted(result["devices"], key=lambda r: r["samples_per_s"], reverse=True)
    what = f"{result['workload']} ({result['size']}, batch {result['batch_size']})"
    if len(rows) < 2:
        return (f"{what}: only {rows[0]['device']} was benchmarked, so there is nothing to compare "
                "(`braeburn doctor` says why no accelerator is usable)")
    best, runner_up = rows[0], rows[1]
    ratio = best["samples_per_s"] / runner_up["samples_per_s"]
    if not _kind(best["device"]).is_accelerator:
        return f"{what}: the CPU is the faster choice, {ratio:.2f}x faster than {runner_up['device']}"
    return f"{what}: {best['device']} is the faster choice, {ratio:.2f}x faster than {runner_up['device']}"


def run_workloads(args, host) -> dict:
    kinds = choose_devices(args.devices, host)
    names = choose_workloads(args.workload)
    from .workloads import get_workload

    skipped = {n: get_workload(n).missing_dependency() for n in names if get_workload(n).missing_dependency()}
    if skipped and args.workload != "all":
        raise ImportError(next(iter(skipped.values())))
    args.size, why = resolve_size(args.size, kinds)
    if why:
        _say(why)
    _say(f"{len(names) - len(skipped)} workload(s) on {', '.join(k.name for k in kinds)}; measuring each device's "
         "matmul peak and bandwidth first...")
    _say_shared_caveats(kinds, host)
    peaks = {kind.name: device_peaks(kind, host, args.size, args.mixed_precision) for kind in kinds}
    results = [bench_workload(n, args, kinds, host, peaks) for n in names if n not in skipped]
    for result in results:
        result["verdict"] = verdict(result)
    return {"devices": list(peaks.values()), "workloads": results, "skipped": skipped,
            "settings": {"size": args.size, "steps": args.steps, "warmup": args.warmup,
                         "mixed_precision": args.mixed_precision, "max_seconds": args.max_seconds}}


# -- output -------------------------------------------------------------------------------------


def _num(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _flops(tflops: float | None) -> str:
    """A FLOP rate with its unit: 312 T, 4.1 G, 850 M."""
    if tflops is None:
        return "-"
    for unit, scale in (("T", 1.0), ("G", 1e-3), ("M", 1e-6)):
        if tflops >= scale:
            return f"{tflops / scale:.3g} {unit}"
    return f"{tflops / 1e-6:.2g} M"


def _span(values: list[int]) -> str:
    low, high = min(values), max(values)
    return f"{low}" if low == high else f"{low}-{high}"


def _counts(rows: list[dict], settings: dict) -> str:
    """The steps each row really timed after its real warm-up (--max-seconds may cut both short of the asked)."""
    if not rows:
        return f"{settings['steps']} timed steps after {settings['warmup']} warm-up"
    steps = [row["steps"] for row in rows]
    warmups = [row.get("warmup", settings["warmup"]) for row in rows]
    text = f"{_span(steps)} timed step{'s' if max(steps) > 1 else ''} after {_span(warmups)} warm-up"
    if min(steps) < settings["steps"] or min(warmups) < settings["warmup"]:
        text += f" (asked {settings['steps']} after {settings['warmup']}: --max-seconds {settings['max_seconds']:g} cut it)"
    return text


def render(results: dict) -> None:
    from rich.table import Table

    console = make_console()
    devices = Table(title="Devices (measured peaks)", title_justify="left")
    for column in ("device", "matmul fp32 FLOP/s", "matmul bf16 FLOP/s", "host->device GB/s"):
        devices.add_column(column, justify="left" if column == "device" else "right")
    for d in results["devices"]:
        peaks = d["matmul_tflops"]
        name = d["device"] if d["description"] == d["device"] else f"{d['device']} ({d['description']})"
        devices.add_row(name, _flops(peaks.get("fp32")), _flops(peaks.get("bf16")), _num(d["h2d_gbps"], ".1f"))
    console.print(devices)
    settings = results["settings"]
    rows = [row for result in results["workloads"] for row in result["devices"]]
    table = Table(title=f"Training throughput ({settings['size']} size, {_counts(rows, settings)})",
                  title_justify="left")
    for column in ("workload", "device", "dtype", "batch", "samples/s", "step ms", "vs CPU", "FLOP/s", "MFU"):
        table.add_column(column, justify="left" if column in ("workload", "device", "dtype") else "right")
    for result in results["workloads"]:
        for row in result["devices"]:
            table.add_row(result["workload"], row["device"], DTYPE_OF[row["precision"]], str(row["batch_size"]),
                          _num(row["samples_per_s"], ".1f") + ("*" if row["steps"] == 1 else ""),
                          _num(row["step_ms"], ".2f"),
                          _num(row["speedup_vs_cpu"], ".2f") + "x" if row["speedup_vs_cpu"] else "-",
                          _flops(row["achieved_tflops"]), _num(row["mfu"] and row["mfu"] * 100, ".1f") + "%")
    console.print(table)
    if any(row["steps"] == 1 for row in rows):
        console.print("* one timed step (--max-seconds cut the timing): a single sample, not a median; raise "
                      "--max-seconds for a steadier figure")
    if len(results["devices"]) < 2:
        console.print(f"only {results['devices'][0]['device']} was benchmarked, so there is nothing to compare "
                      "(`braeburn doctor` says why no accelerator is usable here)")
    else:
        for result in results["workloads"]:
            style = "bold yellow" if "the CPU is the faster choice" in result["verdict"] else "bold"
            console.print(f"[{style}]{result['verdict']}[/]")
    for result in results["workloads"]:
        for row in result["devices"]:
            if "precision_table" in row:  # mixed_precision auto, measured: the line the Trainer prints
                console.print(f"{result['workload']} on {row['device']}: precision {row['precision']}, timed: "
                              f"{row['precision_table']}: {row['precision_reason']}")
    for name, why in results["skipped"].items():
        console.print(f"[dim]skipped {name}: {why}[/]")


def save_plot(results: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(f"--plot {path}: drawing the chart needs matplotlib, which is not installed: "
                          "pip install 'braeburn[plot]' (or leave out --plot)") from None
    workloads = [r["workload"] for r in results["workloads"]]
    devices = [d["device"] for d in results["devices"]]
    width = 0.8 / max(len(devices), 1)
    figure, axes = plt.subplots(figsize=(max(6, 1.8 * len(workloads)), 4))
    for index, device in enumerate(devices):
        values = [next((row["samples_per_s"] for row in r["devices"] if row["device"] == device), 0)
                  for r in results["workloads"]]
        axes.bar([x + index * width for x in range(len(workloads))], values, width, label=device)
    axes.set_xticks([x + width * (len(devices) - 1) / 2 for x in range(len(workloads))], workloads)
    axes.set_ylabel("samples/s (log scale)")
    axes.set_yscale("log")
    axes.set_title(f"braeburn bench ({results['settings']['size']} size)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# -- the user's own script ----------------------------------------------------------------------


def script_result(kind: DeviceKind, record: dict | None, warmup: int) -> dict:
    """Median step time of a script's run, leaving out the warm-up steps (keeping at least one)."""
    times = [step["time_s"] for step in (record or {}).get("steps", [])]
    timed = times[warmup:] or times[-1:]
    median = statistics.median(timed) if timed else None
    return {"device": kind.name, "steps": len(timed), "step_ms": median * 1e3 if median else None,
            "steps_per_s": 1 / median if median else None, "precision": (record or {}).get("precision")}


def run_script(args, host) -> dict:
    import tempfile

    from .check import run_side, side_env

    kinds = choose_devices(args.devices, host)
    rows = []
    with tempfile.TemporaryDirectory(prefix="braeburn-bench-") as root:
        for kind in kinds:
            env = side_env("bench", kind.name, args.mixed_precision, Path(root) / kind.name,
                           steps=args.warmup + args.steps, seed=1234, before_torch=kind.env_before_torch())
            if not args.json:
                print(f"braeburn bench: {args.script} on {kind.name}...", file=sys.stderr)
            side = run_side(args.script, args.script_args, env, "bench", kind.name, timeout=600)
            if not (side.record or {}).get("steps"):
                raise RuntimeError(f"{args.script} recorded no training step on {kind.name} (exit status "
                                   f"{side.returncode}): it must train through braeburn's Accelerator or Trainer. "
                                   f"Its output ends with: {side.error or side.stderr[-300:]}")
            rows.append(script_result(kind, side.record, args.warmup))
    cpu = next((r for r in rows if not _kind(r["device"]).is_accelerator), None)
    for row in rows:
        row["speedup_vs_cpu"] = cpu["step_ms"] / row["step_ms"] if cpu and row["step_ms"] else None
    fastest = min(rows, key=lambda r: r["step_ms"] or float("inf"))
    if len(rows) < 2:
        line = f"{args.script}: only {fastest['device']} was benchmarked, so there is nothing to compare"
    elif _kind(fastest["device"]).is_accelerator:
        line = f"{args.script}: {fastest['device']} is the faster choice"
    else:
        line = f"{args.script}: the CPU is the faster choice for this script"
    return {"script": args.script, "devices": rows, "verdict": line}


def render_script(result: dict) -> None:
    from rich.table import Table

    console = make_console()
    table = Table(title=f"{result['script']}: median training step", title_justify="left")
    for column in ("device", "precision", "timed steps", "step ms", "steps/s", "vs CPU"):
        table.add_column(column, justify="left" if column in ("device", "precision") else "right")
    for row in result["devices"]:
        table.add_row(row["device"], DTYPE_OF.get(row["precision"] or "no", "-"), str(row["steps"]),
                      _num(row["step_ms"], ".2f"), _num(row["steps_per_s"], ".1f"),
                      _num(row["speedup_vs_cpu"], ".2f") + "x" if row["speedup_vs_cpu"] else "-")
    console.print(table)
    style = "bold yellow" if "the CPU is the faster choice" in result["verdict"] else "bold"
    console.print(f"[{style}]{result['verdict']}[/]")


# -- the verb -------------------------------------------------------------------------------------


def _check_numbers(args) -> None:
    for flag, value, least in (("--steps", args.steps, 1), ("--warmup", args.warmup, 0),
                               ("--batch-size", args.batch_size, 1)):
        if value is not None and value < least:
            raise ValueError(f"{flag} {value}: must be at least {least}")
    if not (math.isfinite(args.max_seconds) and args.max_seconds > 0):
        raise ValueError(f"--max-seconds {args.max_seconds:g}: must be a number of seconds above 0 (each phase stops "
                         "after this long, after at least one step); pass e.g. --max-seconds 30")
    if args.script and not Path(args.script).is_file():
        raise ValueError(f"script {args.script!r} does not exist; pass the path of a training script, or "
                         "no script to run the built-in workloads")


def _short_run(args) -> None:
    """BRAEBURN_MAX_STEPS=N (a quick check that the command runs, as the doc tests do): at most N steps and N
    warm-up steps, on the tiny models (a full-size BERT step takes a minute on a busy 2-core CPU)."""
    from ..plan.envvars import MAX_STEPS_VAR, max_steps_cap

    cap = max_steps_cap()
    if cap is None:
        return
    args.steps, args.warmup, args.size = min(args.steps, cap), min(args.warmup, cap), "tiny"
    _say(f"{MAX_STEPS_VAR}={cap}: a quick check, not a measurement: {args.warmup} warm-up and {args.steps} timed "
         "steps, tiny models (unset it to measure in full)")


def run(args: argparse.Namespace) -> int:
    from ..devices.host import current_host

    host = current_host()
    try:
        _check_numbers(args)
        _short_run(args)
        if args.script:
            result = run_script(args, host)
        else:
            result = run_workloads(args, host)
    except (ValueError, ImportError) as error:
        print(f"braeburn bench: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.script:
        render_script(result)
    else:
        render(result)
    if args.plot and not args.script:
        try:
            save_plot(result, args.plot)
        except ImportError as error:
            print(f"braeburn bench: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        print(f"chart saved to {args.plot}", file=sys.stderr)
    return EXIT_OK
