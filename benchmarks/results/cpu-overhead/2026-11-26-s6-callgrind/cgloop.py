"""Under callgrind --instr-atstart=no: instrumentation on only inside the loop region of each run (handshakes)."""
import os, sys, time
sys.path.insert(0, "benchmarks")
import torch
torch.set_num_threads(1)
import cpu_overhead as co
from braeburn.trainer.loop import CoreTrainer
who, n, sync = sys.argv[1], int(sys.argv[2]), sys.argv[3]
state = {"on": False}
def handshake(tag):
    open(f"{sync}/{tag}", "w").close()
    while not os.path.exists(f"{sync}/{tag}.go"):
        time.sleep(0.02)
orig = CoreTrainer._train_epochs
def timed(self, loader):
    if state["on"]: handshake(state["tag"] + ".start")
    try:
        return orig(self, loader)
    finally:
        if state["on"]: handshake(state["tag"] + ".stop")
CoreTrainer._train_epochs = timed
def bare(steps):
    net, dataset = co.model(), co.data(steps)
    loader = co.DataLoader(dataset, batch_size=co.BATCH, shuffle=True)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    if state["on"]: handshake(state["tag"] + ".start")
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    if state["on"]: handshake(state["tag"] + ".stop")
run = bare if who == "bare" else co.braeburn
run(n); run(2 * n)
state["on"] = True
state["tag"] = "one"; run(n)
state["tag"] = "two"; run(2 * n)
open(f"{sync}/done", "w").close()
