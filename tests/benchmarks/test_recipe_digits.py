"""The digits recipe of benchmarks/recipes.py runs end to end on the CPU: its three runners (the floor that makes the
example's outputs, the training-only floor, braeburn's example) train, score and report, and the outputs floor
writes what the example writes. docs/benchmarks.md's table came from this script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # three recipe runs as subprocesses (13-33 s)
def test_the_digits_recipe_runs_its_three_runners_and_the_outputs_floor_writes_the_examples_outputs(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, str(ROOT / "benchmarks" / "recipes.py"), "--cpu", "--recipes", "digits", "--rounds", "1",
               "--max-steps", "46", "--out", str(out)]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    results = {row["runner"]: row for row in json.loads((out / "recipes.json").read_text())["results"]}
    assert set(results) == {"bare", "bare-train", "braeburn"}
    for runner, row in results.items():
        assert row["returncode"] == 0, runner
        assert 0.5 < row["value"] <= 1.0, (runner, row["value"])  # 46 steps: past one epoch, well above chance
    work = out / "work" / "digits-bare-1"
    assert json.loads((work / "eval_results.json").read_text())["eval_samples"] == 359
    assert (work / "confusion_matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bare_log = (out / "logs" / "digits-bare-1.log").read_text()
    assert "step 45: accuracy" in bare_log  # the evaluation at the end of epoch 1, as the example's eval_strategy="epoch"
    assert "step 45: accuracy" not in (out / "logs" / "digits-bare-train-1.log").read_text()
    assert "| digits | braeburn |" in (out / "recipes.md").read_text()


def test_cold_compile_gives_each_run_its_own_empty_compile_cache(tmp_path, monkeypatch):
    import argparse
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # recipes.py imports its sibling recipe_gpt2
    spec = importlib.util.spec_from_file_location("recipes_under_test", ROOT / "benchmarks" / "recipes.py")
    recipes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipes)
    args = argparse.Namespace(cold_compile=True, work=None, out=str(tmp_path / "out"))
    first, second = recipes.compile_cache_env(args, "gpt2-braeburn-1"), recipes.compile_cache_env(args, "gpt2-braeburn-1")
    assert first["TORCHINDUCTOR_CACHE_DIR"] != second["TORCHINDUCTOR_CACHE_DIR"]
    for env in (first, second):
        cache = Path(env["TORCHINDUCTOR_CACHE_DIR"])
        assert cache.is_dir() and not any(cache.iterdir())  # empty: nothing compiled before
        assert Path(env["TRITON_CACHE_DIR"]).parent == cache
    assert recipes.compile_cache_env(argparse.Namespace(cold_compile=False, work=None, out=str(tmp_path)), "x") == {}
