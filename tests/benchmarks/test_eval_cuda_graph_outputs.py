"""benchmarks/eval_cuda_graph_outputs.py, the device check that evaluate() copies a user's CUDA-graph model's
outputs before its next call: on the CPU (no CUDA graphs) both of its runs finish and match the eager model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # compiles a small model with inductor on the CPU (~10 s)
def test_the_check_runs_on_the_cpu_and_both_runs_match_the_eager_predictions(monkeypatch, tmp_path, cpu_only):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr("sys.argv", ["eval_cuda_graph_outputs.py", "--out", str(tmp_path), "--batches", "3",
                                     "--batch", "4"])
    import eval_cuda_graph_outputs

    eval_cuda_graph_outputs.main()
    runs = json.loads((tmp_path / "eval_cuda_graph_outputs.json").read_text())["runs"]
    assert [run["detect"] for run in runs] == [True, False]
    assert all(run["finished"] and run["matches"] and run["max_difference"] == 0.0 for run in runs)
