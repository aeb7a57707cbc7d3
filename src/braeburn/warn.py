"""braeburn's warnings: real Python warnings (a filter or ``pytest.warns`` still catches them), printed as one line.

Python prints a warning as ``file:line: Category: message`` and then the source line at that place. For a warning
braeburn gives about a run (a scheduler's steps, float64 data cast), that place is inside braeburn, and the line
of braeburn's code printed under it only puzzles the reader: a :class:`BraeburnWarning` prints as its message alone.
"""

from __future__ import annotations

import warnings


class BraeburnWarning(UserWarning):
    """Something about the run the user should know; the message says what and what to do."""


def _one_line(message, category, filename, lineno, line=None) -> str:
    if isinstance(category, type) and issubclass(category, BraeburnWarning):
        text = str(message)
        return (text if text.startswith("braeburn") else f"braeburn: {text}") + "\n"
    return _one_line.previous(message, category, filename, lineno, line)


_one_line.previous = warnings.formatwarning


def warn(message: str, stacklevel: int = 2) -> None:
    """Warn with a :class:`BraeburnWarning` (printed without the source line)."""
    if warnings.formatwarning is not _one_line:  # installed on first use; whatever was there still formats the rest
        _one_line.previous = warnings.formatwarning
        warnings.formatwarning = _one_line
    warnings.warn(message, BraeburnWarning, stacklevel=stacklevel + 1)


__all__ = ["BraeburnWarning", "warn"]
