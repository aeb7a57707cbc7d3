"""The facts braeburn states about a Mac, the warnings it gives there, and what it does with torch.compile and fp16
on MPS, each on a faked Mac whose torch behaves as torch 2.13 does (gradient checkpointing: test_mac_checkpointing.py).

The fakes follow torch's source: ``torch.backends.mps.is_macos_or_newer`` as ``MPSHooks::isOnMacOSorNewer``
answers (aten/src/ATen/mps/MPSHooks.mm: a few versions known, a warning and False for the rest), the MPS
generator as ``torch.utils.checkpoint`` treats it (never stashed: ``torch.mps`` has no ``_initialized``).
"""

from __future__ import annotations

import functools
import subprocess
import warnings

import pytest
import torch

from braeburn.devices.mps import MpsDevice
from tests.devices.test_mac import IgnoresFoundInfAdamW, fake_mac, overflowing_data  # noqa: F401  (fake_mac: a fixture)

GiB = 2**30


# -- the macOS version is the system's, read with no torch warning ------------------------------------------------
def torch_2_13_is_macos_or_newer(real: tuple[int, int]):
    """``torch.backends.mps.is_macos_or_newer`` of torch 2.13 on a Mac running ``real``: MPSHooks::isOnMacOSorNewer
    knows 13.x, 14.0, 14.4, 15.0 and 15.1; another minor of 14 or 15 warns and answers for 14.4 or 15.1, any other
    major (26 included) warns "Checking for unexpected MacOS X.Y returning false". The Python side caches answers
    (functools.lru_cache in torch/backends/mps/__init__.py), so each pair warns once."""

    @functools.lru_cache
    def is_macos_or_newer(major: int, minor: int) -> bool:
        if major == 13 or (major, minor) == (14, 0):
            return True
        if (major, minor) in ((14, 4), (15, 0), (15, 1)):
            return real >= (major, minor)
        if major in (14, 15):
            known = (14, 4) if major == 14 else (15, 1)
            warnings.warn(f"Can't check whether running on {major}.{minor}+ returning one for "
                          f"{known[0]}.{known[1]}+ (Triggered internally at aten/src/ATen/mps/MPSHooks.mm)")
            return real >= known
        warnings.warn(f"Checking for unexpected MacOS {major}.{minor} returning false (Triggered internally at "
                      "aten/src/ATen/mps/MPSHooks.mm:59.)")
        return False

    return is_macos_or_newer


def a_mac(monkeypatch, *, mac_ver: str, sw_vers: str, real: tuple[int, int]) -> list[list[str]]:
    """This process on an Apple-silicon Mac whose Python's ``platform.mac_ver()`` says ``mac_ver`` and whose
    ``sw_vers -productVersion`` says ``sw_vers`` (10.16 when SYSTEM_VERSION_COMPAT=1 is in its environment, as the
    real one does); torch is torch 2.13 built with MPS. Returns the commands run."""
    import platform

    from braeburn.devices import host as host_module

    commands: list[list[str]] = []

    def run(command, *args, env=None, **kwargs):
        commands.append(list(command))
        answers = {"sw_vers": "10.16" if (env or {}).get("SYSTEM_VERSION_COMPAT") == "1" else sw_vers,
                   "sysctl": "0"}
        return subprocess.CompletedProcess(command, 0, answers.get(command[0], "") + "\n", "")

    monkeypatch.setattr(host_module.subprocess, "run", run)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    monkeypatch.setattr(platform, "mac_ver", lambda: (mac_ver, ("", "", ""), "arm64"))
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", torch_2_13_is_macos_or_newer(real))
    return commands


@pytest.mark.parametrize("mac_ver, sw_vers, real", [
    ("16.0", "26.1", (26, 1)),   # a Python built against an SDK older than macOS 26
    ("10.16", "15.2", (15, 2)),  # a Python built against an SDK older than macOS 11 (SYSTEM_VERSION_COMPAT)
    ("14.6", "14.6", (14, 6)),
    ("26.1", "26.1", (26, 1)),
], ids=["26.1-old-sdk", "15.2-compat", "14.6", "26.1"])
def test_the_macos_version_is_the_systems_and_torch_warns_nothing(monkeypatch, clean_env, mac_ver, sw_vers, real):
    from braeburn.devices.host import gather_host_facts

    a_mac(monkeypatch, mac_ver=mac_ver, sw_vers=sw_vers, real=real)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        facts = gather_host_facts()
    assert facts.macos_version == real  # was (15, 19) on 26.1 and (14, 19) on 14.6
    assert [str(w.message) for w in caught if "MacOS" in str(w.message) or "running on" in str(w.message)] == []


