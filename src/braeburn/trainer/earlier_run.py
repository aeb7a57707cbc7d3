"""A run started where an earlier braeburn run wrote: braeburn's files of that run are set aside, all or none.

Transformers 5 removed ``--overwrite_output_dir`` and trains into a non-empty ``output_dir``, writing over
what is there. braeburn lets the rerun start, as Transformers 5 does, and first moves the entries that it
can prove it wrote there (:mod:`braeburn.checkpoints.ownership`: its record, or a checkpoint's manifest) into a new
``previous-run-N/`` inside the folder: renames, so no copy is made and no link is followed. Nothing else
moves: not ``.git``, not a dot-file, not a mount point, not a link, not a file braeburn did not write.

The move is all or nothing. ``previous-run-N`` is recorded as braeburn's before it is made, and it gets a
record of its own listing the entries before they move into it, so a kill half-way leaves every entry
recorded where it lies. When one rename fails (a busy entry, a read-only folder, another user's entry in a
sticky folder), the entries already moved are moved back, ``previous-run-N`` is removed, and one line
says what failed, that the folder is as it was, and what to do.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..checkpoints import no_follow, ownership

PREFIX = "previous-run-"
_SET_ASIDE = re.compile(re.escape(PREFIX) + r"(\d+)$")


class SetAsideError(OSError):
    """The earlier run could not be set aside; what was moved has been moved back."""

    def __str__(self) -> str:
        return self.strerror


def _free_name(folder: Path) -> str:
    """``previous-run-N`` with N above every such name in ``folder`` (so that the numbers keep the order)."""
    taken = [int(m.group(1)) for p in folder.iterdir() if (m := _SET_ASIDE.match(p.name))]
    return f"{PREFIX}{max(taken, default=0) + 1}"


def set_aside(folder: Path, entries: Mapping[str, str]) -> Path:
    """Move ``entries`` (name -> kind, all braeburn's) of ``folder`` into a new ``previous-run-N/``; its path.
    Raises :class:`SetAsideError` with the folder as it was when any of the moves fails."""
    target = folder / _free_name(folder)
    ownership.claim(folder, {target.name: ownership.SET_ASIDE}, "braeburn sets the earlier run aside under that name")
    moved: list[str] = []
    try:
        target.mkdir()
        ownership.claim(target, dict(entries))  # recorded there before they move: a kill leaves both records true
        for name in entries:
            os.rename(folder / name, target / name)  # (same folder: a rename never copies, never follows a link)
            moved.append(name)
    except OSError as error:
        failed = next((name for name in entries if name not in moved), target.name)
        raise _undo(folder, target, moved, failed, error) from None
    ownership.forget(folder, list(entries))
    return target


def _undo(folder: Path, target: Path, moved: list[str], failed: str, error: OSError) -> SetAsideError:
    """Move ``moved`` back from ``target`` and remove it; the error that says what happened."""
    stuck = []
    for name in reversed(moved):
        try:
            os.rename(target / name, folder / name)
        except OSError:
            stuck.append(name)
    if not stuck:
        try:
            no_follow.remove_file(target / ownership.MARKER)
            target.rmdir()
        except OSError:
            pass  # (an empty previous-run-N left, recorded as braeburn's: harmless)
        if not target.exists():
            ownership.forget(folder, [target.name])
    reason = f"moving {failed} into {target.name}/ failed: {_why(error, failed)}"
    outcome = ("Nothing was moved: the folder is as it was." if not stuck else
               f"{len(stuck)} of the entries moved could not be moved back and are in {target}: "
               f"{', '.join(sorted(stuck))}; move them back by hand.")
    return SetAsideError(error.errno or errno.EIO, (
        f"output_dir={str(folder)!r} holds an earlier braeburn run, which braeburn sets aside before training "
        f"there, but {reason}. {outcome} Continue that run with --resume_from_checkpoint latest, train over "
        "braeburn's files in place with --overwrite_output_dir, or pass another --output_dir."))


def _why(error: OSError, name: str) -> str:
    text = error.strerror or str(error) or type(error).__name__
    hint = {errno.EBUSY: f"{name} is in use (a mount point, or a file held open)",
            errno.EACCES: f"{name} is read-only (a folder must be writable to move) or another user's",
            errno.EPERM: f"{name} is another user's in a folder where only owners may move entries, or locked",
            errno.EROFS: "the file system is read-only",
            errno.EXDEV: f"{name} is on another file system"}.get(error.errno)
    return f"{text} ({hint})" if hint else text


def note(folder: Path, target: Path, names: list[str], newest: Path | None, left: int) -> str:
    """The line that says what was set aside, what stayed, and how to continue the run set aside."""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    stayed = ("" if not left else " The 1 other entry, not braeburn's, stays where it is." if left == 1
              else f" The {left} other entries, not braeburn's, stay where they are.")
    resume = (f" To continue that run instead, stop this one and pass --resume_from_checkpoint {newest}."
              if newest is not None else "")
    return (f"braeburn: output_dir={str(folder)!r} held an earlier run ({shown}); braeburn's files of it moved to "
            f"{target.name}/ so that nothing of it is written over (Transformers 5 writes over it; "
            f"--overwrite_output_dir trains over braeburn's files in place).{stayed}{resume}")


__all__ = ["PREFIX", "SetAsideError", "note", "set_aside"]
