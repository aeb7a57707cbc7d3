"""The pure parts of distributed training, in one process: which modules FSDP shards, where a resumed
loader starts in another world size, how a restarted worker knows it was restarted, and the strategy
option on TrainingConfig."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from braeburn.data.loader import ShardSampler
from braeburn.distributed.checkpoint import resume_position
from braeburn.distributed.elastic import is_restarted, restart_count, resume_request
from braeburn.distributed.fsdp import group_units, shard_units
from braeburn.plan.rules import PlanError, make_plan
from braeburn.trainer.config import TrainingConfig
from tests.conftest import APPLE_M


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
        self.norm = nn.LayerNorm(8)


class TwoLarge(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head, self.tiny = nn.Linear(40, 40), nn.Linear(40, 20), nn.Linear(2, 1)


def test_fsdp_units_are_the_blocks_of_the_largest_module_list():
    model = Blocks()
    assert shard_units(model) == list(model.layers)


def test_fsdp_units_without_blocks_are_the_children_holding_a_tenth_of_the_parameters():
    model = TwoLarge()
    assert shard_units(model) == [model.body, model.head]


def test_fsdp_units_follow_a_transformers_model_declared_blocks():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=2, n_head=2, n_positions=16, vocab_size=50))
    assert shard_units(model) == list(model.transformer.h)


def test_fsdp_unit_groups_join_consecutive_blocks_into_that_many_units():
    blocks = list(Blocks().layers)
    assert group_units(blocks, None) == [[block] for block in blocks]  # each block its own unit
    assert group_units(blocks, 0) == []  # none: the root holds every parameter
    assert group_units(blocks, 1) == [blocks]
    assert group_units(blocks, 3) == [blocks[:1], blocks[1:3], blocks[3:]]
    assert group_units(blocks, 9) == [[block] for block in blocks]  # at most one unit a block
    with pytest.raises(ValueError, match="unit_groups=-1"):
        group_units(blocks, -1)


@pytest.mark.parametrize("saved_world, saved_batch, yielded, world, batch, expected", [
    (2, 4, 3, 1, 8, 3),  # the same global batch: exact
    (1, 8, 3, 2, 4, 3),
    (2, 4, 3, 4, 4, 1),  # 24 samples seen; global batches of 16: resume after 16 (8 seen twice, none skipped)
    (1, 8, 0, 2, 4, 0),
])
def test_a_loader_resumes_at_the_same_sample_in_another_world_size(saved_world, saved_batch, yielded, world,
                                                                   batch, expected):
    saved = {"epoch": 2, "batches_yielded": yielded, "seed": 7, "num_processes": saved_world,
             "batch_size": saved_batch}
    position = resume_position(saved, batch, world)
    assert position["batches_yielded"] == expected and (position["epoch"], position["seed"]) == (2, 7)


def test_the_global_sample_order_does_not_depend_on_the_world_size():
    """What makes resuming in samples sound: rank slices of each global batch concatenate to one order."""
    one = ShardSampler(20, batch_size=4, shuffle=True, seed=3)
    one.set_epoch(1)
    ranks = [ShardSampler(20, batch_size=2, num_replicas=2, rank=r, shuffle=True, seed=3) for r in (0, 1)]
    for sampler in ranks:
        sampler.set_epoch(1)
    zero, first = (list(sampler) for sampler in ranks)
    interleaved = [i for step in range(5) for i in zero[2 * step:2 * step + 2] + first[2 * step:2 * step + 2]]
    assert interleaved == list(one)


def test_an_old_loader_state_without_a_world_size_is_used_as_it_is():
    assert resume_position({"epoch": 0, "batches_yielded": 5, "seed": 1}, 4, 2)["batches_yielded"] == 5


def test_a_restarted_worker_resumes_from_the_latest_checkpoint_only_when_one_exists(tmp_path):
    assert restart_count({}) == 0 and not is_restarted({"TORCHELASTIC_RESTART_COUNT": "0"})
    agent = {"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_MAX_RESTARTS": "3"}  # what torchrun's agent sets beside it
    assert restart_count({"TORCHELASTIC_RESTART_COUNT": "2", **agent}) == 2
    restarted = {"TORCHELASTIC_RESTART_COUNT": "1", **agent}
    assert resume_request(tmp_path / "checkpoint-8", restarted) == "latest"
    assert resume_request(None, restarted) is None  # died before the first save: start again
    assert resume_request(tmp_path / "checkpoint-8", {}) is None  # the first attempt starts as asked


def test_a_restart_count_inherited_without_a_torchrun_agent_is_ignored_and_said(tmp_path, capsys):
    """A shell left over from a torchrun worker: resuming (or overwriting) unasked would be silent harm."""
    beyond_its_maximum = {"TORCHELASTIC_RESTART_COUNT": "4", "TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_MAX_RESTARTS": "3"}
    for inherited in ({"TORCHELASTIC_RESTART_COUNT": "1"}, beyond_its_maximum):
        assert restart_count(inherited) == 0 and resume_request(tmp_path / "checkpoint-8", inherited) is None
    err = capsys.readouterr().err
    assert "TORCHELASTIC_RESTART_COUNT=1 is set, but not by a torchrun agent" in err and "is ignored" in err
    assert err.count("TORCHELASTIC_RESTART_COUNT=1 is set") == 1  # said once


def test_training_config_strategy_reaches_the_plan_and_mps_is_refused_with_the_reason():
    config = TrainingConfig(strategy="fsdp")
    assert config.run_options(num_processes=2).strategy == "fsdp"
    with pytest.raises(PlanError) as refused:
        make_plan(TrainingConfig(strategy="fsdp", accelerator="mps").run_options(), APPLE_M)
    assert "no process-group backend" in str(refused.value) and "--cpu" in str(refused.value)
    with pytest.raises(PlanError, match="choose one of auto, ddp, fsdp"):
        make_plan(TrainingConfig(strategy="zero3", use_cpu=True).run_options(), APPLE_M)


def test_fsdp_with_one_process_trains_the_plain_model(tmp_path):
    """strategy="fsdp" on one process has nothing to shard: the model stays whole, checkpoints go through DCP."""
    from braeburn import Accelerator

    accelerator = Accelerator(cpu=True, strategy="fsdp", mixed_precision="no")
    model, optimizer = accelerator.prepare(nn.Linear(3, 1), None)
    assert not accelerator.shards_model and isinstance(model, nn.Linear)
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.backward(model(torch.ones(2, 3)).sum())
    optimizer.step()
    accelerator.save_state(tmp_path / "state")
    assert (tmp_path / "state" / "sharded" / ".metadata").is_file()
    before = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    accelerator.load_state(tmp_path / "state")
    assert torch.equal(model.weight, before)


def test_ddp_broadcasts_buffers_only_where_the_forward_changes_them():
    from braeburn.distributed.process_group import buffers_change_in_forward

    assert buffers_change_in_forward(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)))
    assert buffers_change_in_forward(torch.nn.Sequential(torch.nn.InstanceNorm1d(4, track_running_stats=True)))
    assert not buffers_change_in_forward(torch.nn.Sequential(torch.nn.InstanceNorm1d(4)))  # no running stats
    assert not buffers_change_in_forward(torch.nn.BatchNorm1d(4, track_running_stats=False))
    transformer_like = torch.nn.Linear(4, 4)
    transformer_like.register_buffer("position_ids", torch.arange(4))  # constant: equal on every rank
    assert not buffers_change_in_forward(transformer_like)
