"""Where a ``braeburn.lightning`` fit writes, and which checkpoint ``fit(ckpt_path=...)`` resumes.

Lightning's default logger puts each run in ``<default_root_dir>/lightning_logs/version_<N>`` (N one more than
the highest there) and its checkpoints in that folder, so a rerun of a script never touches an earlier run's
files. braeburn does the same: each ``fit()`` creates the next ``version_<N>`` (created, never reused, so two
runs started at once cannot take the same one) and writes its ``checkpoint-<step>/`` folders and
``metrics.jsonl`` there. Nothing outside that new folder is written.

``ckpt_path``: a ``checkpoint-<step>`` folder; a folder holding them (its latest); or ``"last"``, the latest
checkpoint of the newest ``version_<N>`` that holds one (Lightning's "last" looks in the new run's own, empty
folder, and so finds nothing after a restart; braeburn finds the earlier run's). Where "last" finds none, it warns
and trains from the start, as Lightning does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...checkpoints.manifest import MANIFEST
from ...trainer.checkpoint import CHECKPOINT_RE, CheckpointError, CheckpointManager

LOGS = "lightning_logs"
_VERSION = re.compile(r"^version_(\d+)$")
_TRIES = 100
_LIGHTNING_ONLY = ("best", "hpc")  # ckpt_path values that name Lightning's own checkpoint callbacks


class CheckpointPathError(ValueError):
    """``fit(ckpt_path=...)`` names nothing braeburn can resume; the message says what to pass."""


def logs_folder(root: str | Path) -> Path:
    return Path(root).expanduser() / LOGS


def versions(logs: Path) -> list[tuple[int, Path]]:
    """The ``version_<N>`` entries of ``logs`` (folders, files, links: each name is taken), by N."""
    if not logs.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in logs.iterdir() if (m := _VERSION.match(p.name))]
    return sorted(found)


def claim_run_folder(logs: Path) -> Path:
    """Create and return the next ``version_<N>`` of ``logs``. Raises OSError when it cannot be created."""
    logs.mkdir(parents=True, exist_ok=True)
    for _ in range(_TRIES):
        taken = versions(logs)
        folder = logs / f"version_{taken[-1][0] + 1 if taken else 0}"
        try:
            folder.mkdir()  # exclusive: another run that created it first keeps it
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"{logs}: version_<N> folders kept appearing as braeburn created them ({_TRIES} tries)")


def restarted_run_folder(logs: Path) -> Path | None:
    """The run folder of a worker that ``braeburn launch --max-restarts`` restarted: the newest ``version_<N>``
    folder, which the first attempt created (so the restart resumes the job's own checkpoints)."""
    folders = [path for _, path in versions(logs) if path.is_dir() and not path.is_symlink()]
    return folders[-1] if folders else None


def checkpoint_to_resume(ckpt_path: Any, root: str | Path) -> tuple[str | None, list[str]]:
    """(the checkpoint folder to resume, warnings) for ``fit(ckpt_path=...)``; (None, ...) starts afresh.
    Raises :class:`CheckpointPathError` for a value that names nothing braeburn resumes."""
    if ckpt_path is None:
        return None, []
    if ckpt_path == "last":
        return _last(root)
    if isinstance(ckpt_path, str) and ckpt_path in _LIGHTNING_ONLY:
        raise CheckpointPathError(
            f"fit(ckpt_path={ckpt_path!r}) names a checkpoint of Lightning's own ModelCheckpoint, which "
            "braeburn.lightning does not run: it keeps the last checkpoint of each run. Pass ckpt_path='last', or "
            f"a checkpoint folder such as {str(logs_folder(root) / 'version_0' / 'checkpoint-100')!r}")
    path = Path(ckpt_path).expanduser()
    if not path.exists():
        raise CheckpointPathError(f"fit(ckpt_path={str(ckpt_path)!r}): no such file or folder. Pass a braeburn "
                                  "checkpoint folder (lightning_logs/version_N/checkpoint-<step>) or 'last'")
    if not path.is_dir():
        raise CheckpointPathError(
            f"fit(ckpt_path={str(ckpt_path)!r}) is a file; braeburn.lightning resumes braeburn's checkpoint folders "
            "(lightning_logs/version_N/checkpoint-<step>), not Lightning's .ckpt files (a pickle, which braeburn does "
            "not load). Pass one of those folders, or 'last'; resume a .ckpt with Lightning itself")
    if (path / MANIFEST).is_file() or CHECKPOINT_RE.match(path.resolve().name):
        return str(path), []  # a checkpoint: the core checks it (its manifest and checksums)
    if CheckpointManager(path).checkpoints():
        return _latest_in(path, ckpt_path)
    raise CheckpointPathError(f"fit(ckpt_path={str(ckpt_path)!r}) is a folder that is no braeburn checkpoint and "
                              "holds none (no checkpoint-<step> folder with a manifest.json). Pass a checkpoint "
                              "folder, the folder of a run that holds them, or 'last'")


def _last(root: str | Path) -> tuple[str | None, list[str]]:
    """The latest checkpoint of the newest version_<N> that holds one."""
    for _, folder in reversed(versions(logs_folder(root))):
        if folder.is_dir() and CheckpointManager(folder).checkpoints():
            return _latest_in(folder, "last")
    return None, [f"fit(ckpt_path='last') is set, but {logs_folder(root)} holds no braeburn checkpoint "
                  "(version_N/checkpoint-<step>): training starts from the beginning, as Lightning does when "
                  "there is no last checkpoint"]


def _latest_in(folder: Path, asked: Any) -> tuple[str, list[str]]:
    """The latest good checkpoint of ``folder`` (the core's choice: refuses to choose between two runs, passes
    over a newest one that fails its checksums), with its warnings."""
    try:
        chosen, warnings = CheckpointManager(folder).resolve("latest")
    except CheckpointError as error:
        raise CheckpointPathError(str(error)) from None
    return str(chosen), warnings


__all__ = ["CheckpointPathError", "LOGS", "checkpoint_to_resume", "claim_run_folder", "logs_folder",
           "restarted_run_folder", "versions"]
