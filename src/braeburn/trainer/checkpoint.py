"""Checkpoints that survive crashes: atomic writes, checksums, rotation and "latest" discovery.

A checkpoint is ``output_dir/checkpoint-<step>``: what ``Accelerator.save_state`` writes (model,
optimizer, scheduler, scaler, RNG states, dataloader positions), ``trainer_state.json``, and last
``manifest.json`` with the size and sha256 of every file. It is assembled in a hidden staging folder
and renamed into place only when complete, so a kill during a save leaves the previous checkpoints
as they were. Nothing outside ``output_dir`` is ever written or deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from ..state import staging_dir
from .state import TrainerState

MANIFEST = "manifest.json"
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
STAGING_RE = re.compile(r"^\.+checkpoint-\d+\.tmp")  # ours, and the Accelerator's staging around it


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used or written; the message names the file and what to do."""


class CheckpointCorruptError(CheckpointError):
    def __init__(self, message: str, path: Path, previous_good: Path | None):
        self.path, self.previous_good = path, previous_good
        super().__init__(message)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
        os.fsync(handle.fileno())  # the bytes we hash are on disk before the manifest names them
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: Path, step: int) -> Path:
    files = {str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in _files(folder)}
    path = folder / MANIFEST
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"format": 1, "step": step, "files": files}, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("files"), dict) else None


def step_of(folder: Path) -> int:
    match = CHECKPOINT_RE.match(folder.name)
    return int(match.group(1)) if match else -1


