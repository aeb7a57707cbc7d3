"""Per-step CPU time of the training loop alone (braeburn's _train_epochs; the bare loop's for-loop), two trees
alternating, each round a fresh process: the setup, the summary and the plot are outside the timed region."""
import json, os, statistics, subprocess, sys, time
from pathlib import Path
STEPS = 2000
def child(tree):
    sys.path.insert(0, str(Path(tree) / "benchmarks"))
    import torch
    torch.set_num_threads(1)
    import cpu_overhead as co
    from braeburn.trainer.loop import CoreTrainer
    co.clock = time.process_time
    inner = {}
    orig = CoreTrainer._train_epochs
    def timed(self, loader):
        s = time.process_time()
        try:
            return orig(self, loader)
        finally:
            inner["t"] = time.process_time() - s
    CoreTrainer._train_epochs = timed
    co.bare(200); co.braeburn(200)
    out = {"bare": [], "braeburn": []}
    for _ in range(3):
        out["bare"].append(co.bare(STEPS) / STEPS * 1e6)
        co.braeburn(STEPS); out["braeburn"].append(inner["t"] / STEPS * 1e6)
    print(json.dumps(out))
if sys.argv[1] == "--child":
    child(sys.argv[2]); sys.exit()
trees = dict(item.split("=", 1) for item in sys.argv[1].split(","))
rounds = int(sys.argv[2])
res = {n: {"bare": [], "braeburn": []} for n in trees}
for _ in range(rounds):
    for name, tree in trees.items():
        tree = str(Path(tree).resolve())
        done = subprocess.run([sys.executable, __file__, "--child", tree], env={**os.environ, "PYTHONPATH": tree + "/src"},
                              cwd=tree, capture_output=True, text=True, check=True)
        for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items():
            res[name][k] += v
for name, r in res.items():
    b, m = statistics.median(r["bare"]), statistics.median(r["braeburn"])
    print(f"{name}: bare {b:.1f} us/step (min {min(r['bare']):.1f}), braeburn loop {m:.1f} (min {min(r['braeburn']):.1f}); "
          f"ratio {b / m:.3f} (minima {min(r['bare']) / min(r['braeburn']):.3f}); braeburn adds {m - b:.1f} us (minima {min(r['braeburn']) - min(r['bare']):.1f})")
print(json.dumps(res))