def test_sw_vers_is_asked_past_a_users_system_version_compat(monkeypatch, clean_env):
    from braeburn.devices.host import gather_host_facts

    monkeypatch.setenv("SYSTEM_VERSION_COMPAT", "1")  # makes both platform.mac_ver() and sw_vers say 10.16
    commands = a_mac(monkeypatch, mac_ver="10.16", sw_vers="15.3", real=(15, 3))
    assert gather_host_facts().macos_version == (15, 3)
    assert ["sw_vers", "-productVersion"] in commands


def test_no_answer_but_the_compatibility_one_is_unknown_not_wrong(monkeypatch, clean_env):
    from braeburn.devices.host import gather_host_facts

    a_mac(monkeypatch, mac_ver="16.0", sw_vers="", real=(26, 0))
    facts = gather_host_facts()
    assert facts.macos_version == ()  # no macOS 16 exists; the macOS minimums are not applied to a guess
    assert MpsDevice().precision_support("bf16", facts.replace(torch_version=(2, 13, 0))).supported


def test_the_fake_torch_is_torch_2_13s_check():
    # The fake above against the versions the issue reports: probing it as braeburn once did gives 15.19 on
    # macOS 26.1 and 14.19 on 14.6, with about 43 warnings.
    def probe(real):
        at_least = torch_2_13_is_macos_or_newer(real)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            major = next(m for m in range(40, 10, -1) if at_least(m, 0))
            version = (major, max(n for n in range(0, 20) if n == 0 or at_least(major, n)))
        return version, len(caught)

    assert probe((26, 1)) == ((15, 19), 43)
    assert probe((14, 6)) == ((14, 19), 43)


# -- the driver-memory warning: continued growth at fixed shapes, or paging; never the ratio -----------------------
def readings(*rows: tuple[float, float, int], recommended: float = 24.0) -> list:
    """(driver GiB, allocated GiB, distinct shapes so far) per logging step, 10 steps apart."""
    from braeburn.devices.base import MemoryReading

    return [MemoryReading(10 * (i + 1), {"driver_bytes": int(d * GiB), "allocated_bytes": int(a * GiB),
                                         "recommended_bytes": int(recommended * GiB)}, shapes)
            for i, (d, a, shapes) in enumerate(rows)]


@pytest.mark.parametrize("rows, words", [
    # a healthy fixed-shape run: Metal's cached pools, 11.3 GB against 1.5 GB (a user's report), steady
    ([(11.3, 1.5, 1)] * 6, None),
    ([(3.0, 0.5, 1), (3.0, 0.5, 1), (3.1, 0.5, 1), (3.0, 0.5, 1)], None),
    # growth while the shapes stay the same: three rises in a row, 1.5 GiB in all
    ([(2.0, 0.5, 1), (2.5, 0.5, 1), (3.0, 0.5, 1), (3.5, 0.5, 1)], "grew at each of the last 3 logs (steps 10-40)"),
    # the live tensors grew with it: not the driver's memory
    ([(2.0, 0.5, 1), (3.0, 1.5, 1), (4.0, 2.5, 1), (5.0, 3.5, 1)], None),
    # growth that stopped
    ([(2.0, 0.5, 1), (2.5, 0.5, 1), (3.0, 0.5, 1), (3.0, 0.5, 1)], None),
    # growth that follows new shapes: each keeps its graph, within the working set
    ([(2.0, 0.5, 1), (2.5, 0.5, 2), (3.0, 0.5, 3), (3.5, 0.5, 4)], None),
    # ... and past it: macOS pages (72 GB against 6.7 GB, a user's report), and the shapes are named
    ([(20.0, 6.7, 3), (40.0, 6.7, 5), (67.0, 6.7, 9)], "above the recommended working set (24.0 GiB)"),
], ids=["pools", "steady", "growth", "tensors", "stopped", "new-shapes", "paging"])
def test_the_drift_warning_points_at_a_real_problem(rows, words):
    said = MpsDevice().memory_drift(readings(*rows))
    assert (said is None) == (words is None), said
    if words:
        assert words in said
    if words and "working set" in words:
        assert "9 distinct batch shapes" in said and "pad_to_buckets" in said
    from braeburn.devices.registry import get_kind

    assert get_kind("cpu").memory_drift(readings(*rows)) is None


