"""Eager, whole-model and regional compilation of GPT-2 small in a bare loop: each compile's cost and step time.

    python benchmarks/regional_compile.py --out OUT                  # on a GPU: each variant cold, then warm
    python benchmarks/regional_compile.py --tiny --cpu --steps 8 --out /tmp/rc   # checks the script on a CPU

Each variant trains in a fresh process (bf16 autocast, fused AdamW, clipping at 1.0, batch 8 x 1,024): first with
an empty torch compile cache (TORCHINDUCTOR_CACHE_DIR, a new folder: the cold cost), then again with the cache the
first left (the warm cost). Variants:
- ``eager``: no compile;
- ``whole``: torch.compile of the whole model;
- ``regional``: what braeburn's regional choice compiles (braeburn.accelerator.compile.compile_regions): each block
  of the model's repeated layers, and its loss function, as regions; the rest runs eagerly.
The first compiled step's wall time is the compile cost; the step time is the median of the steps after
``--settle`` (compiling done), each synchronised.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TAG = "REGIONAL "
VARIANTS = ("eager", "whole", "regional")


def child(variant: str, steps: int, settle: int, tiny: bool, cpu: bool) -> None:
    sys.path.insert(0, str(HERE))
    import peers
    import torch

    from braeburn.accelerator.compile import compile_regions
    from braeburn.plan.compile_policy import pin_traced_attributes

    device = torch.device("cpu" if cpu or not torch.cuda.is_available() else "cuda")
    workload = peers.WORKLOADS["gpt2-small"](tiny)
    torch.manual_seed(0)
    model = workload.make_model().to(device)
    forward = model
    if variant != "eager":
        pin_traced_attributes(model)
    if variant == "whole":
        forward = torch.compile(model)
    elif variant == "regional":
        compile_regions(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    generator = torch.Generator().manual_seed(0)
    batches = [peers.collate([workload.make_sample(generator) for _ in range(workload.batch_size)]) for _ in range(4)]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for step in range(steps):
        batch = {k: v.to(device, non_blocking=True) for k, v in batches[step % len(batches)].items()}
        started = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = forward(**batch)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - started)
    steady = times[settle:]
    print(TAG + json.dumps({"variant": variant, "first_step_seconds": times[0],
                            "step_ms": statistics.median(steady) * 1000, "step_ms_min": min(steady) * 1000,
                            "step_ms_max": max(steady) * 1000, "loss": float(loss),
                            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                            "torch": torch.__version__}), flush=True)


def measure(variant: str, cache: str, args) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
    command = [sys.executable, __file__, "--child", variant, "--steps", str(args.steps), "--settle", str(args.settle),
               *(["--tiny"] if args.tiny else []), *(["--cpu"] if args.cpu else [])]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, errors="replace")
    lines = [line for line in done.stdout.splitlines() if line.startswith(TAG)]
    if done.returncode or not lines:
        return {"variant": variant, "failed": done.returncode, "tail": (done.stdout + done.stderr)[-2000:]}
    return {**json.loads(lines[-1][len(TAG):]), "process_seconds": round(time.perf_counter() - started, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--settle", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1, help="cold+warm pairs per variant, interleaved")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/regional-compile")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.settle, args.tiny, args.cpu)
        return
    results = []
    for round_index in range(1, args.rounds + 1):
        for variant in args.variants.split(","):
            with tempfile.TemporaryDirectory() as cache:
                for state in ("cold", "warm"):
                    result = {**measure(variant, cache, args), "cache": state, "round": round_index}
                    results.append(result)
                    print(json.dumps(result), flush=True)
                    if variant == "eager":
                        break
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "regional.json").write_text(json.dumps({"argv": sys.argv, "results": results}, indent=1) + "\n")
    print("| variant | cache | first step, s | step, ms (median, min-max) |\n|---|---|---|---|")
    for r in results:
        if "failed" in r:
            print(f"| {r['variant']} | {r['cache']} | failed | |")
            continue
        print(f"| {r['variant']} | {r['cache']} | {r['first_step_seconds']:.1f} | {r['step_ms']:.1f} "
              f"({r['step_ms_min']:.1f}-{r['step_ms_max']:.1f}) |")


if __name__ == "__main__":
    main()
