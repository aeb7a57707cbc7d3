"""The peers: each conformance test runs once against the peer library (skipped when it is not installed) and
once against braeburn, and asserts the same observable behaviour."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest


def _reset_accelerate() -> None:
    try:
        from accelerate.state import AcceleratorState, GradientState
    except ImportError:
        return
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


@pytest.fixture(params=["accelerate", "braeburn"])
def acc_lib(request, monkeypatch, no_launcher_env, one_thread):
    """The Accelerate-like library under test: ``lib.Accelerator``, ``lib.find_executable_batch_size`` ..."""
    name = request.param
    module = pytest.importorskip(name)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    _reset_accelerate()
    yield SimpleNamespace(name=name, **{n: getattr(module, n) for n in (
        "Accelerator", "find_executable_batch_size", "skip_first_batches", "DistributedType",
        "DataLoaderConfiguration", "DistributedDataParallelKwargs")})
    _reset_accelerate()


@pytest.fixture(params=["transformers", "braeburn"])
def hf_lib(request, monkeypatch, no_launcher_env, one_thread):
    """The Trainer library under test: ``lib.Trainer``, ``lib.TrainingArguments`` ..."""
    name = request.param
    module = pytest.importorskip(name)
    pytest.importorskip("transformers")  # the tiny model and tokenizer are Transformers' on both sides
    if name == "transformers":
        pytest.importorskip("accelerate")  # Transformers' Trainer needs it
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    monkeypatch.setenv("WANDB_DISABLED", "true")
    _reset_accelerate()
    names = ("Trainer", "TrainingArguments", "TrainerCallback", "EarlyStoppingCallback", "HfArgumentParser",
             "EvalPrediction")
    yield SimpleNamespace(name=name, **{n: getattr(module, n) for n in names})
    _reset_accelerate()