def _train_with_driver_memory(tmp_path, monkeypatch, driver, steps: int = 8):
    from torch.utils.data import TensorDataset

    from braeburn import Trainer, TrainingConfig

    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: int(1.5 * GiB))
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", driver)
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=steps, per_device_train_batch_size=4, logging_steps=2,
                            save_strategy="no", mixed_precision="no", disable_tqdm=True)
    data = TensorDataset(torch.rand(64, 4), torch.rand(64, 1))  # one shape
    trainer = Trainer(torch.nn.Linear(4, 1), config, train_dataset=data, loss_fn=torch.nn.functional.mse_loss)
    trainer.train()
    return trainer


def test_a_healthy_fixed_shape_run_on_a_mac_gets_no_memory_warning(fake_mac, monkeypatch, tmp_path, capsys):
    _train_with_driver_memory(tmp_path, monkeypatch, lambda: int(11.3 * GiB))  # Metal's pools: 7.5x the tensors
    out = capsys.readouterr().out
    assert "warning" not in out and "driver 11.3 GiB" in out  # the figure is still shown


def test_growth_at_fixed_shapes_is_warned_once_with_its_steps(fake_mac, monkeypatch, tmp_path, capsys):
    reads = iter(range(4, 10**6))
    _train_with_driver_memory(tmp_path, monkeypatch, lambda: next(reads) * GiB, steps=12)  # 1 GiB more per read
    out = capsys.readouterr().out
    assert out.count("warning") == 1
    assert "warning at step 8: the MPS driver's memory beyond live tensors grew at each of the last 3 logs " \
           "(steps 2-8)" in out


