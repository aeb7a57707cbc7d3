"""FSDP's defaults for a model that DDP could hold on the device: one unit, the root (one all-gather and one
reduce-scatter a step), whose gathered parameters stay from forward to backward (no second all-gather); a larger
model, or an unknown device memory, has a unit per block that gathers again in backward. Checked on two CPU
processes (gloo) through Accelerator.prepare, the path the Trainer takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch import nn

from braeburn.distributed.fsdp import DDP_BYTES_PER_PARAMETER, keeps_gathered

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import json, os, torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from braeburn import Accelerator
from braeburn.devices.cpu import CpuDevice

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x).sum()

def after_forward(memory_bytes):
    if memory_bytes is not None:  # a device of this much memory
        CpuDevice.memory_stats = lambda self: {"peak_bytes": 1, "total_bytes": memory_bytes}
    accelerator = Accelerator(cpu=True, strategy="fsdp", mixed_precision="no")
    model = accelerator.prepare(Net())
    loss = model(torch.randn(4, 8))
    whole = [not isinstance(block.weight, DTensor) for block in model.blocks]  # gathered, not resharded
    accelerator.backward(loss)
    units = [isinstance(block, FSDPModule) for block in model.blocks]
    return {"sharded": accelerator.shards_model, "gathered_after_forward": whole, "block_units": units}

report = {"rank": int(os.environ["RANK"]), "machine": after_forward(None), "small": after_forward(1000)}
with open(f"report{report['rank']}.json", "w") as file:  # one file a rank: printed lines of two ranks can interleave
    json.dump(report, file)
"""


@pytest.mark.slow  # two gloo processes (22 s on a loaded machine)
def test_the_default_reaches_fully_shard_on_two_gloo_processes(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, BRAEBURN_DEVICE="cpu", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("report*.json"))]
    assert sorted(report["rank"] for report in reports) == [0, 1]
    for report in reports:
        # the machine's memory holds this model many times over: one unit (the root, no block its own), gathered
        # after forward
        assert report["machine"] == {"sharded": True, "gathered_after_forward": [True, True, True],
                                     "block_units": [False, False, False]}
        # 1000 bytes could not hold it under DDP: each block is its own unit, resharded after its forward (ZeRO-3)
        assert report["small"] == {"sharded": True, "gathered_after_forward": [False, False, False],
                                   "block_units": [True, True, True]}


def test_keeps_gathered_exactly_where_ddp_could_hold_the_model():
    model = nn.Linear(10, 10)  # 110 parameters
    need = 110 * DDP_BYTES_PER_PARAMETER
    assert keeps_gathered(model, need) and keeps_gathered(model, 10 * need)
    assert not keeps_gathered(model, need - 1)
    assert not keeps_gathered(model, None)  # memory unknown: the safe choice, gathered again in backward
