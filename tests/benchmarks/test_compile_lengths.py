"""benchmarks/compile_lengths.py's plan of runs and its table, without running them (the runs need a GPU's time)."""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import compile_lengths

    return compile_lengths


def test_the_plan_runs_each_way_once_and_auto_at_each_length(monkeypatch):
    lengths = _module(monkeypatch)
    args = argparse.Namespace(steps=7500, marks=[500, 3000], eager_stop=5000)
    runs = lengths.plan(args)
    assert [run[4] for run in runs] == ["eager", "regional", "whole", "auto-500", "auto-3000", "auto-7500-decision"]
    eager = runs[0]
    assert eager[:4] == ("false", 7500, [500, 3000, 5000], 5000)  # stopped at 5,000, timed there too
    assert runs[2][:4] == ("true", 7500, [500, 3000, 7500], 0)
    assert runs[-1][:4] == ("auto", 7500, [100], 100)  # decided at step 13, stopped soon after


def test_the_table_gives_each_ways_times_and_autos_choice(monkeypatch):
    lengths = _module(monkeypatch)
    args = argparse.Namespace(steps=7500, marks=[500, 3000], eager_stop=5000)
    results = [
        {"label": "eager", "compile": "false", "max_steps": 7500, "process_seconds": 231.2,
         "marks": {500: 34.9, 3000: 140.2, 5000: 225.8}, "compile_stats": {"reason": "compile=False, as asked"}},
        {"label": "whole", "compile": "true", "max_steps": 7500, "process_seconds": 230.1,
         "marks": {500: 51.9, 3000: 114.9, 7500: 222.8}, "compile_stats": {"reason": "compile=True, as asked"}},
        {"label": "auto-3000", "compile": "auto", "max_steps": 3000, "process_seconds": 150.7, "marks": {3000: 144.5},
         "compile_stats": {"compiled": True, "regional": False, "reason": "auto: compiling"}},
    ]
    text = lengths.table(results, args)
    assert "| eager (compile=false) | compile=False, as asked | 34.9 | 140.2 | > 225.8 (stopped at 5000) | 231.2 |" in text
    assert "| whole (compile=true) | compile=True, as asked | 51.9 | 114.9 | 222.8 | 230.1 |" in text
    assert "| 3000 | whole: auto: compiling | 144.5 | 150.7 |" in text
