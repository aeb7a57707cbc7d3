"""ACCELERATE_* variables: what `accelerate launch` / `accelerate config` put in the environment
changes an Accelerator built with no arguments, with Accelerate 1.15's precedence, in braeburn as in Accelerate."""

from __future__ import annotations

import pytest

from ..conftest import _reset_accelerate


def _build(lib, monkeypatch, env: dict, **kwargs):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _reset_accelerate()
    return lib.Accelerator(**kwargs)


def test_mixed_precision_from_the_environment(acc_lib, monkeypatch):
    acc = _build(acc_lib, monkeypatch, {"ACCELERATE_MIXED_PRECISION": "bf16"})
    assert acc.mixed_precision == "bf16"


def test_an_explicit_mixed_precision_wins(acc_lib, monkeypatch):
    acc = _build(acc_lib, monkeypatch, {"ACCELERATE_MIXED_PRECISION": "bf16"}, mixed_precision="no")
    assert acc.mixed_precision == "no"


@pytest.mark.parametrize("argument", [None, 2])
def test_gradient_accumulation_steps_from_the_environment(acc_lib, monkeypatch, argument):
    kwargs = {} if argument is None else {"gradient_accumulation_steps": argument}
    acc = _build(acc_lib, monkeypatch, {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "3"}, **kwargs)
    assert acc.gradient_accumulation_steps == 3  # Accelerate: the variable replaces the argument


def test_a_plugin_wins_over_the_environment(acc_lib, monkeypatch):
    import importlib

    plugin_cls = importlib.import_module("accelerate.utils" if acc_lib.name == "accelerate" else "braeburn"
                                         ).GradientAccumulationPlugin
    acc = _build(acc_lib, monkeypatch, {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "3"},
                 gradient_accumulation_plugin=plugin_cls(num_steps=2))
    assert acc.gradient_accumulation_steps == 2


def test_use_cpu_from_the_environment(acc_lib, monkeypatch):
    acc = _build(acc_lib, monkeypatch, {"ACCELERATE_USE_CPU": "true"}, cpu=False)
    assert acc.device.type == "cpu"
