"""save_state/load_state: bitwise resume on CPU (weights, optimizer, scheduler, scaler, RNG, data position)
and atomic directory writes."""

from __future__ import annotations

import os
import random

import numpy
import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from braeburn import Accelerator
from braeburn.checkpoints import state as state_io
from braeburn.devices.cpu import CpuDevice


pytestmark = pytest.mark.usefixtures("cpu_only")  # bitwise resume on the CPU on any machine (the GPU lane: test_gpu_lane.py)


def _setup(precision: str, init_seed: int):
    torch.manual_seed(init_seed)  # a different init (and data seed) for the resumed object
    accelerator = Accelerator(mixed_precision=precision, gradient_accumulation_steps=2)
    model = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.2), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(40, 6, generator=generator), torch.randn(40, generator=generator))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    return accelerator, *accelerator.prepare(model, optimizer, loader, scheduler)


def _forever(loader):
    while True:
        yield from loader


def _run(accelerator, model, optimizer, scheduler, batches, steps):
    seen = []
    for _ in range(steps):
        x, y = next(batches)
        seen.append(x.clone())
        with accelerator.accumulate(model):
            # python's and numpy's generators feed the loss too, so their states must round-trip
            noise = 1 + 0.01 * random.random() + 0.01 * float(numpy.random.rand())
            loss = nn.functional.mse_loss(model(x).squeeze(1), y) * noise
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return seen


@pytest.mark.parametrize("precision, done", [("no", 13), ("no", 10), ("fp16", 7)])
def test_resume_is_bitwise_identical(tmp_path, precision, done):
    accelerator, model, optimizer, loader, scheduler = _setup(precision, init_seed=1)
    batches = _forever(loader)
    _run(accelerator, model, optimizer, scheduler, batches, done)
    accelerator.save_state(tmp_path / "ckpt")
    expected_batches = _run(accelerator, model, optimizer, scheduler, batches, 9)
    expected = [p.detach().clone() for p in model.parameters()]
    expected_lr = scheduler.get_last_lr()

    resumed, model2, optimizer2, loader2, scheduler2 = _setup(precision, init_seed=2)
    assert not torch.equal(next(model2.parameters()), expected[0])
    random.random(), numpy.random.rand()  # disturb the global generators: load_state must restore them
    resumed.load_state(tmp_path / "ckpt")
    got_batches = _run(resumed, model2, optimizer2, scheduler2, _forever(loader2), 9)
    assert all(torch.equal(a, b) for a, b in zip(expected_batches, got_batches))
    assert all(torch.equal(a, b) for a, b in zip(expected, model2.parameters()))
    assert scheduler2.get_last_lr() == expected_lr
    if precision == "fp16":
        assert resumed.scaler.get_scale() == accelerator.scaler.get_scale()


def test_saved_files_load_with_weights_only(tmp_path):
    accelerator, *_ = _setup("no", init_seed=0)
    accelerator.save_state(tmp_path / "ckpt")
    names = sorted(path.name for path in (tmp_path / "ckpt").iterdir())
    # Accelerate's names where the content is Accelerate's too (model.safetensors, optimizer.bin, scheduler.bin);
    # braeburn's own files beside them (docs/migrating.md says why)
    assert names == ["accelerator.pt", "dataloader_0.pt", "manifest.json", "model.safetensors", "optimizer.bin",
                     "rng_state_0.pt", "scheduler.bin"]  # the weights in safetensors: no pickle
    for name in names:
        if name.endswith((".pt", ".bin")):
            torch.load(tmp_path / "ckpt" / name, weights_only=True)  # (manifest.json is JSON)


def test_rng_state_round_trip():
    kind = CpuDevice()
    saved = state_io.rng_state(kind)
    expected = (random.random(), float(numpy.random.rand()), torch.rand(1).item())
    state_io.set_rng_state(saved, kind)
    assert (random.random(), float(numpy.random.rand()), torch.rand(1).item()) == expected


def test_a_failed_save_leaves_the_previous_state(tmp_path, monkeypatch):
    accelerator, *_ = _setup("no", init_seed=0)
    target = tmp_path / "ckpt"
    accelerator.save_state(target)
    before = {path.name: path.read_bytes() for path in target.iterdir()}

    def broken(obj, directory, name):
        if name.startswith("optimizer"):
            raise OSError("disk full")
        torch.save(obj, directory / name)

    monkeypatch.setattr(state_io, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        accelerator.save_state(target)
    assert {path.name: path.read_bytes() for path in target.iterdir()} == before
    monkeypatch.undo()
    accelerator.save_state(target)  # the next save clears the half-written staging directory
    assert not state_io.staging_dir(target).exists() and (target / "model.safetensors").exists()


def test_load_state_with_different_objects_says_what_differs(tmp_path):
    accelerator, *_ = _setup("no", init_seed=0)
    accelerator.save_state(tmp_path / "ckpt")
    other = Accelerator()
    other.prepare(nn.Linear(1, 1))
    with pytest.raises(ValueError, match="prepare the same models"):
        other.load_state(tmp_path / "ckpt")
    with pytest.raises(FileNotFoundError, match="save_state"):
        other.load_state(tmp_path / "missing")


class _StartedGpu(CpuDevice):
    """A kind whose runtime already ran work in this process, with a variable its library reads once."""

    def deterministic_env(self):
        return {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}

    def libraries_started(self):
        return True


def test_full_determinism_says_when_a_variable_comes_too_late(restore_determinism, monkeypatch):
    with pytest.warns(UserWarning, match="CUBLAS_WORKSPACE_CONFIG=:4096:8 was set after the GPU had run work.*"
                                         "Export CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting Python"):
        state_io.enable_full_determinism([_StartedGpu()])
    assert torch.are_deterministic_algorithms_enabled()
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the user's own value wins and is in time
    assert state_io.enable_full_determinism([_StartedGpu()]) is None
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
