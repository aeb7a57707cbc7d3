"""Writes that must never end a run: the metrics log, TensorBoard's event files and the plot.

A full disk (ENOSPC), an I/O error (EIO) or a folder that became read-only fails such a write; training
goes on, and the user learns of it once per file, with the file's name and what is lost. Checkpoints
are handled in checkpoint.py (a failed save fails that save only). An output folder that cannot be
written at all is refused before training starts (:func:`prepare_output_dir`).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ..plan.option_spelling import given, option


class WriteWarnings:
    """Says once per file that a write to it failed, and what happens instead."""

    def __init__(self) -> None:
        self._warned: set[str] = set()

    def failed(self, path: Path | str, error: OSError, consequence: str) -> None:
        if str(path) in self._warned:
            return
        self._warned.add(str(path))
        reason = error.strerror or str(error) or type(error).__name__
        print(f"braeburn: warning: cannot write {path} ({reason}); {consequence}. Training goes on.",
              file=sys.stderr, flush=True)


class OutputDirError(OSError):
    """The output folder cannot be created or written (braeburn checks it before training)."""


def prepare_output_dir(folder: Path) -> None:
    """Create ``folder`` and prove it takes a file, or raise one clear error naming it and the fix.

    Checked once at the start (a probe file written and removed), so that a read-only parent, a
    read-only file system or a missing permission is said before any step, not as a traceback, nor as a
    run that trains for hours and saves nothing.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".braeburn-write-probe-", dir=folder)  # a new name: never a file there
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        blocked = next((p for p in (folder, *folder.parents) if p.exists()), folder)
        where = "it" if blocked == folder else f"its parent {str(blocked)!r}"
        reason = error.strerror or str(error)
        raise OutputDirError(f"{given('output_dir', str(folder))} cannot be written: {where} refuses it ({reason}). "
                             f"Pass {option('output_dir')} in a folder you can write to, or make that folder "
                             "writable.") from None


__all__ = ["OutputDirError", "WriteWarnings", "prepare_output_dir"]
