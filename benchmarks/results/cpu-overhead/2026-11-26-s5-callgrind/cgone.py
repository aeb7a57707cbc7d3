"""Run under callgrind (--instr-atstart=no); the parent (cgrun.sh) switches instrumentation on and dumps between phases."""
import os, sys, time
sys.path.insert(0, "benchmarks")
import torch
torch.set_num_threads(1)
import cpu_overhead as co
who, n, sync = sys.argv[1], int(sys.argv[2]), sys.argv[3]
run = getattr(co, who)
run(n); run(2 * n)  # warm: glyphs, kernels and caches for both lengths
def handshake(tag):
    open(f"{sync}/{tag}", "w").close()
    while not os.path.exists(f"{sync}/{tag}.go"):
        time.sleep(0.05)
handshake("ready")
run(n)
handshake("one")
run(2 * n)
handshake("two")
