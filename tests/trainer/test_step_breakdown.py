"""Where step time goes on several processes (braeburn.trainer.step_breakdown): the interval arithmetic from
tables, the trace reading for a GPU and for the CPU, the summary's wording, and a real 2-process job whose
summary and metrics.jsonl carry the measured shares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from braeburn.trainer import TrainingConfig
from braeburn.trainer.step_breakdown import Breakdown, rescale, split, summary_line, trace_intervals, union

JOB = Path(__file__).with_name("step_breakdown_job.py")


@pytest.mark.parametrize("intervals, merged", [
    ([], []),
    ([(0, 1), (2, 3)], [(0, 1), (2, 3)]),
    ([(2, 3), (0, 1), (0.5, 2.5)], [(0, 3)]),
    ([(0, 1), (1, 2), (5, 5)], [(0, 2)]),  # touching intervals join; empty ones vanish
])
def test_union(intervals, merged):
    assert union(intervals) == merged


@pytest.mark.parametrize("compute, comm, window, expected", [
    # compute 0-6, an all-reduce 4-8 (2 s under compute, 2 s alone), nothing 8-10
    ([(0, 6)], [(4, 8)], (0, 10), (0.6, 0.2, 0.2, 0.2)),
    # communication fully hidden under compute
    ([(0, 4), (5, 10)], [(1, 3)], (0, 10), (0.9, 0.0, 0.2, 0.1)),
    # no communication at all, the device idle half the time
    ([(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)], [], (0, 10), (0.5, 0.0, 0.0, 0.5)),
    # overlapping collectives count once
    ([], [(0, 5), (2, 7)], (0, 10), (0.0, 0.7, 0.0, 0.3)),
])
def test_split_shares_add_up(compute, comm, window, expected):
    got = split(compute, comm, steps=5, on_device=True, window=window)
    assert (got.compute, got.comm_waiting, got.comm_hidden, got.idle) == pytest.approx(expected)
    assert got.compute + got.comm_waiting + got.idle == pytest.approx(1.0)
    assert got.wall_s == pytest.approx(window[1] - window[0])


def test_split_without_a_window_spans_the_intervals():
    got = split([(2, 4)], [(4, 6)], steps=1, on_device=False)
    assert got.wall_s == 4 and got.compute == 0.5 and got.comm_waiting == 0.5 and got.idle == 0


def _event(name, cat, ts, dur, tid=1):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid}


def test_gpu_trace_splits_nccl_kernels_from_compute():
    events = [_event("aten::mm", "cpu_op", 0, 10),  # the host launches from t=0
              _event("sm90_gemm", "kernel", 5, 40),
              _event("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 30, 30),  # 15 us alone
              _event("Memcpy HtoD", "gpu_memcpy", 70, 10),
              _event("cudaLaunchKernel", "cuda_runtime", 0, 200),  # runtime calls do not widen the window
              {"ph": "M", "name": "process_name"}]
    compute, comm, window = trace_intervals(events, "nccl", main_thread=1)
    got = split(compute, comm, steps=1, on_device=True, window=window)
    assert window == pytest.approx((0, 80e-6))
    assert (got.compute, got.comm_waiting, got.comm_hidden) == pytest.approx((50 / 80, 15 / 80, 15 / 80))
    assert got.idle == pytest.approx(15 / 80)


def test_cpu_trace_counts_the_training_thread_and_gloo():
    events = [_event("aten::addmm", "cpu_op", 0, 50, tid=7),
              _event("aten::addmm", "cpu_op", 0, 90, tid=99),  # another thread's op is not the step's compute
              _event("gloo:all_reduce", "user_annotation", 40, 40, tid=99),
              _event("Optimizer.step", "user_annotation", 90, 10, tid=7)]
    compute, comm, window = trace_intervals(events, None, main_thread=7)
    got = split(compute, comm, steps=1, on_device=False, window=window)
    assert window == pytest.approx((0, 100e-6))
    assert got.comm_waiting == pytest.approx(0.3) and got.comm_hidden == pytest.approx(0.1)


def _part(compute, waiting, hidden, idle, on_device=True):
    return Breakdown(5, 1.0, compute, waiting, hidden, idle, on_device)


def test_summary_line_names_the_limit_and_the_range_over_processes():
    host_bound = summary_line([_part(0.5, 0.05, 0.1, 0.45), _part(0.55, 0.05, 0.1, 0.40)], 2, 95)
    assert "compute 50%-55%, waiting on communication 5% (another 10% hidden under compute)" in host_bound
    assert "GPU idle waiting for the host 40%-45%: steps 95-99 profiled on 2 of 2 processes" in host_bound
    assert "the host is the limit" in host_bound
    comm_bound = summary_line([_part(0.6, 0.3, 0.1, 0.1, on_device=False)] * 2, 2, 20)
    assert "outside ops 10%" in comm_bound and "communication is the limit" in comm_bound
    assert "limit" not in summary_line([_part(0.9, 0.05, 0.2, 0.05)] * 2, 2, 20)


def test_summary_says_why_nothing_was_sampled():
    assert "fewer than 26 steps" in summary_line([], 2, None)
    assert "stopped before step 24" in summary_line([None, None], 2, 20)


def test_config_refuses_an_unknown_step_breakdown():
    errors = TrainingConfig(output_dir="out", step_breakdown="sometimes").validate()
    assert [e.option for e in errors] == ["step_breakdown"] and "auto, true, false" in errors[0].message
    assert TrainingConfig(output_dir="out", step_breakdown=True).validate() == []


@pytest.mark.slow  # ~10 s on 2 CPU cores: one 2-process job
def test_two_processes_report_measured_shares(tmp_path):
    two_gpus = torch.accelerator.is_available() and torch.accelerator.device_count() >= 2
    command = [sys.executable, "-m", "braeburn.cli.main", "launch", *([] if two_gpus else ["--cpu"]),
               "--num-processes", "2", str(JOB), str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAEBURN_", "TORCHELASTIC_"))}
    done = subprocess.run(command, env=dict(env, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("  step time"))
    assert "steps 25-29 profiled on 2 of 2 processes" in line, line
    assert "USDT" not in done.stdout + done.stderr  # Kineto's profiler_start/stop lines
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    record = next(r["run"] for r in reversed(records) if "run" in r)["step_breakdown"]
    assert record["first_step"] == 25 and len(record["processes"]) == 2
    for part in record["processes"]:
        assert part["steps"] == 5 and part["wall_s"] > 0
        assert part["compute"] + part["comm_waiting"] + part["idle"] == pytest.approx(1.0, abs=1e-6)
        assert part["comm_waiting"] + part["comm_hidden"] > 0  # the gradients' all-reduce was seen
        assert part["on_device"] is two_gpus


def test_rescale_takes_the_step_length_without_the_profiler():
    profiled = Breakdown(5, 0.5, compute=0.2, comm_waiting=0.1, comm_hidden=0.05, idle=0.7, on_device=True)
    got = rescale(profiled, step_seconds=0.05)  # unprofiled: 5 x 50 ms = 0.25 s, half the profiled wall time
    assert (got.compute, got.comm_waiting, got.comm_hidden, got.idle) == pytest.approx((0.4, 0.2, 0.1, 0.4))
    assert got.step_s == 0.05
    assert rescale(profiled, step_seconds=1.0).compute == pytest.approx(0.02)  # slower unprofiled: less busy
    assert rescale(profiled, step_seconds=0.01).idle == pytest.approx(0)  # never more busy time than the step has


def test_a_late_host_is_named_even_when_the_other_process_waits_in_the_collective():
    late, waiting = _part(0.47, 0.22, 0.07, 0.31), _part(0.42, 0.58, 0.25, 0.0)
    line = summary_line([late, waiting], 2, 82)
    assert "the host is the limit" in line and "communication is the limit" not in line


def test_a_device_the_profiler_cannot_see_is_not_sampled_and_the_summary_says_why():
    from types import SimpleNamespace

    from braeburn.devices.registry import get_kind
    from braeburn.trainer.state import TrainerState
    from braeburn.trainer.step_breakdown import StepBreakdownCallback

    callback = StepBreakdownCallback("true")
    trainer = SimpleNamespace(accelerator=SimpleNamespace(num_processes=1, plan=SimpleNamespace(device=get_kind("mps"))))
    callback.on_train_begin(trainer, TrainerState(max_steps=100))
    assert callback.first_step is None
    assert "profiler records no mps kernels" in callback.summary(1)[0]
    assert StepBreakdownCallback("auto").summary(1) == []  # auto on one process: no line at all
