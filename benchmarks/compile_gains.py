"""What torch.compile gains and costs per model family: the table behind compile="auto" (braeburn.plan.compile_gains).

    python benchmarks/compile_gains.py --out benchmarks/results/h100-compile-gains   # on a GPU
    python benchmarks/compile_gains.py --tiny --cpu --steps 30 --out /tmp/gains        # checks the script on a CPU

For each family, two fresh processes train the same model with braeburn's Trainer, ``compile=true`` and its
other defaults (bf16 where the GPU has it), on synthetic batches of the workload's real shape
(``benchmarks/peers.py``): the first with an empty torch compile cache (the cold cost), the second with the
cache the first left on disk (the warm cost). The Trainer times 10 eager steps, the whole first compiled
step, and 10 compiled steps; its metrics.jsonl holds them. The result is ``gains.json`` (raw numbers and
the command) and the lines of ``FAMILY_GAINS`` to paste into ``src/braeburn/plan/compile_gains.py`` (a test
keeps the two equal).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAMILIES = {"gpt2": "gpt2-small", "bert": "bert-base", "llama": "llama-small"}
RESULT_TAG = "COMPILE_GAINS "


def child(workload_name: str, steps: int, tiny: bool, cpu: bool, out: str) -> None:
    """One training run in this process; prints the Trainer's compile record as one tagged JSON line."""
    sys.path.insert(0, str(HERE))
    import peers
    import torch

    from braeburn import Trainer, TrainingConfig

    workload = peers.WORKLOADS[workload_name](tiny)
    torch.manual_seed(0)
    dataset = peers.SyntheticDataset(workload.make_sample, steps * workload.batch_size)
    config = TrainingConfig(output_dir=out, overwrite_output_dir=True, per_device_train_batch_size=workload.batch_size,
                            max_steps=steps, save_strategy="no", learning_rate=1e-4, compile="true", use_cpu=cpu,
                            logging_steps=max(1, steps // 4))
    model = workload.make_model()
    Trainer(model, config, train_dataset=dataset, collate_fn=peers.collate).train()
    runs = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    record = [run["run"]["compile"] for run in runs if "run" in run][-1]
    family = getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__.lower()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() and not cpu else platform.processor() or "cpu"
    print(RESULT_TAG + json.dumps({"family": family, "workload": workload_name, "device": device,
                                   "torch": torch.__version__, **record}), flush=True)


def measure(workload: str, steps: int, tiny: bool, cpu: bool, cache: str, work: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache,
           "BRAEBURN_COMPILE_RECORDS": os.path.join(cache, "records.json")}
    command = [sys.executable, __file__, "--child", workload, "--steps", str(steps), "--work", work,
               *(["--tiny"] if tiny else []), *(["--cpu"] if cpu else [])]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_TAG)]
    if done.returncode or not lines:
        sys.exit(f"{workload}: the run failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return {**json.loads(lines[-1][len(RESULT_TAG):]), "process_seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"of {', '.join(FAMILIES)}")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--tiny", action="store_true", help="small configs (a check of the script, not a result)")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/compile-gains")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.tiny, args.cpu, args.work)
        return
    results = {}
    for family in args.families.split(","):
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as work:
            cold = measure(FAMILIES[family], args.steps, args.tiny, args.cpu, cache, work)
            warm = measure(FAMILIES[family], args.steps, args.tiny, args.cpu, cache, work)
        eager, compiled = cold["eager_step_seconds"], cold["compiled_step_seconds"]
        results[family] = {"workload": FAMILIES[family], "device": cold["device"], "torch": cold["torch"],
                           "eager_ms": round(eager * 1000, 2), "compiled_ms": round(compiled * 1000, 2),
                           "gain": round(1 - compiled / eager, 2),
                           "cold_seconds": round(cold["compile_seconds"], 1),
                           "warm_seconds": round(warm["compile_seconds"], 1),
                           "warm_eager_ms": round(warm["eager_step_seconds"] * 1000, 2),
                           "warm_compiled_ms": round(warm["compiled_step_seconds"] * 1000, 2),
                           "process_seconds": [cold["process_seconds"], warm["process_seconds"]]}
        print(f"{family}: {results[family]}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "benchmarks/compile_gains.py", *sys.argv[1:]])
    (out / "gains.json").write_text(json.dumps({"command": command, "steps": args.steps, "families": results},
                                               indent=1) + "\n")
    print("\nFAMILY_GAINS entries for src/braeburn/plan/compile_gains.py:")
    for family, r in results.items():
        print(f'    "{family}": FamilyGain(gain={r["gain"]}, cold_seconds={r["cold_seconds"]}, '
              f'warm_seconds={r["warm_seconds"]}),')


if __name__ == "__main__":
    main()
