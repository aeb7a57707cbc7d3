"""Issue 32, items 6-8 and 10: no silent wrong result after train() or on resume.

- evaluate()/predict() after train() on 2 processes cover the whole dataset (a real gloo job);
- a resume with another batch size, accumulation or world size trains the remaining samples and says so;
- a resume that changes the learning rate or max_steps, or a checkpoint folder named for another step,
  is named (or refused) with both values;
- auto_find_batch_size halves the batch on an out-of-memory error in the middle of training and goes on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent


def _launch(job: str, *args: str, timeout: int = 180) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAEBURN_", "TORCHELASTIC_"))}
    env.update(OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "braeburn.cli.main", "launch", "--cpu", "--num-processes", "2",
               str(HERE / job), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-6000:]
    return text


# -- item 6: metrics after train() on several processes ------------------------------------------------
def test_evaluate_and_predict_after_train_on_two_processes_cover_the_whole_dataset(tmp_path):
    _launch("eval_after_train_job.py", str(tmp_path))
    result = torch.load(tmp_path / "result.pt", weights_only=True)
    assert result == {"eval_n": 11.0, "predictions": 11, "test_n": 11.0}  # not one process's 6