# -- fp16 on MPS: the grad scaler's own found_inf decides the skip, with no sweep over the gradients ---------------
def test_fp16_overflow_skip_on_a_mac_reads_the_scalers_found_inf_not_every_gradient(fake_mac, monkeypatch):
    from braeburn import Accelerator

    swept = []
    isfinite = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: swept.append(t.shape) or isfinite(t))
    accelerator = Accelerator(mixed_precision="fp16")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    optimizer = IgnoresFoundInfAdamW(model.parameters(), lr=0.1, fused=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    start = [p.detach().clone() for p in model.parameters()]
    x, y = overflowing_data().tensors
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped
    assert all(torch.equal(p.detach(), s) for p, s in zip(model.parameters(), start))
    optimizer.zero_grad()
    accelerator.backward(model(x).mean() * 1e-6)
    accelerator.clip_grad_norm_(model.parameters(), 1.0)  # unscaled already: the step must not unscale twice
    optimizer.step()
    assert not accelerator.optimizer_step_was_skipped
    assert not all(torch.equal(p.detach(), s) for p, s in zip(model.parameters(), start))
    assert swept == []  # was one isfinite per gradient (4 here), at every step
    accelerator.end_training()


def _always_overflowing_step(policy, weight, optimizer) -> bool:
    with policy.autocast():
        loss = weight.sqrt().sum()  # d sqrt(w)/dw at w = 0 is inf: every step's gradients overflow, at any scale
    policy.backward(loss)
    applied = policy.step(optimizer)
    optimizer.zero_grad(set_to_none=True)
    return applied


@pytest.mark.parametrize("fused_honours_scaler", [True, False], ids=["kernel-skips", "kernel-ignores-found-inf"])
def test_fp16_whose_every_step_overflows_applies_none_and_stops_when_the_scale_reaches_0(fused_honours_scaler):
    # The scale halves on each overflow, from 65536 down to 0 after about 165 steps; at 0, update() leaves it at
    # 0 * 0.5 == 0, which once read as "not lowered, so applied": the kernel-ignores path then stepped the fused
    # AdamW with NaN gradients (weights NaN), and both paths reported the step applied.
    from braeburn.plan.precision import Fp16OverflowError, ScaledFp16Policy

    weight = torch.nn.Parameter(torch.zeros(4))
    # CPU's fused AdamW honours found_inf; IgnoresFoundInfAdamW ignores it, as MPS's fused kernel does
    optimizer = (torch.optim.AdamW if fused_honours_scaler else IgnoresFoundInfAdamW)([weight], lr=0.1, fused=True)
    policy = ScaledFp16Policy(torch.device("cpu"), fused_honours_scaler=fused_honours_scaler)
    applied = []
    with pytest.raises(Fp16OverflowError, match=r"scale is 0\.0, with which no step can be applied.*overflow "
                                                r"float16 on every step\. Train with mixed_precision='bf16'.*'no'"):
        for _ in range(400):
            applied.append(_always_overflowing_step(policy, weight, optimizer))
    assert 150 < len(applied) < 200 and not any(applied)
    assert torch.equal(weight.detach(), torch.zeros(4))  # never stepped, never NaN
    with pytest.raises(Fp16OverflowError):  # and the next step is refused before the optimizer sees anything
        _always_overflowing_step(policy, weight, optimizer)
    assert torch.equal(weight.detach(), torch.zeros(4))


def test_fp16_on_a_mac_never_advances_the_schedule_on_an_overflow_step_and_stops_at_scale_0(fake_mac):
    from braeburn import Accelerator
    from braeburn.plan.precision import Fp16OverflowError

    accelerator = Accelerator(mixed_precision="fp16")
    weight = torch.nn.Parameter(torch.zeros(4))
    model = torch.nn.Module()
    model.weight = weight
    optimizer = IgnoresFoundInfAdamW(model.parameters(), lr=0.1, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    skipped = []
    with pytest.raises(Fp16OverflowError, match="mixed_precision='bf16'"):
        for _ in range(400):
            with accelerator.autocast():
                loss = model.weight.sqrt().sum()
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            skipped.append(accelerator.optimizer_step_was_skipped)
    assert len(skipped) > 150 and all(skipped)
    assert scheduler.scheduler.last_epoch == 0  # the schedule never moved on a skipped step
    assert torch.equal(model.weight.detach(), torch.zeros(4))  # was NaN from the step at scale 0
    accelerator.end_training()


# -- compile=True on MPS says why in one line; compiled steps that measure slower go back to eager, on any device ---
def test_compile_true_on_a_mac_warns_in_one_line_with_the_measured_reason(fake_mac, monkeypatch):
    from braeburn import Accelerator
    from braeburn.accelerator import core as accelerator_module
    from braeburn.plan.rules import RunOptions, make_plan
    from tests.conftest import APPLE_M

    (note,) = make_plan(RunOptions(compile=True), APPLE_M).notes  # torch 2.13: was no word at all
    assert "4.5-9x slower than eager on torch 2.13 (pytorch#192551" in note and "\n" not in note
    assert "compile=False" in note
    monkeypatch.setattr(accelerator_module, "_said_once", set())  # said once per process: maybe said already
    with pytest.warns(UserWarning, match=r"braeburn: torch.compile on MPS trained 4.5-9x slower"):
        Accelerator(compile=True).end_training()
    assert make_plan(RunOptions(), APPLE_M).compile is False  # "auto" stays eager there, with no warning


class StepCost(torch.nn.Module):
    """A linear layer whose eager and (fake) compiled forwards cost what a test says."""

    compiled_now = False

    def __init__(self, eager_seconds: float, compiled_seconds: float):
        super().__init__()
        self.linear, self.costs = torch.nn.Linear(4, 1), (eager_seconds, compiled_seconds)
        self.compiled_calls: list[bool] = []  # per forward: whether the (fake) compiled forward ran it

    def forward(self, x):
        import time

        self.compiled_calls.append(StepCost.compiled_now)
        time.sleep(self.costs[StepCost.compiled_now])
        return self.linear(x)


def fake_torch_compile(monkeypatch) -> None:
    """torch.compile returning the function itself, run with StepCost.compiled_now set: no Dynamo, known costs."""
    def compile(function, **kwargs):
        def compiled(*args, **kw):
            StepCost.compiled_now = True
            try:
                return function(*args, **kw)
            finally:
                StepCost.compiled_now = False
        return compiled

    monkeypatch.setattr(torch, "compile", compile)


def _train_compiled(tmp_path, monkeypatch, eager_seconds: float, compiled_seconds: float):
    from torch.utils.data import TensorDataset

    from braeburn import Trainer, TrainingConfig

    fake_torch_compile(monkeypatch)
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=30, per_device_train_batch_size=8, logging_steps=10,
                            save_strategy="no", mixed_precision="no", disable_tqdm=True, compile="true")
    model = StepCost(eager_seconds, compiled_seconds)
    trainer = Trainer(model, config, train_dataset=TensorDataset(torch.rand(64, 4), torch.rand(64, 1)),
                      loss_fn=torch.nn.functional.mse_loss)
    trainer.train()
    return trainer


@pytest.mark.usefixtures("cpu_only", "one_thread")
def test_compiled_steps_that_measure_slower_go_back_to_eager_with_one_line(tmp_path, monkeypatch, capsys):
    trainer = _train_compiled(tmp_path, monkeypatch, eager_seconds=0.0, compiled_seconds=0.02)
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "compile off again" in line]
    assert len(lines) == 1 and lines[0].startswith("braeburn: compile off again at step 25: compiled steps took ")
    calls = trainer.model.compiled_calls
    assert calls == [False] * 13 + [True] * 12 + [False] * 5  # compiled from step 14, timed over 16-25, then eager
    assert trainer._compile_window.back_to_eager_at == 25
    assert "back to eager at step 25: the compiled steps were slower" in out