def _barrier(accelerator: Any) -> None:
    wait = getattr(accelerator, "wait_for_everyone", None)  # anything with save_state will do in one process
    if wait is not None:
        wait()


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some systems cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class CheckpointManager:
    """Writes, finds, verifies and rotates the checkpoints of one ``output_dir``."""

    def __init__(self, output_dir: str | os.PathLike, save_total_limit: int | None = None):
        self.output_dir = Path(output_dir).resolve()
        self.save_total_limit = save_total_limit

    # -- finding ---------------------------------------------------------------------------------
    def _own(self, path: Path) -> bool:
        """A ``checkpoint-N`` folder directly inside output_dir (not a link leading elsewhere)."""
        return (CHECKPOINT_RE.match(path.name) is not None and path.is_dir() and not path.is_symlink()
                and path.resolve().parent == self.output_dir)

    def checkpoints(self) -> list[Path]:
        """Every ``checkpoint-N`` folder with a manifest, oldest first."""
        if not self.output_dir.is_dir():
            return []
        found = [p for p in self.output_dir.iterdir() if self._own(p) and (p / MANIFEST).is_file()]
        return sorted(found, key=step_of)

    def is_complete(self, folder: Path) -> bool:
        """Quick check: a manifest, and every file it lists present with its size."""
        manifest = _read_manifest(folder)
        if manifest is None:
            return False
        return all((folder / name).is_file() and (folder / name).stat().st_size == entry.get("size")
                   for name, entry in manifest["files"].items())

    def latest(self) -> Path | None:
        """The newest complete checkpoint (a quick check; :meth:`verify` does the checksums)."""
        return next((p for p in reversed(self.checkpoints()) if self.is_complete(p)), None)

    def previous_good(self, folder: Path) -> Path | None:
        """The newest checkpoint older than ``folder`` whose checksums all match."""
        for candidate in reversed(self.checkpoints()):
            if step_of(candidate) < step_of(folder) and self._problem(candidate) is None:
                return candidate
        return None

    # -- verifying -------------------------------------------------------------------------------
    def _problem(self, folder: Path) -> str | None:
        manifest = _read_manifest(folder)
        if manifest is None:
            return f"{folder / MANIFEST} is missing or unreadable, so the checkpoint is incomplete"
        for name, entry in manifest["files"].items():
            path = folder / name
            if not path.is_file():
                return f"{path} is missing"
            size = path.stat().st_size
            if size != entry.get("size"):
                return f"{path} is truncated or altered: {size} bytes, the manifest says {entry.get('size')}"
            if _sha256(path) != entry.get("sha256"):
                return f"{path} is corrupted: its sha256 does not match the manifest"
        return None

    def verify(self, folder: Path) -> None:
        """Raise :class:`CheckpointCorruptError` naming the bad file and the previous good checkpoint."""
        problem = self._problem(folder)
        if problem is None:
            return
        previous = self.previous_good(folder) if folder.resolve().parent == self.output_dir else None
        offer = (f"The previous good checkpoint is {previous}: resume from it with --resume_from_checkpoint "
                 f"{previous}." if previous else "No earlier good checkpoint was found in this output_dir.")
        raise CheckpointCorruptError(f"Checkpoint {folder} cannot be used: {problem}. {offer}", folder, previous)

    def resolve(self, request: str) -> tuple[Path, list[str]]:
        """The checkpoint to resume from for ``request`` (a path or "latest"), and warnings to show.

        "latest" passes over a newest checkpoint that fails its checksums (with a warning naming the
        bad file) to the newest good one; an explicit path that fails them is an error.
        """
        if request == "latest":
            found = self.checkpoints()
            warnings, newest = [], found[-1] if found else None
            if newest is None:
                raise CheckpointError(f"resume_from_checkpoint='latest' but {self.output_dir} holds no complete "
                                      "checkpoint-N folder. Train without --resume_from_checkpoint to start afresh.")
            try:
                self.verify(newest)
            except CheckpointCorruptError as error:
                if error.previous_good is None:
                    raise
                warnings.append(f"{error} Using {error.previous_good}.")
                newest = error.previous_good
            return newest, warnings
        folder = Path(request).expanduser().resolve()
        if not folder.is_dir():
            raise CheckpointError(f"resume_from_checkpoint={request!r}: no such folder. Pass a checkpoint-N folder "
                                  f"or 'latest' (the last complete checkpoint in output_dir).")
        self.verify(folder)
        return folder, []

    # -- writing ---------------------------------------------------------------------------------
    def clean_staging(self) -> None:
        """Remove half-written checkpoints left by a crash (only our own hidden staging folders)."""
        if not self.output_dir.is_dir():
            return
        for path in self.output_dir.iterdir():
            if STAGING_RE.match(path.name) and path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)

    def save(self, accelerator: Any, state: TrainerState) -> Path:
        """Write ``checkpoint-<global_step>`` atomically; on failure nothing changes on disk.

        Called on every process: all of them take part in ``save_state`` (FSDP ranks write their
        shards), and only the main process writes the trainer state and manifest and renames.
        """
        target = self.output_dir / f"checkpoint-{state.global_step}"
        staging = self.output_dir / f".checkpoint-{state.global_step}.tmp"
        main = getattr(accelerator, "is_main_process", True)
        try:
            if main:
                self.output_dir.mkdir(parents=True, exist_ok=True)
                if staging.exists():
                    shutil.rmtree(staging)
            accelerator.save_state(str(staging))
            state.last_checkpoint = str(target)
            if main:
                state.save(staging)
                write_manifest(staging, state.global_step)
                self._publish(staging, target)
        except Exception as error:
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(staging_dir(staging), ignore_errors=True)  # the Accelerator's own staging beside it
            previous = self.latest()
            kept = f"the previous checkpoint {previous} is intact" if previous else "no earlier checkpoint exists"
            raise CheckpointError(f"Saving {target} failed: {type(error).__name__}: {error}. Nothing was "
                                  f"replaced ({kept}); training state in memory is unchanged. Free disk space "
                                  f"or fix the permissions of {self.output_dir}.") from error
        finally:
            _barrier(accelerator)  # no rank goes on (or resumes) before the checkpoint is in place
        return target

    def _publish(self, staging: Path, target: Path) -> None:
        old = self.output_dir / f".{target.name}.tmp.old"
        if target.exists():  # the same step saved again (a resume that saves at once)
            os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
        _fsync_dir(self.output_dir)

    def rotate(self, keep: Path | str | None = None) -> list[Path]:
        """Delete the oldest checkpoints beyond ``save_total_limit``, never ``keep`` (the best) or the newest."""
        if not self.save_total_limit:
            return []
        found = self.checkpoints()
        protected = {found[-1].resolve()} if found else set()
        if keep:
            protected.add(Path(keep).resolve())
        excess = len(found) - max(self.save_total_limit, len(protected))
        deleted = []
        for folder in found:
            if excess <= 0:
                break
            if folder.resolve() in protected or not self._own(folder):
                continue
            shutil.rmtree(folder)
            deleted.append(folder)
            excess -= 1
        return deleted

    # -- loading ---------------------------------------------------------------------------------
    def load(self, accelerator: Any, folder: Path) -> TrainerState:
        """Restore the Accelerator's objects and return the saved TrainerState (checksums already verified)."""
        try:
            accelerator.load_state(str(folder))
        except (RuntimeError, KeyError, ValueError) as error:
            raise CheckpointError(f"Checkpoint {folder} does not fit this run: {error}. It was written for a "
                                  "different model, optimizer or number of processes; resume with the same "
                                  "script and options, or start afresh in a new output_dir.") from error
        return TrainerState.load(folder)


__all__ = ["CheckpointCorruptError", "CheckpointError", "CheckpointManager", "MANIFEST", "write_manifest"]
