"""A run started in a folder that an earlier run filled: the earlier files are set aside, never written over.

Transformers 5 removed ``--overwrite_output_dir`` and trains into a non-empty ``output_dir``, writing over
what is there: rerunning a command writes over the earlier run's checkpoints and model. braeburn lets the
rerun start, as Transformers 5 does, and first moves what the folder holds into ``previous-run-N/`` inside
it (a rename: no copy, no link followed), saying so in one line. ``--overwrite_output_dir`` (Transformers
4's flag) keeps the files in place, and ``--resume_from_checkpoint`` continues the run saved there.
"""

from __future__ import annotations

import re
from pathlib import Path

PREFIX = "previous-run-"
_SET_ASIDE = re.compile(re.escape(PREFIX) + r"(\d+)$")


def earlier_entries(folder: Path, ignore: set[str]) -> list[str]:
    """What an earlier run left in ``folder`` (names, sorted): not ``ignore``, not a run already set aside."""
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name not in ignore and not _SET_ASIDE.match(p.name))


def set_aside(folder: Path, names: list[str]) -> Path:
    """Move ``names`` of ``folder`` into a new ``previous-run-N/`` of it (the first free N); its path."""
    taken = [int(m.group(1)) for p in folder.iterdir() if (m := _SET_ASIDE.match(p.name))]
    target = folder / f"{PREFIX}{max(taken, default=0) + 1}"
    target.mkdir()
    for name in names:
        (folder / name).rename(target / name)
    return target


def note(folder: Path, target: Path, names: list[str]) -> str:
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"braeburn: output_dir={str(folder)!r} held an earlier run ({shown}); moved to {target.name}/ so that "
            "nothing of it is written over (Transformers 5 writes over it; --overwrite_output_dir keeps the files "
            "where they are, --resume_from_checkpoint latest continues that run).")


__all__ = ["PREFIX", "earlier_entries", "note", "set_aside"]
