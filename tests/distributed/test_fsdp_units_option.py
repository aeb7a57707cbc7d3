"""The fsdp_units option: a user who asks for a unit per block (Accelerate's and Transformers'
TRANSFORMER_BASED_WRAP) gets it, and one unit (NO_WRAP) where they ask for that, whatever the model's size; and a
state saved under one layout resumes exactly under the other (both ways), on two CPU processes (gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from braeburn import Accelerator
from braeburn.trainer.config import TrainingConfig

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import json, os, sys, torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from braeburn import Accelerator

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x).pow(2).mean()

def train(units, steps, load=None, save=None):
    accelerator = Accelerator(cpu=True, strategy="fsdp", mixed_precision="no", fsdp_units=units)
    model = accelerator.prepare(Net())
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=0.05))
    if load:
        accelerator.load_state(load)
    losses = []
    for step in steps:
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(100 * step + accelerator.process_index))
        loss = model(x)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if save and step == 1:
            accelerator.save_state(save)
    block_units = [isinstance(block, FSDPModule) for block in model.blocks]
    accelerator.wait_for_everyone()
    return {"losses": losses, "block_units": block_units}

rank = int(os.environ["RANK"])
report = {"rank": rank}
for saved_as, loaded_as in (("block", "root"), ("root", "block")):
    whole = train(saved_as, range(4), save=f"state-{saved_as}")
    resumed = train(loaded_as, range(2, 4), load=f"state-{saved_as}")
    report[saved_as] = whole
    report[f"{saved_as}->{loaded_as}"] = resumed
with open(f"report{rank}.json", "w") as file:
    json.dump(report, file)
"""


@pytest.mark.slow  # two gloo processes, four runs each
def test_fsdp_units_are_what_the_user_asked_for_and_states_cross_layouts_exactly(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, BRAEBURN_DEVICE="cpu", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], env=env, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("report*.json"))]
    assert [report["rank"] for report in reports] == [0, 1]
    for report in reports:
        # the machine's memory holds this model many times over, where "auto" makes it one unit: "block" still
        # gives each block its own unit, "root" none
        assert report["block"]["block_units"] == [True, True, True]
        assert report["root"]["block_units"] == [False, False, False]
        assert report["block"]["losses"] == report["root"]["losses"]  # the layout changes no number
        assert report["block->root"]["block_units"] == [False, False, False]
        assert report["root->block"]["block_units"] == [True, True, True]
        for saved_as, loaded_as in (("block", "root"), ("root", "block")):
            # steps 2 and 3 after resuming from the state saved at step 1, in the other layout: bitwise the same
            assert report[f"{saved_as}->{loaded_as}"]["losses"] == report[saved_as]["losses"][2:]


def test_fsdp_units_reach_the_accelerator_and_transformers_fsdp_asks_for_a_unit_per_block():
    assert TrainingConfig().accelerator_options()["fsdp_units"] == "auto"
    assert TrainingConfig(fsdp_units="root").accelerator_options()["fsdp_units"] == "root"
    wrapped = TrainingConfig(fsdp="full_shard auto_wrap")
    assert (wrapped.strategy, wrapped.fsdp_units) == ("fsdp", "block")  # Transformers wraps each block
    # Transformers' fsdp, with or without auto_wrap, wraps each block (TRANSFORMER_BASED_WRAP is its default policy)
    assert TrainingConfig(fsdp="full_shard").fsdp_units == "block"
    assert TrainingConfig(strategy="fsdp").fsdp_units == "auto"  # braeburn's own spelling keeps braeburn's layout
    assert TrainingConfig(fsdp="full_shard auto_wrap", fsdp_units="root").fsdp_units == "root"  # explicit wins


def test_an_unknown_fsdp_units_is_refused_naming_the_choices():
    assert [str(error) for error in TrainingConfig(fsdp_units="layer").validate()] == [
        "fsdp_units='layer': choose one of auto, block, root"]
    assert [str(error) for error in TrainingConfig(fsdp_units="block", strategy="ddp").validate()] == [
        "fsdp_units='block': shapes FSDP's units, but --strategy is ddp; pass --strategy fsdp, or leave "
        "--fsdp_units at auto"]
    with pytest.raises(ValueError, match="fsdp_units='layer': choose one of auto, block, root"):
        Accelerator(cpu=True, fsdp_units="layer")


def test_accelerates_fsdp_plugin_refusal_names_the_unit_option():
    from accelerate.utils import FullyShardedDataParallelPlugin

    with pytest.raises(Exception, match="fsdp_units='block'"):
        Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
    assert torch.distributed.is_available()


def test_auto_leaves_the_unit_layout_to_wrap_fsdps_own_default():
    """benchmarks/scaling.py's variants (braeburn-fsdp[unit_groups=0]) set wrap_fsdp's default: "auto" must not
    pass a unit_groups of its own over it."""
    assert Accelerator(cpu=True)._fsdp_unit_groups() == {}
    assert Accelerator(cpu=True, fsdp_units="block")._fsdp_unit_groups() == {"unit_groups": None}
    assert Accelerator(cpu=True, fsdp_units="root")._fsdp_unit_groups() == {"unit_groups": 0}
