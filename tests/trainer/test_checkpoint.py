"""The checkpoint manager: atomic saves, checksums, "latest", rotation, failed saves. No torch model needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from braeburn.checkpoints.ownership import MARKER, recorded
from braeburn.trainer.checkpoint import CheckpointCorruptError, CheckpointError, CheckpointManager
from braeburn.trainer.state import TrainerState


class FileAccelerator:
    """Stands in for Accelerator.save_state: writes a folder of files (atomically, like the real one)."""

    def __init__(self, fail: bool = False):
        self.fail = fail

    def save_state(self, folder: str) -> None:
        path = Path(folder)
        path.mkdir(parents=True)
        (path / "model_0.pt").write_bytes(os.urandom(2048))
        if self.fail:
            raise OSError(28, "No space left on device")
        (path / "optimizer_0.pt").write_bytes(os.urandom(4096))


class Killed(FileAccelerator):
    """A save stopped half way (Ctrl-C): no cleanup runs, as after a kill."""

    def save_state(self, folder: str) -> None:
        Path(folder).mkdir(parents=True)
        raise KeyboardInterrupt


def save(manager: CheckpointManager, step: int, **kwargs) -> Path:
    return manager.save(FileAccelerator(**kwargs), TrainerState(global_step=step))


def test_save_writes_state_and_manifest_atomically(tmp_path):
    manager = CheckpointManager(tmp_path)
    folder = save(manager, 5)
    assert folder == tmp_path.resolve() / "checkpoint-5"
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "model_0.pt", "optimizer_0.pt",
                                                       "trainer_state.json"]
    assert TrainerState.load(folder).global_step == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER, "checkpoint-5"]  # no staging left behind
    assert recorded(tmp_path) == {"checkpoint-5": "folder"}  # braeburn's record of what it wrote there
    manager.verify(folder)


def test_latest_ignores_half_written_checkpoints(tmp_path):
    manager = CheckpointManager(tmp_path)
    save(manager, 5)
    save(manager, 10)
    # A kill during the save of step 15 leaves a staging folder, and maybe a checkpoint without manifest.
    with pytest.raises(KeyboardInterrupt):
        manager.save(Killed(), TrainerState(global_step=15))
    (tmp_path / "checkpoint-20").mkdir()
    (tmp_path / ".checkpoint-16.tmp").mkdir()  # the same kind of name, but not braeburn's: its record does not name it
    assert manager.latest().name == "checkpoint-10"
    assert manager.resolve("latest") == (tmp_path.resolve() / "checkpoint-10", [])
    assert (tmp_path / ".checkpoint-15.tmp").is_dir()
    manager.clean_staging()
    assert not (tmp_path / ".checkpoint-15.tmp").exists() and (tmp_path / "checkpoint-20").exists()
    assert (tmp_path / ".checkpoint-16.tmp").is_dir()


def test_truncated_file_is_named_and_previous_offered(tmp_path):
    manager = CheckpointManager(tmp_path)
    save(manager, 5)
    newest = save(manager, 10)
    target = newest / "optimizer_0.pt"
    target.write_bytes(target.read_bytes()[:100])
    with pytest.raises(CheckpointCorruptError) as error:
        manager.resolve(str(newest))
    message = str(error.value)
    assert f"{target} is truncated or altered: 100 bytes, the manifest says 4096" in message
    assert f"The previous good checkpoint is {tmp_path.resolve() / 'checkpoint-5'}" in message
    # "latest" passes over it (with the same warning) to the previous good one.
    folder, warnings = manager.resolve("latest")
    assert folder.name == "checkpoint-5" and "truncated" in warnings[0]


def test_flipped_byte_is_detected_by_checksum(tmp_path):
    manager = CheckpointManager(tmp_path)
    folder = save(manager, 3)
    target = folder / "model_0.pt"
    data = bytearray(target.read_bytes())
    data[10] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorruptError, match="model_0.pt is corrupted: its sha256 does not match") as error:
        manager.verify(folder)
    assert "No earlier good checkpoint" in str(error.value)


def test_failed_save_keeps_previous_and_says_what_happened(tmp_path):
    manager = CheckpointManager(tmp_path)
    good = save(manager, 5)
    with pytest.raises(CheckpointError) as error:
        save(manager, 10, fail=True)
    message = str(error.value)
    assert "Saving" in message and "checkpoint-10 failed: OSError" in message and "No space left" in message
    assert f"the previous checkpoint {good} is intact" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER, "checkpoint-5"]
    manager.verify(good)


def test_rotation_keeps_newest_and_best_and_touches_nothing_else(tmp_path):
    manager = CheckpointManager(tmp_path, save_total_limit=2)
    for step in (1, 2, 3, 4):
        save(manager, step)
    foreign = [tmp_path / "checkpoint-final", tmp_path / "notes.txt"]
    foreign[0].mkdir()
    foreign[1].write_text("mine")
    outside = tmp_path.parent / f"{tmp_path.name}-other" / "checkpoint-0"
    outside.mkdir(parents=True)
    (tmp_path / "checkpoint-0").symlink_to(outside)  # a link out of output_dir is never followed
    deleted = manager.rotate(keep=tmp_path / "checkpoint-1")
    assert sorted(p.name for p in deleted) == ["checkpoint-2", "checkpoint-3"]
    assert sorted(p.name for p in manager.checkpoints()) == ["checkpoint-1", "checkpoint-4"]
    assert all(p.exists() for p in foreign) and outside.exists()


def test_resolve_errors(tmp_path):
    manager = CheckpointManager(tmp_path)
    with pytest.raises(CheckpointError, match="holds no complete checkpoint-N folder"):
        manager.resolve("latest")
    with pytest.raises(CheckpointError, match="no such folder"):
        manager.resolve(str(tmp_path / "checkpoint-99"))


def test_same_step_saved_twice_replaces(tmp_path):
    manager = CheckpointManager(tmp_path)
    save(manager, 7)
    folder = save(manager, 7)
    manager.verify(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER, "checkpoint-7"]


def test_the_manifest_hashes_two_files_at_once_with_the_same_checksums(tmp_path, monkeypatch):
    # A checkpoint's weights and optimizer state are hashed side by side (the largest file's time, not the sum):
    # the first two files hashed meet at a barrier that files hashed one after another never pass.
    import hashlib
    import itertools
    import threading

    from braeburn.checkpoints import manifest as manifest_io
    from braeburn.trainer import checkpoint

    barrier, original, calls, order = threading.Barrier(2, timeout=20), checkpoint._sha256, itertools.count(), []

    def meeting(path):
        order.append(path.name)
        if next(calls) < 2:
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                pytest.fail("the files were hashed one after another")
        return original(path)

    monkeypatch.setattr(checkpoint, "_sha256", meeting)
    folder = save(CheckpointManager(tmp_path), 5)
    assert sorted(order) == ["model_0.pt", "optimizer_0.pt", "trainer_state.json"]  # each once
    files = manifest_io.read(folder)["files"]
    assert set(files) == {"model_0.pt", "optimizer_0.pt", "trainer_state.json"}
    for name, entry in files.items():
        data = (folder / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    CheckpointManager(tmp_path).verify(folder)


EXITING_SAVE = """
import sys, threading, time
from pathlib import Path
from tests.trainer.test_checkpoint import FileAccelerator, CheckpointManager, TrainerState

class Slow(FileAccelerator):
    def save_state(self, folder):
        time.sleep(0.5)  # the main thread has returned by now: the interpreter is exiting
        super().save_state(folder)

manager = CheckpointManager(Path(sys.argv[1]))
threading.Thread(target=lambda: manager.save(Slow(), TrainerState(global_step=3)), daemon=False).start()
"""


def test_a_save_on_a_thread_still_running_at_the_interpreters_exit_is_written_and_hashed(tmp_path):
    # A background checkpoint (a non-daemon thread) that the interpreter waits for at its exit: by then
    # concurrent.futures refuses new work, so its files are hashed on the saving thread instead of being lost.
    import subprocess
    import sys

    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", EXITING_SAVE, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=root, env=env)
    assert done.returncode == 0 and "Error" not in done.stderr, done.stderr[-3000:]
    CheckpointManager(tmp_path).verify(tmp_path / "checkpoint-3")
