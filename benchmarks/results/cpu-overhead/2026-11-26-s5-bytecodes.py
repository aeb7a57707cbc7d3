"""Marginal bytecodes executed per step, per Python function (sys.settrace opcode events), braeburn vs bare.

    PYTHONPATH=src python benchmarks/results/cpu-overhead/2026-11-26-s5-bytecodes.py [N=100]
"""
import sys, collections
sys.path.insert(0, "benchmarks")
import torch
torch.set_num_threads(1)
import cpu_overhead as co
counts = collections.Counter()
def tracer(frame, event, arg):
    frame.f_trace_opcodes = True
    if event == "opcode":
        counts[frame.f_code] += 1
    return tracer
def traced(run, n):
    counts.clear()
    sys.settrace(tracer)
    try:
        run(n)
    finally:
        sys.settrace(None)
    return collections.Counter(counts)
def marginal(run, n):
    run(60)
    a = traced(run, n); b = traced(run, 2 * n)
    return {k: (b[k] - a[k]) / n for k in set(a) | set(b)}
def name(code):
    f = code.co_filename
    for root in ("/src/braeburn/", "/site-packages/", "benchmarks/", "lib/python3.11/"):
        if root in f:
            f = f.split(root, 1)[1]
    return f"{f}:{code.co_firstlineno}({code.co_name})"
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
bare, br = marginal(co.bare, N), marginal(co.braeburn, N)
byname = collections.Counter(); bb = collections.Counter()
for k, v in br.items(): byname[name(k)] += v
for k, v in bare.items(): bb[name(k)] += v
print(f"bytecodes/step: bare {sum(bb.values()):.0f}, braeburn {sum(byname.values()):.0f}, extra {sum(byname.values()) - sum(bb.values()):.0f}")
diff = {k: byname[k] - bb[k] for k in set(byname) | set(bb)}
for k, v in sorted(diff.items(), key=lambda kv: -abs(kv[1])):
    if abs(v) >= 0.5:
        print(f"{v:8.1f} {byname[k]:8.1f} {bb[k]:8.1f}  {k}")
