"""braeburn's warnings: real Python warnings (a filter or ``pytest.warns`` still catches them), printed as one line.

Python prints a warning as ``file:line: Category: message`` and then the source line at that place. For a warning
braeburn gives about a run (a scheduler's steps, float64 data cast), that place is inside braeburn, and the line
of braeburn's code printed under it only puzzles the reader: a :class:`BraeburnWarning` prints as its message alone.
"""

from __future__ import annotations

import threading
import warnings

# Python's own formatter, for a warning that comes back to this one through the formatter it passes warnings on to
_PYTHON_FORMAT = getattr(warnings, "_formatwarning_orig", warnings.formatwarning)
_passing_on = threading.local()


class BraeburnWarning(UserWarning):
    """Something about the run the user should know; the message says what and what to do."""


def _one_line(message, category, filename, lineno, line=None) -> str:
    if isinstance(category, type) and issubclass(category, BraeburnWarning):
        text = str(message)
        return (text if text.startswith("braeburn") else f"braeburn: {text}") + "\n"
    if getattr(_passing_on, "active", False):
        # The formatter installed before this one passes warnings back to it (another library wrapped this one,
        # and this one was installed again over it, as Lightning's formatter does): Python's own ends the circle.
        return _PYTHON_FORMAT(message, category, filename, lineno, line)
    _passing_on.active = True
    try:
        return _one_line.previous(message, category, filename, lineno, line)
    finally:
        _passing_on.active = False


_one_line.previous = warnings.formatwarning


def warn(message: str, stacklevel: int = 2) -> None:
    """Warn with a :class:`BraeburnWarning` (printed without the source line)."""
    if warnings.formatwarning is not _one_line:  # installed on first use; whatever was there still formats the rest
        _one_line.previous = warnings.formatwarning
        warnings.formatwarning = _one_line
    warnings.warn(message, BraeburnWarning, stacklevel=stacklevel + 1)


__all__ = ["BraeburnWarning", "warn"]
