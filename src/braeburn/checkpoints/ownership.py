"""What braeburn wrote in a folder: a record it keeps there, and the only proof it moves or replaces by.

braeburn moves, replaces or deletes an entry of a folder only when it can prove that it wrote it. The
proof is never a name (``checkpoint-3``, ``metrics.jsonl`` and ``.checkpoint-3.tmp`` are names anybody can
give a file); it is one of:

- the folder's record, ``.braeburn-files.json``: the top-level names braeburn created there, each with its
  kind (``file``, ``folder``, or ``previous-run``: an earlier run set aside). A name is recorded *before*
  the entry is created, and only when the name is free or braeburn's already, so a record never claims a
  file that was there first. The record holds relative names only, so it stays true when the folder is
  copied (``cp -a``) or moved;
- a checkpoint's own ``manifest.json`` (written last by every save) vouching for every file of its folder,
  with their sizes, for a ``checkpoint-N`` folder only, and only in a folder where braeburn ran: one with
  a record, or one a braeburn from before the record wrote (:func:`earlier_braeburn_run`: Trainer
  manifests, all of one run id, and the run's ``metrics.jsonl``). A manifest proves a checkpoint whole, not
  that braeburn wrote it in *this* folder (a copy, a user's ``save_state()`` folder): a first run in a
  folder with no record never moves or replaces a folder on a manifest. :func:`saved_state` is that proof
  alone, for a writer asked for that very folder (``save_state()`` of the same folder).

Records and manifests are read with ``O_NOFOLLOW | O_NONBLOCK``, must be regular files, and are read up
to a size cap: a FIFO, a device, a link or a folder there is refused at once, never waited on.

An entry is braeburn's (:func:`owns`) when one of these vouches for it *and* it is still of the kind
recorded, is not a symbolic link, and is not a mount point. ``.git`` never is, whatever a record says.

The API, for every writer in braeburn's folders (the Trainer, save_model, the Lightning path):

- :func:`claim` ``(folder, {name: kind})`` before creating an entry: records it, or raises
  :class:`ForeignFileError` (one line: the entry, why it is not braeburn's, the fix) when something
  braeburn did not write holds the name. Nothing is recorded then.
- :func:`forget` ``(folder, names)`` after braeburn removed or moved entries.
- :func:`owns`, :func:`foreign` ``(folder, names)``: which names braeburn may replace, which it must not.
- :func:`movable` ``(folder)``: the entries an earlier run left that braeburn may set aside (never a
  dot-file, never a set-aside folder); :func:`set_aside_folders` ``(folder)``: the earlier runs set aside.
- :func:`publish` ``(staging, folder, need)``: move every entry of a staging folder into ``folder``, replacing
  only braeburn's own entries; a foreign one at any of the names refuses the whole move before any of it.
  :func:`staged` ``(folder, need)`` is the same as a ``with`` block: write into the folder it yields.
- :func:`may_write` ``(folder, name, what)``: claim a name for a file written whole, or warn and skip it.

The record is replaced whole at each change (a temporary file renamed over it, fsynced; the temporary
files of a writer killed half-way are removed at the next change), under a lock shared by the threads of
the process (a background checkpoint save, the plot). Across processes, only the output folder's lock
(:mod:`braeburn.checkpoints.output_lock`, held by the Trainer) keeps writers apart: two processes changing one
folder's record outside it (a tracker and a ``save_state()`` in the same parent, another tool) may lose
one change (the later rename wins). A name lost that way is no longer braeburn's: it is refused, never
replaced, so the race costs a refusal, not a file. Only the main process writes the record.

What the record does not prove: that a recorded file still holds what braeburn wrote; it vouches for a
name and a kind, never the content. A file the user rewrote at a recorded name (a ``README.md`` edited
after the model card) or put there after braeburn's was deleted passes for braeburn's: a rerun sets it
aside with the run, and ``--overwrite_output_dir`` may replace it (rotation deletes checkpoints only, which
carry their run's id). Contents are not hashed: ``metrics.jsonl`` grows at every log, and a hash kept up
to date would cost a write per log line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from pathlib import Path

from . import manifest as manifest_io
from . import no_follow

MARKER = ".braeburn-files.json"
STAGING = ".braeburn-staging.tmp"  # where :func:`staged` writes before the files move into place
FILE, FOLDER, SET_ASIDE = "file", "folder", "previous-run"
KINDS = (FILE, FOLDER, SET_ASIDE)
NEVER = frozenset({".git", ".", ".."})  # never braeburn's, whatever a record says
MAX_BYTES = 4 << 20
_CHECKPOINT = re.compile(r"checkpoint-[0-9]+$")  # the Trainer's checkpoint folders (a manifest vouches for them)
_LOCK = threading.RLock()


class ForeignFileError(FileExistsError):
    """An entry that braeburn did not write stands where it would write; nothing was changed."""

    def __str__(self) -> str:
        return self.strerror


class MarkerError(ForeignFileError):
    """The folder's record is not one braeburn wrote (a link, a folder, or not braeburn's JSON)."""


def refusal_of_all(folder: Path, clashes: Mapping[str, str], needs: Mapping[str, str]) -> Exception:
    """One error naming every entry of ``folder`` in ``clashes`` (name -> why it is not braeburn's) with what
    braeburn would write there (``needs``): all at once, so that one move of files is enough, not one per try."""
    if len(clashes) == 1:
        name = next(iter(clashes))
        return refusal(folder / name, clashes[name], needs[name])
    listed = "; ".join(f"{name} ({why}: {needs[name]})" for name, why in clashes.items())
    error = ForeignFileError(errno.EEXIST, f"{len(clashes)} entries of {folder} are not braeburn's, and this run "
                             f"would write there: {listed}. braeburn never moves or replaces a file it did not write. "
                             f"Pass another --output_dir, or move {', '.join(clashes)} out of {folder}.")
    error.why = "; ".join(clashes.values())
    return error


def refusal(path: Path, why: str, need: str, fix: str | None = None, cls: type = ForeignFileError) -> Exception:
    """One line: ``path`` is not braeburn's (``why``), braeburn needs its name (``need``), and the fix."""
    fix = fix or f"Pass another --output_dir, or move {path.name} out of {path.parent}"
    error = cls(errno.EEXIST, f"{path} is not braeburn's ({why}), and {need}. braeburn never moves or replaces a "
                              f"file it did not write. {fix}.")
    error.why = why
    return error


# -- the record ------------------------------------------------------------------------------------
def _valid_name(name: object) -> bool:
    return (isinstance(name, str) and bool(name) and name not in NEVER and "/" not in name and "\\" not in name
            and "\x00" not in name)


def _load(folder: Path) -> dict[str, str] | None:
    """The record's entries; None when there is none; :class:`MarkerError` when it is not braeburn's."""
    path = folder / MARKER
    try:
        data = no_follow.read_capped(path, MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as error:  # a link, a FIFO, a device, a folder, no permission
        raise refusal(path, f"it cannot be read as braeburn's record: {error.strerror or error}",
                      "braeburn keeps its record of the files it wrote there", cls=MarkerError) from None
    try:
        record = json.loads(data.decode("utf-8")) if len(data) <= MAX_BYTES else None
    except (UnicodeDecodeError, ValueError):
        record = None
    entries = record.get("entries") if isinstance(record, dict) and record.get("written_by") == "braeburn" else None
    if not isinstance(entries, dict) or not all(_valid_name(n) and k in KINDS for n, k in entries.items()):
        raise refusal(path, "it is not a record that braeburn wrote", "braeburn keeps its record of the files it "
                      "wrote there", cls=MarkerError)
    return dict(entries)


def recorded(folder: str | os.PathLike) -> dict[str, str]:
    """The names ``folder``'s record vouches for, with their kinds (empty without a readable record)."""
    try:
        return _load(Path(folder)) or {}
    except MarkerError:
        return {}


def _save(folder: Path, entries: Mapping[str, str]) -> None:
    text = json.dumps({"format": 1, "written_by": "braeburn",
                       "about": "the entries of this folder that braeburn wrote: the only ones it moves or replaces",
                       "entries": dict(sorted(entries.items()))}, indent=1)
    _remove_dead_temporaries(folder)
    temporary = None
    try:
        handle, temporary = no_follow.create_temporary(folder / MARKER)
        with handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the rename that makes it the record
        os.replace(temporary, folder / MARKER)
    except OSError as error:
        if temporary is not None:
            no_follow.remove_file(temporary)
        raise type(error)(error.errno, (
            f"braeburn could not write its record of the files it wrote, {str(folder / MARKER)!r}: "
            f"{error.strerror or error}. Nothing of the record changed. Free disk space in {str(folder)!r} "
            "(or make it writable), then run again.")) from None
    except BaseException:
        if temporary is not None:
            no_follow.remove_file(temporary)
        raise
    no_follow.fsync_dir(folder)


_TEMPORARY = re.compile(r"\." + re.escape(MARKER) + r"\.([0-9]+)\.[0-9a-f]{8}\.tmp$")  # create_temporary's names


def _remove_dead_temporaries(folder: Path) -> None:
    """Remove the record's temporary files left by a braeburn process killed while it wrote the record (their
    names carry the writer's pid; a live process's is left): regular files only, never a link's target."""
    try:
        names = [n for n in os.listdir(folder) if _TEMPORARY.match(n)]
    except OSError:
        return
    for name in names:
        pid = int(_TEMPORARY.match(name).group(1))
        if pid != os.getpid() and _alive(pid):
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(folder / name).st_mode):
                os.unlink(folder / name)


def _alive(pid: int) -> bool:
    if os.name == "nt":  # (os.kill there ends the process: never probe, leave the file)
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # (another user's process, or a pid this system cannot have: leave it)
    return True


# -- what is braeburn's ---------------------------------------------------------------------------
def _on_disk(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _mount_points(folder: Path) -> set[str]:
    """Names of ``folder`` that are mount points (Linux's mount table; elsewhere the device check suffices)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return set()
    real, names = os.path.realpath(folder), set()
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # (\040: a space)
            if os.path.dirname(point) == real:
                names.add(os.path.basename(point))
    return names


def why_not(folder: str | os.PathLike, name: str, entries: Mapping[str, str] | None = None) -> str | None:
    """None when the entry ``name`` of ``folder`` is braeburn's (or absent); else why it is not."""
    folder = Path(folder)
    found = _on_disk(folder / name)
    if found is None:
        return None
    if not _valid_name(name):
        return "braeburn never writes there"
    if name == MARKER:
        try:
            _load(folder)
        except MarkerError as error:
            return error.why
        return None
    if stat.S_ISLNK(found.st_mode):
        return "it is a symbolic link, and braeburn never makes one"
    if found.st_dev != os.stat(folder).st_dev or name in _mount_points(folder):
        return "it is a mount point"
    kind = (recorded(folder) if entries is None else entries).get(name)
    is_folder = stat.S_ISDIR(found.st_mode)
    if kind is not None and (kind == FILE) == stat.S_ISREG(found.st_mode) and (kind != FILE) == is_folder:
        return None
    if is_folder and _CHECKPOINT.match(name) and _manifest_vouches(folder / name) and braeburn_ran_here(folder):
        return None
    if kind is not None:
        return f"braeburn recorded a {kind} of that name, and a {'folder' if is_folder else 'file'} is there now"
    return f"no record of braeburn's ({MARKER}) names it"


def _manifest_vouches(path: Path) -> bool:
    """A checkpoint's manifest.json that lists every file of ``path`` with its size."""
    try:
        data = manifest_io.read(path)
    except manifest_io.ManifestError:
        return False
    return data is not None and manifest_io.problem(path, data) is None


def saved_state(path: str | os.PathLike) -> bool:
    """A folder that a braeburn save wrote: its manifest vouches for every file in it. This proves the folder's
    integrity, not that braeburn wrote it *there* (it may be a copy): only a writer asked for that very folder
    (save_state() of the same folder, the Accelerator's own numbered checkpoints) may replace it on this proof."""
    path = Path(path)
    return path.is_dir() and not path.is_symlink() and _manifest_vouches(path)


def _run_id(checkpoint: Path) -> str | None:
    """The run id in a checkpoint's trainer_state.json (read capped, never blocking), or None."""
    try:
        state = json.loads(no_follow.read_capped(checkpoint / "trainer_state.json", MAX_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    run = state.get("run_id") if isinstance(state, dict) else None
    return run if isinstance(run, str) and run else None


def earlier_braeburn_run(folder: str | os.PathLike) -> dict[str, str]:
    """What a braeburn from before the record wrote in ``folder`` (which has no record): its ``checkpoint-N``
    folders, each vouched for by a Trainer manifest (with the step) and all of one run (the run id in their
    trainer_state.json), and its metrics log (``metrics.jsonl``, JSON lines with a step). Empty unless all of
    that holds: a folder of the user's, or a checkpoint copied in, is never taken for an earlier run. The metrics
    log is the run's when its first records are the ones the newest checkpoint's trainer_state.json logged."""
    folder = Path(folder)
    checkpoints = [p for p in folder.iterdir() if _CHECKPOINT.match(p.name)] if folder.is_dir() else []
    runs, steps = set(), {}
    for path in checkpoints:
        try:
            data = manifest_io.read(path) if path.is_dir() and not path.is_symlink() else None
        except manifest_io.ManifestError:
            data = None
        if data is None or not isinstance(data.get("step"), int) or manifest_io.problem(path, data) is not None:
            return {}
        runs.add(_run_id(path))
        steps[data["step"]] = path
    if len(runs) != 1 or None in runs or not _metrics_log(folder / "metrics.jsonl", steps[max(steps)]):
        return {}
    return {**{p.name: FOLDER for p in checkpoints}, "metrics.jsonl": FILE}


def _metrics_log(path: Path, checkpoint: Path) -> bool:
    """Whether ``path``, a regular file, holds the records ``checkpoint``'s trainer_state.json logged, in order (its
    log_history: each of its records the same keys and values as one line of braeburn's metrics log, which may
    hold more keys and more lines: the Transformers-style Trainer's log_history keeps Transformers' keys only)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        lines = no_follow.read_capped(path, 1 << 20).split(b"\n")[:-1]  # complete lines only
        records = [json.loads(line.decode("utf-8")) for line in lines[:256]]
        state = json.loads(no_follow.read_capped(checkpoint / "trainer_state.json", MAX_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list) or not history or not records:
        return False
    return _logged_in_order(records, history)


def _logged_in_order(records: list[Any], history: list[Any]) -> bool:
    """Every record of ``history`` up to the last step ``records`` reached is, in order, within a line of them."""
    matched = 0
    for record in records:
        if matched < len(history) and _within(history[matched], record):
            matched += 1
    last = max((r["step"] for r in records if isinstance(r, dict) and isinstance(r.get("step"), int)), default=-1)
    due = sum(1 for h in history if isinstance(h, dict) and isinstance(h.get("step"), int) and h["step"] <= last)
    return matched >= max(1, due)


def _within(logged: Any, record: Any) -> bool:
    return (isinstance(logged, dict) and isinstance(record, dict)
            and all(key in record and record[key] == value for key, value in logged.items()))


def unrecorded_run(folder: str | os.PathLike) -> dict[str, str]:
    """In a folder without a record, the entries that a braeburn from before the record provably wrote
    (:func:`earlier_braeburn_run`); empty where a record exists or nothing is proven. A file braeburn cannot
    prove it wrote is never among them."""
    folder = Path(folder)
    return {} if os.path.lexists(folder / MARKER) else earlier_braeburn_run(folder)


def adopt(folder: str | os.PathLike, proven: Mapping[str, str]) -> None:
    """Record ``proven`` (:func:`unrecorded_run`'s entries) as braeburn's, once nothing refused the run: a resume
    then appends to the log and replaces the checkpoints as in any folder of braeburn's. Never over a record."""
    folder = Path(folder)
    with _LOCK:
        if proven and not os.path.lexists(folder / MARKER):
            _save(folder, proven)


def braeburn_ran_here(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a record of braeburn's (a run wrote there), or the files of a braeburn run from
    before the record (:func:`earlier_braeburn_run`). Without either, no manifest makes an entry braeburn's."""
    try:
        if _load(Path(folder)) is not None:
            return True
    except MarkerError:
        return False
    return bool(earlier_braeburn_run(folder))


def owns(folder: str | os.PathLike, name: str) -> bool:
    """Whether ``folder/name`` exists and braeburn can prove that it wrote it."""
    return _on_disk(Path(folder) / name) is not None and why_not(folder, name) is None


def foreign(folder: str | os.PathLike, names: Iterable[str],
            proven: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``names`` that exist in ``folder`` and are not braeburn's, each with why not. ``proven``: entries
    :func:`unrecorded_run` proved, counted as recorded."""
    entries = {**recorded(folder), **(proven or {})}
    reasons = {name: why_not(folder, name, entries) for name in names}
    return {name: why for name, why in reasons.items() if why is not None}


def movable(folder: str | os.PathLike) -> dict[str, str]:
    """What braeburn may set aside in ``folder``: its own entries (recorded or vouched for by a checkpoint
    manifest), with their kinds; never a dot-file, never an earlier run already set aside."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    entries = recorded(folder)
    candidates = dict(entries)
    for path in folder.iterdir():
        if path.name not in candidates and path.is_dir() and not path.is_symlink():
            candidates[path.name] = FOLDER  # proven below by its manifest, or left alone
    return {name: kind for name, kind in sorted(candidates.items())
            if not name.startswith(".") and kind != SET_ASIDE and _on_disk(folder / name) is not None
            and why_not(folder, name, entries) is None}


def set_aside_folders(folder: str | os.PathLike) -> list[str]:
    """The earlier runs that braeburn set aside in ``folder`` (recorded as such, still there), oldest first."""
    entries = recorded(folder)
    names = [n for n, kind in entries.items() if kind == SET_ASIDE and owns(folder, n)]
    return sorted(names, key=lambda n: (len(n), n))


# -- changing the record ----------------------------------------------------------------------------
def claim(folder: str | os.PathLike, entries: Mapping[str, str], need: str | None = None,
          fix: str | None = None) -> None:
    """Record ``entries`` (name -> kind) of ``folder`` as braeburn's, before they are created.

    Raises :class:`ForeignFileError` naming the first name held by an entry braeburn did not write
    (``need`` says what braeburn would write there, ``fix`` what to do); nothing is recorded then.
    """
    folder = Path(folder)
    with _LOCK:
        current = _load(folder) or {}
        for name, kind in entries.items():
            if kind not in KINDS or not _valid_name(name):
                raise ValueError(f"claim({name!r}, {kind!r}): a plain name and one of {KINDS}")
            why = why_not(folder, name, current)
            if why is not None:
                raise refusal(folder / name, why, need or f"braeburn would write {name} there", fix)
        if any(current.get(name) != kind for name, kind in entries.items()):
            _save(folder, {**current, **entries})


def adopt_saved(folder: str | os.PathLike) -> None:
    """Record the files of a state braeburn has just saved in ``folder`` (its manifest vouches for each) as
    braeburn's, so that a writer asked for that very folder may replace them: a Trainer subclass's save_model()
    into the checkpoint, called as Transformers' checkpoints call it. Nothing is recorded for a folder whose
    manifest does not vouch for all of it."""
    folder = Path(folder)
    if not saved_state(folder):
        return
    names = {name: FILE for name in manifest_io.listed_files(folder) if "/" not in name and name != MARKER
             and _valid_name(name)}
    with _LOCK:
        current = _load(folder) or {}
        _save(folder, {**current, **names})


def forget(folder: str | os.PathLike, names: Iterable[str]) -> None:
    """Drop ``names`` from ``folder``'s record (braeburn removed or moved them). Never fails: a record that
    keeps a name no longer there (the disk was full) vouches for nothing, and :func:`prune` drops it later."""
    folder, names = Path(folder), set(names)
    with _LOCK:
        try:
            current = _load(folder)
            kept = {name: kind for name, kind in (current or {}).items() if name not in names}
            if current is not None and kept != current:
                _save(folder, kept)
        except OSError:
            pass


def prune(folder: str | os.PathLike) -> None:
    """Drop the recorded names that no longer exist (a run's start, under the output folder's lock)."""
    folder = Path(folder)
    forget(folder, [name for name in recorded(folder) if _on_disk(folder / name) is None])


# -- writing ---------------------------------------------------------------------------------------
def may_write(folder: str | os.PathLike, name: str, what: str) -> bool:
    """Claim ``folder/name`` for a file written whole (``what`` says which), or say on stderr why braeburn
    leaves it alone and return False: the write is skipped, nothing else fails."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        claim(folder, {name: FILE}, f"{what} would write it")
    except ForeignFileError as error:
        print(f"braeburn: warning: {error} {what} was not written; the rest goes on.", file=sys.stderr, flush=True)
        return False
    return True


@contextlib.contextmanager
def staged(folder: str | os.PathLike, need: str, fix: str | None = None) -> Iterator[Path]:
    """A fresh staging folder inside ``folder`` to write into; on success its entries replace braeburn's own
    of the same names (:func:`publish`), and a foreign entry at any name refuses them all. Removed after."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    staging, had_record = folder / STAGING, os.path.lexists(folder / MARKER)
    claim(folder, {STAGING: FOLDER}, "braeburn writes into it before moving the files into place", fix)
    no_follow.remove_tree(staging)  # (left by a killed write: braeburn's, its record says)
    staging.mkdir()
    try:
        yield staging
        publish(staging, folder, need, fix)
    finally:
        no_follow.remove_tree(staging)
        forget(folder, [STAGING])
        if not had_record and not recorded(folder):  # refused: the folder is left as it was
            no_follow.remove_file(folder / MARKER)


def publish(staging: str | os.PathLike, folder: str | os.PathLike, need: str, fix: str | None = None) -> list[str]:
    """Move each entry of ``staging`` into ``folder`` (a rename: no link is followed), replacing only
    braeburn's own entries there; the names moved. A foreign entry at any name refuses the whole move
    (:class:`ForeignFileError`) before anything is moved. ``staging`` is left empty."""
    staging, folder = Path(staging), Path(folder)
    names = sorted(p.name for p in staging.iterdir())
    kinds = {name: FOLDER if (staging / name).is_dir() and not (staging / name).is_symlink() else FILE
             for name in names}
    with _LOCK:
        claim(folder, kinds, need, fix)
        for name in names:
            if kinds[name] == FOLDER and (folder / name).is_dir():
                no_follow.remove_tree(folder / name)  # braeburn's own (claim proved it)
            os.replace(staging / name, folder / name)
        no_follow.fsync_dir(folder)
    return names


__all__ = ["FILE", "FOLDER", "ForeignFileError", "KINDS", "MARKER", "MarkerError", "SET_ASIDE", "STAGING",
           "adopt", "adopt_saved", "braeburn_ran_here", "claim", "earlier_braeburn_run", "foreign", "forget",
           "may_write", "movable", "owns", "prune", "publish", "recorded", "refusal", "refusal_of_all", "saved_state",
           "set_aside_folders", "staged", "unrecorded_run", "why_not"]
