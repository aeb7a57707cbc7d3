"""Per-step and layout defaults of the Accelerator that exist for speed (the speed itself is in benchmarks/)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from braeburn import Accelerator
from braeburn.accelerator.compile import mostly_convolutions
from braeburn.devices.cpu import CpuDevice


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 32, 3), nn.Flatten(), nn.LazyLinear(4))


def test_mostly_convolutions_tells_a_cnn_from_a_transformer_like_model():
    assert mostly_convolutions(nn.Sequential(nn.Conv2d(3, 64, 3), nn.Conv2d(64, 64, 3), nn.Linear(64, 10)))
    assert not mostly_convolutions(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Linear(512, 512)))
    assert not mostly_convolutions(nn.Sequential())


def test_channels_last_only_where_the_device_says_it_helps(monkeypatch):
    model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3))
    prepared = Accelerator(cpu=True, compile=False).prepare(model)
    assert not prepared[0].weight.is_contiguous(memory_format=torch.channels_last)
    monkeypatch.setattr(CpuDevice, "channels_last_helps", True)
    model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3))
    reference = [p.detach().clone() for p in model.parameters()]
    prepared = Accelerator(cpu=True, compile=False).prepare(model)
    assert prepared[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert all(torch.equal(a, b) for a, b in zip(reference, prepared.parameters()))  # same values
    out = prepared(torch.randn(2, 3, 16, 16))  # plain NCHW inputs still work
    assert out.shape == (2, 64, 12, 12)


def test_single_process_accumulate_sets_sync_flags_without_a_context():
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2, compile=False)
    flags = []
    for _ in range(4):
        with acc.accumulate():
            flags.append(acc.sync_gradients)
    assert flags == [False, True, False, True]


@pytest.mark.slow  # torch.compile of a CNN (12 s on a loaded machine)
def test_auto_compile_leaves_cnns_eager_but_an_explicit_request_compiles_them(monkeypatch):
    from braeburn.devices.cpu import CpuDevice

    monkeypatch.setattr(CpuDevice, "compile_by_default", lambda self, host: (True, "faked: compile pays here"))
    cnn_model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3))
    mlp_model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 2))
    acc = Accelerator(cpu=True)  # compile="auto"
    assert acc.plan.compile and acc.plan.compile_auto
    cnn, mlp = acc.prepare(cnn_model), acc.prepare(mlp_model)
    assert not acc.compile_stats(cnn).compiled and "CNN" in acc.compile_stats(cnn).reason
    # The Accelerator cannot know how long a hand-written loop runs: auto stays eager (the Trainer measures).
    assert not acc.compile_stats(mlp).compiled and "not known" in acc.compile_stats(mlp).reason
    forced = Accelerator(cpu=True, compile=True, compile_backend="eager")
    model = forced.prepare(nn.Sequential(nn.Conv2d(3, 64, 3), nn.Conv2d(64, 64, 3)))
    assert forced.compile_stats(model).compiled and type(model) is nn.Sequential  # compiled in place
