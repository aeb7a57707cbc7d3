"""Checkpoints written in a thread hold exactly what a foreground save writes, and a kill mid-write loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from braeburn.trainer.checkpoint import CheckpointManager

JOB = Path(__file__).with_name("background_save_job.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def run_job(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
           "BRAEBURN_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(JOB), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=240)


def load_all(folder: Path) -> dict[str, object]:
    """Every file of a checkpoint, loaded: the weights' safetensors too (the tensors and the file's metadata)."""
    loaded: dict[str, object] = {p.name: torch.load(p, weights_only=True) for p in sorted(folder.glob("*.pt"))}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as file:
            loaded[path.name] = ({name: file.get_tensor(name) for name in file.keys()}, file.metadata())
    assert "model.safetensors" in loaded
    return loaded


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    return a == b


@pytest.fixture(scope="module")
def foreground(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("foreground")
    done = run_job(folder / "out", folder / "weights.pt", "--foreground")
    assert done.returncode == 0, done.stderr
    return folder


@pytest.mark.slow  # two Trainer runs as child processes, one saving in the background (8-55 s, more on a busy machine)
def test_background_checkpoints_equal_foreground_ones(tmp_path, foreground):
    done = run_job(tmp_path / "out", tmp_path / "weights.pt")
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in (foreground / "out").glob("checkpoint-*"))
    assert names == sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) and len(names) == 8
    for name in names:
        ours, theirs = tmp_path / "out" / name, foreground / "out" / name
        CheckpointManager(tmp_path / "out").verify(ours)
        assert same(load_all(ours), load_all(theirs)), name
        manifest = json.loads((ours / "manifest.json").read_text())
        assert sorted(manifest["files"]) == sorted(json.loads((theirs / "manifest.json").read_text())["files"])
    assert same(torch.load(tmp_path / "weights.pt"), torch.load(foreground / "weights.pt"))


@pytest.mark.slow  # a child process killed inside a background save, then resumed (10-50 s)
def test_a_kill_inside_a_background_save_keeps_the_previous_checkpoint_and_resumes_exactly(tmp_path, foreground):
    out = (tmp_path / "out").resolve()
    stage = run_job(out, tmp_path / "weights.pt", "--kill-in-save", "9")
    assert stage.returncode == -signal.SIGKILL and "killed inside the background save of checkpoint-9" in stage.stdout
    manager = CheckpointManager(out)
    assert not (out / "checkpoint-9").exists() and manager.latest() == out / "checkpoint-6"
    manager.verify(manager.latest())
    stage = run_job(out, tmp_path / "weights.pt", "--resume")
    assert stage.returncode == 0, stage.stderr
    assert f"resumed from {out / 'checkpoint-6'} at step 6" in stage.stdout
    assert same(torch.load(tmp_path / "weights.pt"), torch.load(foreground / "weights.pt"))  # bitwise


@pytest.mark.slow  # signals to child processes while they save (66-87 s)
def test_a_sigterm_while_the_final_checkpoint_is_written_in_the_background_keeps_it(tmp_path):
    out = (tmp_path / "out").resolve()
    done = run_job(out, tmp_path / "weights.pt", "--sigterm-in-final-save")
    assert "SIGTERM inside the background save of checkpoint-24" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 128 + signal.SIGTERM, done.stdout + done.stderr  # braeburn's exit, not a kill
    assert f"stopped by SIGTERM at step 24. Checkpoint: {out / 'checkpoint-24'}" in done.stdout
    manager = CheckpointManager(out)
    assert manager.latest() == out / "checkpoint-24"
    manager.verify(out / "checkpoint-24")
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]
