"""Faults with real processes: a chain of SIGKILLs (seeded-random steps), a full disk and a torn checkpoint
write, then one resume after another, ending bitwise equal to a run that was never interrupted (CPU).

Each stage is one process of tests/trainer/reliability_job.py (32 optimizer steps of 2 micro-batches, a checkpoint
every 5 steps and at the end). Already proven elsewhere and not repeated here: SIGKILL + resume with no
accumulation and SIGINT/SIGTERM saving (tests/trainer/test_resume.py), truncated and flipped-byte files
(tests/trainer/test_checkpoint.py), a crashed rank ending the job (tests/cli/test_launch.py).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from braeburn.checkpoints.output_lock import LOCK_FILE
from braeburn.checkpoints.ownership import MARKER
from braeburn.trainer.checkpoint import MANIFEST, CheckpointCorruptError, CheckpointManager

# Every test starts from a reference run in a child process (30 s on a loaded machine); the fault chain SIGKILLs more
pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("reliability_job.py")
CHOICES = random.Random(9)  # seeded: the same "random" kill points on every run, printed on failure
KILL_AT_STEP = CHOICES.choice([16, 17, 18, 19])  # after the failed save of step 10 and the save of 15
KILL_MID_ACCUMULATION_AFTER = CHOICES.choice([21, 22, 23])
KILL_AFTER_SAVE = CHOICES.choice([25, 30])
KILL_INSIDE_SAVE = CHOICES.choice([step for step in (30, 32) if step > KILL_AFTER_SAVE])
PLAN = (f"kill at step {KILL_AT_STEP}, mid-accumulation after {KILL_MID_ACCUMULATION_AFTER}, right after saving "
        f"{KILL_AFTER_SAVE}, inside the save of {KILL_INSIDE_SAVE}")


def run_job(output_dir: Path, result: Path, *args: str, device: str = "cpu") -> subprocess.CompletedProcess:
    env = {**os.environ, "BRAEBURN_DEVICE": device}  # these tests are about the CPU, on any machine
    return subprocess.run([sys.executable, str(JOB), str(output_dir), str(result), *args],
                          capture_output=True, text=True, timeout=120, env=env)


def checkpoint_steps(output_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in output_dir.glob("checkpoint-*"))


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """One uninterrupted run: its weights and its checkpoints (copied, never changed, by the other tests)."""
    folder = tmp_path_factory.mktemp("reference")
    done = run_job(folder / "out", folder / "weights.pt")
    assert done.returncode == 0, done.stderr
    assert checkpoint_steps(folder / "out") == [5, 10, 15, 20, 25, 30, 32]
    return folder


def killed(stage: subprocess.CompletedProcess) -> bool:
    return stage.returncode == -signal.SIGKILL


def resumed_from(stage: subprocess.CompletedProcess, output_dir: Path, step: int) -> bool:
    return f"resumed from {output_dir / f'checkpoint-{step}'} at step {step}" in stage.stdout


def test_kills_full_disk_and_torn_save_then_resume_bitwise(tmp_path, reference):
    out, result = (tmp_path / "out").resolve(), tmp_path / "weights.pt"

    # 1. The disk fills after step 7 and is freed after step 12: the save of step 10 fails cleanly,
    #    training goes on from the state in memory, and step 15 saves; then SIGKILL.
    stage = run_job(out, result, "--full-disk", "7:12", "--kill-at-step", str(KILL_AT_STEP))
    assert killed(stage), (PLAN, stage.stderr)
    assert (f"Saving {out / 'checkpoint-10'} failed: OSError: [Errno 27] File too large. Nothing was replaced (the "
            f"previous checkpoint {out / 'checkpoint-5'} is intact); training state in memory is unchanged") in stage.stdout
    # no debris: the checkpoints and the run's log (report_to="none": no TensorBoard folder, installed or not);
    # the lock file is the run's own
    assert sorted(p.name for p in out.iterdir() if p.name != LOCK_FILE) == [MARKER, "checkpoint-15", "checkpoint-5",
                                                                            "metrics.jsonl"]

    # 2. Resume from 15 (written by the process that survived the failed save); SIGKILL half-way through
    #    an accumulation window (gradients of one micro-batch summed, no optimizer step yet).
    stage = run_job(out, result, "--resume", "--kill-mid-accumulation-after", str(KILL_MID_ACCUMULATION_AFTER))
    assert killed(stage) and resumed_from(stage, out, 15), (PLAN, stage.stdout, stage.stderr)
    step = int(re.search(r"killed mid-accumulation after step (\d+)", stage.stdout).group(1))
    assert KILL_MID_ACCUMULATION_AFTER <= step <= KILL_MID_ACCUMULATION_AFTER + 1  # a lone end-of-epoch batch may pass
    assert checkpoint_steps(out) == [5, 15, 20]

    # 3. Resume from 20; SIGKILL right after a checkpoint is complete.
    stage = run_job(out, result, "--resume", "--kill-after-save", str(KILL_AFTER_SAVE))
    assert killed(stage) and resumed_from(stage, out, 20), (PLAN, stage.stdout, stage.stderr)
    assert checkpoint_steps(out)[-1] == KILL_AFTER_SAVE

    # 4. Resume from there; SIGKILL while model.safetensors of the next checkpoint is half written.
    stage = run_job(out, result, "--resume", "--kill-inside-save", str(KILL_INSIDE_SAVE))
    assert killed(stage) and resumed_from(stage, out, KILL_AFTER_SAVE), (PLAN, stage.stdout, stage.stderr)
    torn = out / f"..checkpoint-{KILL_INSIDE_SAVE}.tmp.partial" / "model.safetensors"
    assert torn.is_file() and f"killed while writing {torn}" in stage.stdout
    manager = CheckpointManager(out)
    assert not (out / f"checkpoint-{KILL_INSIDE_SAVE}").exists()
    assert manager.latest() == out / f"checkpoint-{KILL_AFTER_SAVE}"  # the previous one, complete and loadable
    manager.verify(manager.latest())

    # 5. "latest" finds the last complete checkpoint, the torn staging is cleared, and the run ends where an
    #    uninterrupted one ends, bit for bit.
    stage = run_job(out, result, "--resume")
    assert stage.returncode == 0 and resumed_from(stage, out, KILL_AFTER_SAVE), (PLAN, stage.stdout, stage.stderr)
    assert not torn.parent.exists()
    assert checkpoint_steps(out)[-2:] == [30, 32]
    expected, got = load_weights(reference / "weights.pt"), load_weights(result)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected), PLAN


def copy_checkpoints(reference: Path, tmp_path: Path) -> CheckpointManager:
    out = tmp_path / "out"
    shutil.copytree(reference / "out", out)
    return CheckpointManager(out)


def test_corrupted_trainer_state_json_is_named_and_previous_offered(tmp_path, reference):
    manager = copy_checkpoints(reference, tmp_path)
    state_file = manager.output_dir / "checkpoint-32" / "trainer_state.json"
    text = state_file.read_text()
    state_file.write_text(text.replace('"global_step": 32', '"global_step": 99'))  # same size, other bytes
    with pytest.raises(CheckpointCorruptError) as error:
        manager.resolve(str(state_file.parent))
    assert f"{state_file} is corrupted: its sha256 does not match the manifest" in str(error.value)
    assert f"The previous good checkpoint is {manager.output_dir / 'checkpoint-30'}" in str(error.value)
    folder, warnings = manager.resolve("latest")
    assert folder.name == "checkpoint-30" and "trainer_state.json is corrupted" in warnings[0]


def test_missing_or_garbled_manifest_is_named_and_latest_skips_it(tmp_path, reference):
    manager = copy_checkpoints(reference, tmp_path)
    newest, before = manager.output_dir / "checkpoint-32", manager.output_dir / "checkpoint-30"
    (newest / MANIFEST).unlink()
    (before / MANIFEST).write_text(json.dumps({"format": 1})[:7])  # a manifest cut short
    folder, warnings = manager.resolve("latest")  # the unreadable one is passed over, with a warning naming it
    assert folder == manager.output_dir / "checkpoint-25" and f"{before / MANIFEST} is missing or unreadable" in warnings[0]
    for folder in (newest, before):
        with pytest.raises(CheckpointCorruptError) as error:
            manager.resolve(str(folder))
        assert f"{folder / MANIFEST} is missing or unreadable, so the checkpoint is incomplete" in str(error.value)
        assert f"The previous good checkpoint is {manager.output_dir / 'checkpoint-25'}" in str(error.value)
