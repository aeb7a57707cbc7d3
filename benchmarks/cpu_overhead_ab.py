"""benchmarks/cpu_overhead.py's measurement for two checkouts side by side, alternating, each round a fresh process.

    git worktree add /tmp/old <commit>
    python benchmarks/cpu_overhead_ab.py --trees old=/tmp/old,new=. --steps 500 --rounds 5

Each round runs, in one process per checkout: the bare loop and braeburn's Trainer, each twice, at S and 2S steps
(process CPU time, one torch thread); the marginal time per step is (t(2S) - t(S)) / S. Prints the median and the
minimum per runner and checkout (the minimum is the steadier figure on a machine other jobs load), and the raw
numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def child(tree: str, steps: int) -> None:
    sys.path.insert(0, str(Path(tree) / "benchmarks"))
    import torch

    torch.set_num_threads(1)
    import cpu_overhead

    cpu_overhead.clock = time.process_time
    for run in (cpu_overhead.bare, cpu_overhead.braeburn):
        run(150)  # warm up: imports, kernels, matplotlib
    out = {}
    for name, run in (("bare", cpu_overhead.bare), ("braeburn", cpu_overhead.braeburn)) * 2:
        once, twice = run(steps), run(2 * steps)
        out.setdefault(name, []).append((twice - once) / steps * 1e6)
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default="new=.", help="name=path,... checkouts to compare")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    results = {name: {"bare": [], "braeburn": []} for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            tree = str(Path(tree).resolve())
            env = {**os.environ, "PYTHONPATH": os.path.join(tree, "src")}
            done = subprocess.run([sys.executable, __file__, "--child", tree, "--steps", str(args.steps)], env=env,
                                  cwd=tree, capture_output=True, text=True, check=True)
            for runner, values in json.loads(done.stdout.strip().splitlines()[-1]).items():
                results[name][runner] += values
    for name, runs in results.items():
        bare, mine = runs["bare"], runs["braeburn"]
        print(f"{name}: bare {statistics.median(bare):.1f} us/step (min {min(bare):.1f}), braeburn "
              f"{statistics.median(mine):.1f} (min {min(mine):.1f}); ratio {statistics.median(bare) / statistics.median(mine):.3f} "
              f"(from the minima {min(bare) / min(mine):.3f})")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
