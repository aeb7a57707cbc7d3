"""Writes that must never end a run: the metrics log, TensorBoard's event files and the plot.

A full disk (ENOSPC), an I/O error (EIO) or a folder that became read-only fails such a write; training
goes on, and the user learns of it once per file, with the file's name and what is lost. Checkpoints
are handled in checkpoint.py (a failed save fails that save only).
"""

from __future__ import annotations

import sys
from pathlib import Path


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


__all__ = ["WriteWarnings"]
