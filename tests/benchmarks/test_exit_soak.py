"""benchmarks/exit_soak.py, the repeated 2-process run behind the gloo abort at exit (docs/reliability.md), runs as
documented: one accelerator job, counted and cleaned up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # one torchrun with 2 gloo processes (~15 s on 2 cores)
@pytest.mark.parametrize("job", ["accelerator", "race"])
def test_exit_soak_runs_and_counts(tmp_path, job):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "exit_soak.py"), "--runs", "1", "--job", job,
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "exit_soak: 1 runs, 0 failed" in done.stdout
    assert not (tmp_path / "run-1").exists()  # a run that passed leaves nothing behind
