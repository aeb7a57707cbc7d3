"""Marginal per-step Python calls and tottime, braeburn.Trainer against the bare loop (cProfile, N vs 2N steps).

    PYTHONPATH=src python benchmarks/results/cpu-overhead/2026-11-26-s5-marginal-profile.py [N] [top]

Each runner runs N and 2N steps under cProfile; the difference per function, divided by N, is what one step costs
(setup, the summary and the first batch's checks cancel). tottime is inflated by cProfile's own per-call cost.
"""
import cProfile, pstats, sys, time
sys.path.insert(0, "benchmarks")
import torch
torch.set_num_threads(1)
import cpu_overhead as co

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
TOP = int(sys.argv[2]) if len(sys.argv) > 2 else 60


def stats(run, steps):
    prof = cProfile.Profile()
    prof.enable()
    run(steps)
    prof.disable()
    return {key: (value[1], value[2]) for key, value in pstats.Stats(prof).stats.items()}  # primitive+all calls, tottime


def marginal(run):
    run(120)
    one, two = stats(run, N), stats(run, 2 * N)
    out = {}
    for key in set(one) | set(two):
        c1, t1 = one.get(key, (0, 0.0))
        c2, t2 = two.get(key, (0, 0.0))
        out[key] = ((c2 - c1) / N, (t2 - t1) / N * 1e6)
    return out


def name(key):
    file, line, func = key
    for root in ("/src/braeburn/", "/site-packages/", "benchmarks/"):
        if root in file:
            file = file.split(root, 1)[1]
    return f"{file}:{line}({func})"


bare, braeburn = marginal(co.bare), marginal(co.braeburn)
calls = lambda d: sum(c for c, _ in d.values())
print(f"marginal per step over {N} vs {2 * N} steps: bare {calls(bare):.1f} calls, braeburn {calls(braeburn):.1f} calls "
      f"(+{calls(braeburn) - calls(bare):.1f})")
diff = {}
for key in set(bare) | set(braeburn):
    cb, tb = bare.get(key, (0, 0.0))
    cr, tr = braeburn.get(key, (0, 0.0))
    diff[key] = (cr - cb, tr - tb, cr)
rows = sorted(diff.items(), key=lambda kv: -abs(kv[1][1]))
print(f"{'extra calls/step':>16} {'extra tottime us/step':>22} {'braeburn calls/step':>20}  function")
for key, (dc, dt, cr) in rows[:TOP]:
    if abs(dc) < 0.01 and abs(dt) < 0.3:
        continue
    print(f"{dc:16.2f} {dt:22.2f} {cr:20.2f}  {name(key)}")
print("\nall functions with a different call count per step:")
for key, (dc, dt, cr) in sorted(diff.items(), key=lambda kv: -kv[1][0]):
    if abs(dc) >= 0.01:
        print(f"{dc:16.2f} {dt:22.2f} {cr:20.2f}  {name(key)}")
