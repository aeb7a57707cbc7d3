"""benchmarks/cpu_overhead.py's logic with tiny settings: the paired rounds, their summary and the step breakdown
(the figures it measures need a quiet machine and thousands of steps; these check what it computes from them)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_thread", "cpu_only")


def _module(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import cpu_overhead

    return cpu_overhead


def test_the_summary_gives_each_rounds_ratio_and_the_microseconds_braeburn_adds(monkeypatch):
    bench = _module(monkeypatch)
    rows = [{"bare": 500.0, "braeburn": 550.0}, {"bare": 600.0, "braeburn": 600.0}, {"bare": 450.0, "braeburn": 500.0}]
    summary = bench.summarize(rows)
    assert summary["ratio"] == {"median": 500 / 550, "min": 0.9, "max": 1.0}
    assert summary["added_us"] == {"median": 50.0, "min": 0.0, "max": 50.0}
    assert summary["us_per_step"]["bare"]["median"] == 500.0
    assert summary["fastest"] == {"ratio": 450 / 500, "added_us": 50.0}  # each runner's fastest round
    text = bench.report(summary, argparse.Namespace(measure="loop", steps=10, processes=1, clock="cpu"))
    assert "median 0.909 (rounds 0.900-1.000)" in text and "adds 50.0 us a step" in text
    assert "goal: >= 0.9; met in every round" in text and "fastest rounds (the least disturbed): 0.900" in text
    rows[1]["braeburn"] = 700.0  # one round below 0.9, the median above: the text says they straddle it
    assert "straddle 0.9 (median at or above it)" in bench.report(bench.summarize(rows), argparse.Namespace(
        measure="loop", steps=10, processes=1, clock="cpu"))


def test_the_rounds_turn_the_runners_order_so_each_runs_first_in_turn(monkeypatch):
    bench = _module(monkeypatch)
    order = []
    fake = {name: (lambda steps, name=name: order.append(name) or 0.001) for name in ("bare", "braeburn")}
    monkeypatch.setattr(bench, "runners", lambda measure, peers: fake)
    rows = bench.measure_rounds(10, 4, "loop", first=1)
    assert order == ["braeburn", "bare", "bare", "braeburn", "braeburn", "bare", "bare", "braeburn"]
    assert rows == [{"bare": 100.0, "braeburn": 100.0}] * 4 and list(rows[0]) == ["braeburn", "bare"]


def test_the_loop_alone_and_the_marginal_measure_time_a_tiny_run(monkeypatch):
    bench = _module(monkeypatch)
    rows = bench.measure_rounds(3, 2, "loop") + bench.measure_rounds(2, 1, "marginal")
    assert all(set(row) == {"bare", "braeburn"} for row in rows)
    assert all(row["bare"] > 0 and row["braeburn"] > 0 for row in rows[:2])  # the loop's own time, never 0


def test_the_breakdown_names_braeburns_functions_in_the_loop(monkeypatch):
    bench = _module(monkeypatch)
    modules, functions = bench.breakdown(3, added_us=60.0)
    where = {row[0]: row for row in modules}
    assert where["braeburn/trainer/loop.py"][1] >= 1  # _micro_batch, _optimizer_step ... a call or more a step
    own = [row for row in modules if row[0].startswith("braeburn/")]
    assert sum(row[3] for row in own) == pytest.approx(60.0)  # the measured microseconds, shared out
    assert all(row[3] is None for row in modules if not row[0].startswith("braeburn/"))
    assert any("(_optimizer_step)" in row[0] for row in functions)
    assert not any("cpu_overhead.py" in row[0] for row in modules + functions)  # the benchmark's frames left out
    text = bench.breakdown_report(modules, functions, 3)
    assert "| braeburn/trainer/loop.py |" in text and "bytecodes a step" in text
