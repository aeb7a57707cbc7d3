"""Run one idiom's script under Accelerate and under braeburn, in this process, one after the other.

``both(script, tmp_path)`` calls ``script(lib, folder)`` once with ``lib`` = Accelerate's names and once with
braeburn's (each in a folder of its own, the global RNGs seeded alike, Accelerate's singletons reset around it) and
returns the two :class:`Observation` s and the lines braeburn printed or warned (its "training on ..." line left
out). ``files(folder)`` lists what a run wrote, relative to its folder.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import random
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.compat.catalogue import Observation, assert_identical

NAMES = ("Accelerator", "ProjectConfiguration", "DataLoaderConfiguration", "GradientAccumulationPlugin",
         "DistributedDataParallelKwargs", "DistributedType", "skip_first_batches", "find_executable_batch_size")


def reset_accelerate() -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def library(name: str) -> SimpleNamespace:
    """The names a script imports: from ``accelerate`` (and ``accelerate.utils``), or from ``braeburn``."""
    module = importlib.import_module(name)
    utils = importlib.import_module("accelerate.utils") if name == "accelerate" else module
    found = {n: getattr(module, n, None) or getattr(utils, n) for n in NAMES}
    return SimpleNamespace(name=name, **found)


def seed_all(seed: int = 0) -> None:
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def both(script: Callable[[SimpleNamespace, Path], Observation],
         tmp_path: Path) -> tuple[Observation, Observation, list[str]]:
    """Accelerate's observation, braeburn's, and the lines braeburn said (see the module doc)."""
    pytest.importorskip("accelerate")
    observed, lines = {}, []
    for name in ("accelerate", "braeburn"):
        folder = tmp_path / name
        folder.mkdir()
        reset_accelerate()
        seed_all()
        if name == "braeburn":
            from braeburn.accelerator import core

            core._said_once.clear()  # (each line is said once per process: here once per run)
        out = io.StringIO()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
            warnings.simplefilter("always")
            observed[name] = script(library(name), folder)
        if name == "braeburn":
            lines = [line for line in out.getvalue().splitlines() + [str(w.message) for w in caught]
                     if line.startswith("braeburn:") and "training on" not in line]
    reset_accelerate()
    return observed["accelerate"], observed["braeburn"], lines


def files(folder: Path, *, leave_out: tuple[str, ...] = ()) -> list[str]:
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            relative = os.path.relpath(os.path.join(root, name), folder)
            if not any(relative.endswith(end) or name == end for end in leave_out):
                found.append(relative.replace(os.sep, "/"))
    return sorted(found)


# -- the tiny problem every idiom trains -----------------------------------------------------------

def dataset(n: int = 10, features: int = 3) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(n, features, generator=generator),
                         torch.randint(0, 2, (n,), generator=generator))


def loader(n: int = 10, batch_size: int = 4, **kwargs: Any) -> DataLoader:
    return DataLoader(dataset(n), batch_size=batch_size, **kwargs)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


def setup(lib: SimpleNamespace, *, lr: float = 0.1, data: DataLoader | None = None, **accelerator_kwargs: Any):
    """Accelerator, and the model, SGD optimizer and loader prepared, as Accelerate's docs' first example."""
    accelerator = lib.Accelerator(**accelerator_kwargs)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    net, optimizer, data = accelerator.prepare(net, optimizer, data if data is not None else loader())
    return accelerator, net, optimizer, data


def step(accelerator: Any, net: torch.nn.Module, optimizer: Any, batch: Any) -> float:
    inputs, labels = batch
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(inputs), labels)
    accelerator.backward(loss)
    optimizer.step()
    return loss.item()


def weights(net: torch.nn.Module) -> list[float]:
    return [v for p in net.parameters() for v in p.detach().flatten().tolist()]


@pytest.fixture(autouse=True)
def cpu_for_accelerate(monkeypatch, no_launcher_env, one_thread):
    """Accelerate on the CPU (ACCELERATE_USE_CPU), and braeburn deciding its own device; one torch thread."""
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")


def identical(script: Callable[[SimpleNamespace, Path], Observation], tmp_path: Path,
              **kwargs: Any) -> tuple[Observation, Observation]:
    """``script`` under Accelerate and braeburn: the same observation, and nothing more said by braeburn."""
    peer, ours, said = both(script, tmp_path)
    assert_identical(peer, ours, **kwargs)
    assert said == [], f"braeburn said more than Accelerate: {said}"
    return peer, ours


class Counter:
    """An object with state for ``register_for_checkpointing``: a count saved and loaded back."""

    def __init__(self):
        self.count = 0

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]
