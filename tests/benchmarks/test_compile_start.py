"""benchmarks/compile_start.py: its order of runs and its table without running them, and one tiny run of its child
on the CPU (the CPU made to compile by default, so that compile="auto" takes a GPU's path to its decision)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import compile_start

    return compile_start


def test_each_mode_leads_one_round(monkeypatch):
    start = _module(monkeypatch)
    rounds = [start.order(["false", "auto", "true"], r) for r in range(3)]
    assert rounds == [["false", "auto", "true"], ["auto", "true", "false"], ["true", "false", "auto"]]


def test_the_table_gives_medians_and_spread_per_mode_and_leaves_failed_runs_out(monkeypatch):
    start = _module(monkeypatch)
    args = argparse.Namespace(modes=["false", "auto"], stop=13)

    def result(mode, trainer, step1, code=0):
        return {"mode": mode, "returncode": code, "device": "cpu", "imports": 4.0, "model": 4.5, "trainer": trainer,
                "train_begin": trainer + 0.01, "step 1": step1, "step 3": step1 + 0.1, "step 13": step1 + 1.0,
                "process_seconds": step1 + 3.0, "syncs_to_stop": 11 if mode == "auto" else 0,
                "dynamo_at_step_1": True}

    results = [result("false", 5.0, 5.5), result("auto", 5.0, 5.75), result("false", 5.1, 5.4),
               result("auto", 5.2, 5.45), result("auto", 9.0, 99.0, code=1)]
    text = start.table(results, args)
    assert "stop at step 13; device cpu" in text
    false_row = next(line for line in text.splitlines() if line.startswith("| false |"))
    auto_row = next(line for line in text.splitlines() if line.startswith("| auto |"))
    assert false_row.startswith("| false | 2 | 4.00 (4.00-4.00) |")
    assert "| 0.40 (0.30-0.50) | 0.00 (0.00-0.00) | True/True |" in false_row  # Trainer built -> step 1, syncs
    assert auto_row.startswith("| auto | 2 |")  # the failed run is left out
    assert "| 5.60 (5.45-5.75) |" in auto_row and "| 0.50 (0.25-0.75) | 11.00 (11.00-11.00) |" in auto_row


@pytest.mark.slow
def test_one_tiny_auto_run_reaches_its_decision_on_the_cpu(tmp_path):
    """The child as the parent starts it: GPT-2 at its smallest, compile="auto", stopped at step 13 where it decided,
    having synced once on each of steps 3-13 (its timed steps) and at none before."""
    env = {**os.environ, "BENCH_T0": repr(time.time()), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compile_start.py"), "--child", "--mode", "auto",
                           "--stop", "13", "--max-steps", "200", "--workdir", str(tmp_path / "work"), "--tiny",
                           "--cpu-compiles"], env=env, capture_output=True, text=True, timeout=300)
    tagged = [line for line in done.stdout.splitlines() if line.startswith("COMPILE_START_RESULT ")]
    assert done.returncode == 0 and tagged, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(tagged[-1].split(" ", 1)[1])
    assert result["imports"] <= result["model"] <= result["trainer"] <= result["train_begin"] <= result["step 1"]
    assert result["step 1"] <= result["step 3"] <= result["step 13"] <= result["trained"]
    assert result["syncs_to_stop"] == 11 and result["device"] == "cpu"
    assert result["decision"].startswith("auto: ") and "ms/step eager x 187 steps to go" in result["decision"]
