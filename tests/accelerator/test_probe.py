"""The probe hooks, driven by a hand-written training loop that calls them as the Accelerator does."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from braeburn.accelerator import probe
from braeburn.plan.envvars import (CHECK_DIR_VAR, CHECK_REFERENCE_VAR, CHECK_SIDE_VAR, CHECK_STEPS_VAR, CHECK_TARGET_VAR,
                              SEED_VAR)


def _loop(monkeypatch, directory, side, *, steps=3, reference=None, init_seed=0, scale=1.0, target=None,
          double_loss=False, max_steps=10):
    """A tiny training loop calling the three hooks; returns what the probe recorded."""
    monkeypatch.setenv(CHECK_DIR_VAR, str(directory))
    monkeypatch.setenv(CHECK_SIDE_VAR, side)
    monkeypatch.setenv(CHECK_STEPS_VAR, str(steps))
    monkeypatch.setenv(SEED_VAR, "7")
    for name, value in ((CHECK_REFERENCE_VAR, reference), (CHECK_TARGET_VAR, target)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, str(value))
    probe._reset()
    torch.manual_seed(init_seed)  # different initial weights per side unless the probe shares them
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    accelerator = SimpleNamespace(device=torch.device("cpu"), mixed_precision="no")
    probe.after_prepare(accelerator, [model])
    stopped = None
    try:
        for _ in range(max_steps):
            x = torch.randn(4, 8)
            out = model[3](model[2](model[1](model[0](x))) * scale)
            loss = out.pow(2).mean()
            if double_loss:
                loss = loss.double()
            loss.backward()
            probe.after_backward(accelerator, loss)
            probe.before_optimizer_step(accelerator, optimizer)
            optimizer.step()
            optimizer.zero_grad()
    except SystemExit as stop:
        stopped = stop
    finally:
        probe._reset()
    return probe.read_record(directory), stopped, model


def test_hooks_do_nothing_without_the_check_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(CHECK_DIR_VAR, raising=False)
    probe._reset()
    model = torch.nn.Linear(2, 1)
    probe.after_prepare(None, [model])
    probe.after_backward(None, torch.tensor(1.0))
    probe.before_optimizer_step(None, torch.optim.SGD(model.parameters(), lr=0.1))
    assert probe._current() is None and not list(tmp_path.iterdir())


def test_reference_run_records_steps_saves_weights_and_stops(monkeypatch, tmp_path):
    record, stopped, model = _loop(monkeypatch, tmp_path / "reference", "reference", steps=3)
    assert isinstance(stopped, probe.CheckStepsDone) and stopped.code == 0
    assert record["stopped_by_check"] and [s["step"] for s in record["steps"]] == [1, 2, 3]
    assert record["device"] == "cpu" and record["precision"] == "no"
    assert all(s["loss"] > 0 and s["time_s"] > 0 and s["parameters"] == 4 for s in record["steps"])
    assert record["dropout_disabled"] == ["2"] and model[2].p == 0.0
    saved = torch.load(tmp_path / "reference" / "grads_1.pt")
    assert set(saved) == {"0.weight", "0.bias", "3.weight", "3.bias"}
    assert (tmp_path / "reference" / "init_0.pt").exists()


def test_accelerator_run_starts_from_the_reference_weights_and_agrees(monkeypatch, tmp_path):
    reference, _, _ = _loop(monkeypatch, tmp_path / "reference", "reference", init_seed=1)
    record, _, _ = _loop(monkeypatch, tmp_path / "accelerator", "accelerator", init_seed=2,
                         reference=tmp_path / "reference")
    assert record["initial_weights"] == "loaded from the reference run"
    assert [s["loss"] for s in record["steps"]] == [s["loss"] for s in reference["steps"]]
    assert all(s["grad"]["max_rel"] == 0.0 and not s["grad"]["missing"] for s in record["steps"])


def test_a_perturbed_layer_shows_in_the_gradient_errors(monkeypatch, tmp_path):
    _loop(monkeypatch, tmp_path / "reference", "reference")
    record, _, _ = _loop(monkeypatch, tmp_path / "accelerator", "accelerator", reference=tmp_path / "reference",
                         scale=1.05)
    first = record["steps"][0]["grad"]
    assert first["max_rel"] > 0.01
    assert {name for name, _ in first["worst"]} == {"0.weight", "0.bias", "3.weight", "3.bias"}


def test_the_accelerator_run_steps_with_the_reference_gradients(monkeypatch, tmp_path):
    """Both runs keep the same weights, so each step measures its own kernels, not accumulated drift."""
    _, _, reference_model = _loop(monkeypatch, tmp_path / "reference", "reference", steps=4)
    record, _, model = _loop(monkeypatch, tmp_path / "accelerator", "accelerator", steps=4,
                             reference=tmp_path / "reference", scale=1.05)
    for ours, theirs in zip(model.parameters(), reference_model.parameters()):
        assert torch.equal(ours, theirs)
    errors = [step["grad"]["max_rel"] for step in record["steps"]]
    assert max(errors) < 2 * min(errors)  # the same 5% kernel error each step, not a growing one


def test_float64_use_is_recorded_when_the_target_lacks_float64(monkeypatch, tmp_path):
    record, _, _ = _loop(monkeypatch, tmp_path / "reference", "reference", target="mps", double_loss=True, steps=2)
    assert "loss is float64" in record["float64"]
    assert any("double" in op for op in record["float64_ops"]), record["float64_ops"]
    clean, _, _ = _loop(monkeypatch, tmp_path / "again", "reference", target="mps", steps=2)
    assert clean["float64"] == [] and clean["float64_ops"] == {}


def test_a_script_that_ends_early_still_leaves_its_steps(monkeypatch, tmp_path):
    monkeypatch.setenv(CHECK_DIR_VAR, str(tmp_path))
    monkeypatch.setenv(CHECK_STEPS_VAR, "10")
    probe._reset()
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.after_prepare(None, model)
    model(torch.ones(2, 3)).sum().backward()
    probe.after_backward(None, torch.tensor(2.0))
    probe.before_optimizer_step(None, optimizer)
    probe._current().write()  # what atexit does when the script returns
    probe._reset()
    record = probe.read_record(tmp_path)
    assert len(record["steps"]) == 1 and not record["stopped_by_check"] and record["steps"][0]["loss"] == 2.0


def test_a_short_last_accumulation_window_records_the_mean_of_its_micro_batches(monkeypatch, tmp_path):
    """7 micro-batches at accumulation 3: steps of 3, 3 and 1. The backward hook sees each loss divided by 3
    (as Accelerator.backward passes it); every step's loss is the mean of its own micro-batches' losses."""
    monkeypatch.setenv(CHECK_DIR_VAR, str(tmp_path))
    monkeypatch.setenv(CHECK_SIDE_VAR, "reference")
    monkeypatch.setenv(CHECK_STEPS_VAR, "10")
    probe._reset()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    accelerator = SimpleNamespace(device=torch.device("cpu"), mixed_precision="no", gradient_accumulation_steps=3)
    probe.after_prepare(accelerator, [model])
    losses = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    try:
        for index, value in enumerate(losses):
            loss = (model(torch.ones(1, 2)).sum() * 0 + value) / 3
            loss.backward()
            probe.after_backward(accelerator, loss)
            if index % 3 == 2 or index == len(losses) - 1:
                probe.before_optimizer_step(accelerator, optimizer)
        probe._current().write()
    finally:
        probe._reset()
    recorded = [step["loss"] for step in probe.read_record(tmp_path)["steps"]]
    assert recorded == pytest.approx([2.0, 5.0, 7.0])


def test_compare_gradients_measures_norm_wise_relative_error():
    ref = {"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([1.0, 0.0]), "gone": torch.zeros(1)}
    other = {"a": torch.tensor([3.0, 4.5]), "b": torch.tensor([float("nan"), 0.0]), "new": torch.zeros(1)}
    result = probe.compare_gradients(ref, other)
    assert result["worst"][0] == ["b", math.inf] and result["nonfinite"] == ["b"]
    assert dict(result["worst"])["a"] == pytest.approx(0.1)
    assert result["missing"] == ["gone", "new"]
    same = probe.compare_gradients(ref, dict(ref))
    assert same["max_rel"] == 0.0 and same["global_rel"] == 0.0


def test_relative_error():
    assert probe.relative_error(1.01, 1.0) == pytest.approx(0.01)
    assert probe.relative_error(float("nan"), 1.0) == math.inf
