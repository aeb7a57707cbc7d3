"""Where a ``braeburn.lightning`` fit writes, and which checkpoint ``fit(ckpt_path=...)`` resumes.

Lightning's default logger puts each run in ``<default_root_dir>/lightning_logs/version_<N>`` (N one more than
the highest there) and its checkpoints in that folder, so a rerun of a script never touches an earlier run's
files. braeburn does the same: each ``fit()`` creates the next ``version_<N>`` (created, never reused, so two
runs started at once cannot take the same one) and writes its ``checkpoint-<step>/`` folders and
``metrics.jsonl`` there. Nothing outside that new folder is written.

A worker that torchrun restarted (``braeburn launch --max-restarts``) goes on in the folder its first attempt
made, and in no other: each ``version_<N>`` holds ``.braeburn-job.json``, naming the launched job that made it
(:func:`job_identity`) and which ``fit()`` of the script it is. A restart takes the folder of the same job and
``fit()``; with none (another job's folders alone, or a job braeburn cannot tell from others), a new one. The record
is written whole or not at all, into the folder just created; a folder without it is no job's.

``ckpt_path``: a ``checkpoint-<step>`` folder; a folder holding them (its latest); or ``"last"``, the latest
checkpoint of the newest ``version_<N>`` that holds one (Lightning's "last" looks in the new run's own, empty
folder, and so finds nothing after a restart; braeburn finds the earlier run's). Where "last" finds none, it warns
and trains from the start, as Lightning does.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ...checkpoints import no_follow
from ...checkpoints.manifest import MANIFEST
from ...trainer.checkpoint import CHECKPOINT_RE, CheckpointError, CheckpointManager
from .ckpt_files import braeburn_folder_of

LOGS = "lightning_logs"
_VERSION = re.compile(r"^version_(\d+)$")
_TRIES = 100
_LIGHTNING_ONLY = ("best", "hpc")  # ckpt_path values that name Lightning's own checkpoint callbacks
JOB_FILE = ".braeburn-job.json"  # in each version_<N>: the job (and the fit() of its script) that made it
_SCHEDULER_JOBS = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID")  # a scheduler's id of the job
# torchrun's agent writes each worker's error file in <its own new folder>/attempt_<restart>/<rank>/error.json: the
# folder is made once per agent (a temporary name), so every restart of a job, and no other job, shares it.
_AGENT_FILE = re.compile(r"^(?P<agent>.+)[/\\]attempt_\d+[/\\]\d+[/\\]error\.json$")
_MAX_JOB_FILE = 64 << 10


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


def job_identity(env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """What tells this launched job from every other one, the same in each of its restarts: the folder torchrun's
    agent made for this job (where TORCHELASTIC_ERROR_FILE lies) or torchrun's run id (not its default, "none"),
    with a scheduler's job id beside them. None where neither of torchrun's is there (a plain ``python script.py``;
    a scheduler's id alone is shared by every job started inside one allocation)."""
    env = os.environ if env is None else env
    facts = {}
    run_id = env.get("TORCHELASTIC_RUN_ID", "").strip()
    if run_id and run_id != "none":
        facts["TORCHELASTIC_RUN_ID"] = run_id
    agent = _AGENT_FILE.match(env.get("TORCHELASTIC_ERROR_FILE", "").strip())
    if agent:
        facts["torchrun_agent_folder"] = agent["agent"]
    if not facts:
        return None
    return {**facts, **{name: env[name].strip() for name in _SCHEDULER_JOBS if env.get(name, "").strip()}}


def claim_run_folder(logs: Path, job: dict[str, str] | None = None, fit: int = 1) -> Path:
    """Create and return the next ``version_<N>`` of ``logs``, with its JOB_FILE naming ``job`` and ``fit`` (the
    script's n-th fit()). Raises OSError when it cannot be created."""
    logs.mkdir(parents=True, exist_ok=True)
    for _ in range(_TRIES):
        taken = versions(logs)
        folder = logs / f"version_{taken[-1][0] + 1 if taken else 0}"
        try:
            folder.mkdir()  # exclusive: another run that created it first keeps it
        except FileExistsError:
            continue
        _record_job(folder, job, fit)
        return folder
    raise FileExistsError(f"{logs}: version_<N> folders kept appearing as braeburn created them ({_TRIES} tries)")


def _record_job(folder: Path, job: dict[str, str] | None, fit: int) -> None:
    """JOB_FILE in the new ``folder``, whole or not at all (a temporary file renamed): a folder without it is
    taken by no restart. A folder whose record cannot be written is removed (it is empty: it was just made)."""
    record = {"written_by": "braeburn.lightning", "about": "the launched job, and the fit() of its script, that "
              "made this folder: a restarted worker of that job (and only of it) goes on here", "job": job, "fit": fit}
    try:
        no_follow.write_atomic(folder / JOB_FILE, json.dumps(record, indent=1))
    except OSError:
        try:
            folder.rmdir()
        except OSError:
            pass
        raise


def _job_of(folder: Path) -> tuple[Any, Any]:
    """(job, fit) that ``folder``'s JOB_FILE names; (None, None) without a readable one (a link is not read)."""
    try:
        fd = no_follow.open_fd(folder / JOB_FILE, os.O_RDONLY)
    except OSError:
        return None, None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(_MAX_JOB_FILE + 1)
    try:
        record = json.loads(data.decode("utf-8")) if len(data) <= _MAX_JOB_FILE else None
    except (UnicodeDecodeError, ValueError):
        record = None
    if not isinstance(record, dict) or record.get("written_by") != "braeburn.lightning":
        return None, None
    return record.get("job"), record.get("fit")


def restarted_run_folder(logs: Path, job: dict[str, str] | None, fit: int = 1) -> Path | None:
    """The run folder of a worker that ``braeburn launch --max-restarts`` restarted: the newest ``version_<N>``
    that this ``job``'s first attempt made for the same ``fit()``. None where there is none, or where ``job`` is
    None (a job braeburn cannot tell from others): never another job's folder."""
    if job is None:
        return None
    for _, path in reversed(versions(logs)):
        if path.is_dir() and not path.is_symlink() and _job_of(path) == (job, fit):
            return path
    return None


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
    if not isinstance(ckpt_path, (str, os.PathLike)):
        raise CheckpointPathError(f"fit(ckpt_path={ckpt_path!r}): a path was expected (a str or pathlib.Path), not "
                                  f"{type(ckpt_path).__name__}; pass a braeburn checkpoint folder, or 'last'")
    path = Path(ckpt_path).expanduser()
    if not path.exists():
        raise CheckpointPathError(f"fit(ckpt_path={str(ckpt_path)!r}): no such file or folder. Pass a braeburn "
                                  "checkpoint folder (lightning_logs/version_N/checkpoint-<step>) or 'last'")
    if not path.is_dir():
        folder = braeburn_folder_of(path)  # version_N/checkpoints/epoch=E-step=S.ckpt, which braeburn wrote
        if folder is not None:
            return str(folder), []  # (the core checks it: its manifest and checksums)
        raise CheckpointPathError(
            f"fit(ckpt_path={str(ckpt_path)!r}) is a file; braeburn.lightning resumes braeburn's checkpoint folders "
            "(lightning_logs/version_N/checkpoint-<step>, or the checkpoints/epoch=E-step=S.ckpt written beside "
            "one), not other .ckpt files (a pickle, which braeburn does not load; one from trainer.save_checkpoint() "
            "holds the weights only). Pass one of those, or 'last'; load weights with Model.load_from_checkpoint, "
            "or resume a Lightning .ckpt with Lightning itself")
    if (path / MANIFEST).is_file() or CHECKPOINT_RE.match(path.resolve().name):
        return str(path), []  # a checkpoint: the core checks it (its manifest and checksums)
    if CheckpointManager(path).checkpoints():
        return _latest_in(path, ckpt_path)
    runs = _runs_with_checkpoints(path)
    if runs:
        raise CheckpointPathError(_folder_of_runs(ckpt_path, path, runs, root))
    raise CheckpointPathError(f"fit(ckpt_path={str(ckpt_path)!r}) is a folder that is no braeburn checkpoint and "
                              "holds none (no checkpoint-<step> folder with a manifest.json). Pass a checkpoint "
                              "folder, the folder of a run that holds them, or 'last'")


def _runs_with_checkpoints(path: Path) -> list[Path]:
    """The version_<N> folders holding checkpoints in ``path`` (a lightning_logs folder) or in its lightning_logs
    (a default_root_dir), oldest first."""
    logs = path if versions(path) else path / LOGS
    return [folder for _, folder in versions(logs) if folder.is_dir() and CheckpointManager(folder).checkpoints()]


def _folder_of_runs(asked: Any, path: Path, runs: list[Path], root: str | Path) -> str:
    """Where ckpt_path names the folder of several runs: which of them hold checkpoints, and what to pass."""
    shown = ", ".join(folder.relative_to(path).as_posix() for folder in runs[-3:])
    shown += f" (and {len(runs) - 3} earlier)" if len(runs) > 3 else ""
    logs = runs[-1].parent
    last = "ckpt_path='last'" if logs.resolve() == logs_folder(root).resolve() else \
        f"ckpt_path='last' with Trainer(default_root_dir={str(logs.parent)!r})"
    return (f"fit(ckpt_path={str(asked)!r}) is a folder of runs, not of checkpoints: its {shown} hold braeburn "
            f"checkpoints. Pass one run's folder to resume its latest checkpoint, e.g. ckpt_path={str(runs[-1])!r}, "
            f"or {last} for the latest checkpoint of the newest run that holds one")


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



def check_ckpt_weights(path: str | os.PathLike, module: torch.nn.Module) -> None:
    """``fit(ckpt_path=<an epoch .ckpt braeburn wrote>)`` resumes the braeburn folder beside the file, whose weights
    ``module`` now holds: the file's ``state_dict`` must be those weights. A file edited after braeburn wrote it
    (other weights, keys added or gone) would otherwise be passed over without a word; it is refused instead. The
    file is read as data only (weights_only: no code in it runs)."""
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001  (any unreadable file: one refusal naming it)
        raise CheckpointPathError(f"fit(ckpt_path={str(path)!r}): the file cannot be read as a Lightning checkpoint "
                                  f"({type(error).__name__}: {error}); pass the braeburn checkpoint folder beside it, "
                                  "or 'last'") from None
    saved = content.get("state_dict") if isinstance(content, Mapping) else None
    current = module.state_dict()
    if not isinstance(saved, Mapping):
        differ = ["state_dict"]
    else:
        differ = sorted(name for name in set(saved) | set(current)
                        if name not in saved or name not in current or not _same_tensor(saved[name], current[name]))
    if differ:
        shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise CheckpointPathError(
            f"fit(ckpt_path={str(path)!r}): braeburn resumes the checkpoint folder beside this file, but the file's "
            f"weights are not that folder's ({shown} differ: was the file changed after braeburn wrote it?). To "
            "start from the file's weights, load them (Model.load_from_checkpoint(path)) and fit without ckpt_path; "
            "to resume the run, pass its checkpoint folder or 'last'")


def _same_tensor(saved: Any, current: Any) -> bool:
    if not (isinstance(saved, torch.Tensor) and isinstance(current, torch.Tensor)):
        return saved == current
    current = current.detach().cpu()
    return saved.dtype == current.dtype and saved.shape == current.shape and torch.equal(saved, current)


__all__ = ["CheckpointPathError", "JOB_FILE", "LOGS", "checkpoint_to_resume", "claim_run_folder", "job_identity",
           "logs_folder", "restarted_run_folder", "versions"]
