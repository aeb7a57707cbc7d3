"""benchmarks/scaling.py: what its timed window holds, and which single-process run each efficiency divides by."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import scaling  # noqa: E402


@pytest.mark.slow  # a compiled run as a subprocess (9 s)
def test_a_compiled_run_is_timed_only_after_its_compile_window_has_finished(tmp_path):
    """One CPU worker (tiny GPT-2, torch.compile's eager backend so the test is quick) asked to time steps 2..6:
    the compile is decided at step 13 and the window times compiled steps to 25, so the timed steps come after."""
    result = tmp_path / "row.json"
    env = dict(os.environ, BRAEBURN_DEVICE="cpu", OMP_NUM_THREADS="1", SCALING_TMP=str(tmp_path),
               PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scaling.py"), "--worker", "--tiny",
                           "--framework", "braeburn-ddp[compile=true,torch_compile_backend=eager]",
                           "--workload", "gpt2-small", "--result", str(result), "--warmup", "2", "--steps", "6"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(result.read_text())
    assert row["error"] is None and math.isfinite(row["samples_per_s"])
    compile_ = row["compile"]
    assert compile_["compiled"] is True  # (whether it then stays compiled depends on the measured speeds)
    first, last = row["timed_steps"]
    assert last - first + 1 == 4  # as many steps as asked (6 - 2)
    # the decision, the compiling step after it and the window's own timed (synced) steps all precede the window
    assert compile_["decided_by_step"] + 1 < compile_["settled_by_step"] < first
    assert first > scaling.compile_settle_steps()


def test_an_eager_run_is_timed_from_the_warmup_step_and_a_run_not_ready_from_the_step_it_becomes_ready():
    eager = scaling.Clock(warmup=3, length=4)
    for step in range(1, 10):
        eager.step_done(step)
    assert (eager.first, eager.last, eager.done) == (3, 7, True)
    assert len(eager.step_ends) == 5  # the start mark and the ends of steps 4..7: four step times

    late = scaling.Clock(warmup=3, length=4)
    for step in range(1, 20):
        late.step_done(step, ready=step >= 11)
    assert (late.first, late.last, late.done) == (11, 15, True)
    assert late.step_ms()["median"] >= 0

    never = scaling.Clock(warmup=3, length=4)
    for step in range(1, 20):
        never.step_done(step, ready=False)
    assert never.first is None and not never.done


def test_ddp_and_fsdp_variants_share_one_single_process_run_per_round_and_config():
    assert scaling.single_process_spec("braeburn-fsdp[reshard_after_forward=False,compile=true]") == \
        "braeburn-ddp[compile=true]"
    assert scaling.single_process_spec("braeburn-ddp[bucket_cap_mb=100]") == "braeburn-ddp"
    assert scaling.single_process_spec("accelerate") == "accelerate"
    specs = ["braeburn-ddp", "braeburn-fsdp", "braeburn-fsdp[reshard_after_forward=False,prefetch=2]", "accelerate"]
    order = scaling.jobs(specs, ["bert-base"], 4, rounds=2)
    singles = [(round_, spec) for round_, _, spec, processes in order if processes == 1]
    assert singles == [(0, "braeburn-ddp"), (0, "accelerate"), (1, "braeburn-ddp"), (1, "accelerate")]
    assert [spec for round_, _, spec, processes in order if processes == 4 and round_ == 1] == specs
    assert len(order) == 2 * (2 + 4)


def _row(spec, processes, round_, rate):
    return {"framework": spec, "workload": "bert-base", "processes": processes, "round": round_,
            "samples_per_s": rate, "ranks": [], "error": None}


def test_fsdp_efficiency_divides_by_the_shared_single_process_rate_and_compares_with_ddp_in_the_same_round():
    rows = [_row("braeburn-ddp", 1, 0, 100.0), _row("braeburn-ddp", 4, 0, 360.0), _row("braeburn-fsdp", 4, 0, 300.0),
            _row("braeburn-ddp", 1, 1, 50.0), _row("braeburn-ddp", 4, 1, 180.0), _row("braeburn-fsdp", 4, 1, 171.0)]
    table = {line.split(" | ")[1]: line.split(" | ") for line in scaling.markdown(rows, 4).splitlines()[2:]}
    assert table["braeburn-ddp"][4:6] == ["90.0% (90.0%-90.0%)", "100.0% (100.0%-100.0%)"]
    # FSDP: 300/400 and 171/200; against DDP in the same round: 300/360 and 171/180
    assert table["braeburn-fsdp"][2] == "75 (50-100)"
    assert table["braeburn-fsdp"][4:6] == ["80.2% (75.0%-85.5%)", "89.2% (83.3%-95.0%)"]


def test_each_rank_counts_the_garbage_collections_inside_the_timed_steps():
    import gc
    import time

    meter = scaling.GcMeter()
    try:
        before = time.perf_counter()
        gc.collect()  # before the window: not counted
        start = time.perf_counter()
        gc.collect(0)
        middle = time.perf_counter()
        gc.collect()  # a full collection in the second step
        end = time.perf_counter()
    finally:
        gc.callbacks.remove(meter._callback)
    summary = meter.summary([start, middle, end])
    assert before < start and summary["by_generation"]["0"]["count"] >= 1
    assert summary["by_generation"]["2"]["count"] == 1  # the one before the window is left out
    steps = summary["slowest_steps"]
    assert len(steps) == 2 and all(step["gc_ms"] <= step["ms"] for step in steps)
    assert steps[0]["gc_ms"] > 0  # the full collection made the slowest step, and is counted in it
    assert scaling.GcMeter.summary(meter, [start]) is None  # no timed step


def test_gc_freeze_and_pinning_are_worker_options_that_the_single_process_run_shares():
    assert scaling.single_process_spec("braeburn-fsdp[unit_groups=0,gc=freeze,pin=4]") == \
        "braeburn-ddp[gc=freeze,pin=4]"  # unit_groups is FSDP's wrap's: one process wraps nothing
    assert scaling.single_process_spec("braeburn-fsdp[fsdp_units=block,freeze_heap=False]") == \
        "braeburn-ddp[freeze_heap=False]"  # so is fsdp_units (which --strategy ddp refuses)
    clock = scaling.Clock(warmup=1, length=2)
    clock.freeze_gc = True
    import gc

    gc.unfreeze()
    try:
        clock.step_done(1)
        assert gc.get_freeze_count() > 0 and not clock.freeze_gc  # frozen once, at the first step's end
    finally:
        gc.unfreeze()


def test_pinning_gives_each_rank_its_own_cores():
    cpus = sorted(os.sched_getaffinity(0))
    try:
        mine = scaling.pin_cores(0, 1)
        assert len(mine) == 1 and set(os.sched_getaffinity(0)) == set(mine)
        assert scaling.pin_cores(len(cpus), 1) == []  # more ranks than cores: left as it is
    finally:
        os.sched_setaffinity(0, cpus)


def test_no_single_skips_the_one_process_runs():
    assert scaling.jobs(["braeburn-ddp", "braeburn-fsdp"], ["gpt2-small"], 4, 2, single=False) == [
        (0, "gpt2-small", "braeburn-ddp", 4), (0, "gpt2-small", "braeburn-fsdp", 4),
        (1, "gpt2-small", "braeburn-ddp", 4), (1, "gpt2-small", "braeburn-fsdp", 4)]
    assert (0, "gpt2-small", "braeburn-ddp", 1) in scaling.jobs(["braeburn-fsdp"], ["gpt2-small"], 4, 1)