@pytest.mark.usefixtures("cpu_only", "one_thread")
def test_compiled_steps_that_measure_faster_stay_compiled(tmp_path, monkeypatch, capsys):
    trainer = _train_compiled(tmp_path, monkeypatch, eager_seconds=0.02, compiled_seconds=0.0)
    assert "compile off again" not in capsys.readouterr().out
    assert trainer.model.compiled_calls == [False] * 13 + [True] * 17
    assert trainer._compile_window.back_to_eager_at is None


@pytest.mark.parametrize("eager, compiled, slower", [
    ([1.0] * 10, [1.5] * 10, True),
    ([1.0] * 10, [1.05] * 10, False),                # within the margin
    ([1.0] * 10, [1.5] * 9 + [0.9], False),          # one compiled step as fast as eager: not beyond the noise
    ([1.0] * 9 + [5.0], [1.2] * 10, True),           # one slow eager step moves no median
    ([], [2.0] * 10, False),                          # eager never timed: nothing to compare
])
def test_measurably_slower_rule(eager, compiled, slower):
    from braeburn.plan.compile_policy import measurably_slower

    assert measurably_slower(eager, compiled) is slower


# -- the lane: non-zero when it could test nothing, and the facts braeburn read beside the system's ---------------
def load_lane(monkeypatch):
    import importlib.util
    import os
    from pathlib import Path

    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # the lane puts src/ in front at import
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "mps_lane.py"
    spec = importlib.util.spec_from_file_location("mps_lane_under_test", path)
    lane = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lane)
    return lane


def test_the_lane_on_a_rosetta_python_exits_non_zero_and_shows_each_fact_beside_the_systems(fake_host, monkeypatch):
    lane = load_lane(monkeypatch)
    fake_host("apple", machine="x86_64", rosetta=True, mps_built=False, mps_available=False, macos_version=(15, 1))
    answers = {("sw_vers", "-productVersion"): "15.1", ("sysctl", "-n", "hw.optional.arm64"): "1",
               ("sysctl", "-n", "sysctl.proc_translated"): "1"}
    monkeypatch.setattr(lane.subprocess, "run", lambda command, *a, **k: subprocess.CompletedProcess(
        command, 0, answers.get(tuple(command), "") + "\n", ""))
    results = lane.Results()
    results.rows = [(name, "skipped", "Skipped: needs 1 usable mps device(s); this machine has 0 (this Python runs "
                     "under Rosetta)") for name in ("test_mps_is_chosen_by_default", "test_a_float64_model_trains")]
    assert lane.lane_exit(0, results) == lane.NOTHING_TESTED != 0  # was 0: a lane that tested nothing "passed"
    text = lane.report(results, 0)
    assert f"- NOTHING WAS TESTED: every claim was skipped (the reasons are below); exit {lane.NOTHING_TESTED}" in text
    assert "| macOS version | 15.1 | `sw_vers -productVersion`: 15.1 |" in text
    assert "| Apple silicon | yes | `sysctl -n hw.optional.arm64`: 1 |" in text
    assert "| Rosetta (this Python translated) | yes | `sysctl -n sysctl.proc_translated`: 1 |" in text
    results.rows.append(("test_mps_is_chosen_by_default", "passed", ""))
    assert lane.lane_exit(0, results) == 0 and "NOTHING WAS TESTED" not in lane.report(results, 0)
    assert lane.lane_exit(1, results) == 1  # a failed claim keeps pytest's status
