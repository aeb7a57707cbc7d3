"""One clear message for braeburn's own errors; the full traceback only when asked for.

Scripts end with ``run_main(main)`` instead of ``main()``. An error that braeburn raised on purpose
(a :class:`ConfigError` or :class:`PlanError`, a checkpoint that cannot be used, a missing data
folder: each message already says what was passed, why it cannot work and the fix) is printed as
one ``error: ...`` paragraph on stderr, with exit status 2 for configuration errors and 1 for the
rest. ``--debug`` on the command line or ``BRAEBURN_DEBUG=1`` shows the full traceback instead.

An error raised from deep inside torch or another library is *not* shortened: that is either a bug
in the user's model or a bad input braeburn failed to check, and the traceback is what finds it.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEBUG_FLAG = "--debug"
DEBUG_VAR = "BRAEBURN_DEBUG"
_PACKAGE_DIR = Path(__file__).resolve().parent


class UnsafeFileError(Exception):
    """A file that would run code when loaded (a pickle of arbitrary objects); it was not loaded."""


class MalformedFileError(UnsafeFileError):
    """A file that is not what its format says (a truncated, altered or hostile safetensors file): the message
    names the file and what is wrong with it; nothing was loaded from it."""


_noted: set[str] = set()


def note_once(message: str) -> None:
    """A note on stderr, once per process: something the user should know (a difference from a peer, an option
    that does not do what it may seem to), which is not an error."""
    if message not in _noted:
        _noted.add(message)
        print(f"braeburn: {message}", file=sys.stderr, flush=True)


class StateMismatchError(RuntimeError):
    """A well-formed saved file that does not fit the object it is loaded into (another model's weights, another
    optimizer's state). ``detail`` names the file and what does not fit, in one line; the message adds the fix."""

    def __init__(self, detail: str, fix: str):
        super().__init__(f"{detail}. {fix}")
        self.detail = detail


def one_line(error: BaseException) -> str:
    """torch's ``load_state_dict`` error on one line, without its "Error(s) in loading state_dict for X:" head."""
    lines = [line.strip().rstrip(".").strip() for line in str(error).splitlines()]
    if lines and lines[0].startswith("Error(s) in loading state_dict"):
        lines = lines[1:]
    return "; ".join(line for line in lines if line) or type(error).__name__


def debug_requested(argv: list[str] | None = None) -> bool:
    """``--debug`` among the arguments, or BRAEBURN_DEBUG set to a true value."""
    args = sys.argv[1:] if argv is None else argv
    return DEBUG_FLAG in args or os.environ.get(DEBUG_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def _raised_in(error: BaseException, folders: tuple[Path, ...]) -> bool:
    """Whether the innermost frame of ``error``'s traceback is in one of ``folders`` (on purpose, not deep)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return False
    where = Path(frames[-1].filename).resolve()
    return any(where.is_relative_to(folder) for folder in folders)


def _raised_by_the_script_itself(error: BaseException, script_dir: Path) -> bool:
    """Whether every frame below ``run_main`` is in ``script_dir``: the script's own check, not a function of
    it (a ``collate_fn``, a loss, a model) that braeburn or torch called back, where a raise is a bug."""
    frames = [Path(f.filename).resolve() for f in traceback.extract_tb(error.__traceback__)]
    frames = [where for where in frames if where != Path(__file__).resolve()]  # run_main's own frame
    return bool(frames) and all(where.is_relative_to(script_dir) for where in frames)


def is_user_error(error: BaseException, script_dir: Path | None = None) -> bool:
    """A configuration or input error that braeburn (or the script beside it) raised with its fix."""
    from .plan.rules import PlanError
    from .trainer._argparse import ConfigError

    if isinstance(error, (ConfigError, PlanError, UnsafeFileError)):
        return True
    if not isinstance(error, (ValueError, TypeError, OSError, RuntimeError, LookupError)):
        return False
    return _raised_in(error, (_PACKAGE_DIR,)) or (script_dir is not None
                                                   and _raised_by_the_script_itself(error, script_dir))


def exit_status(error: BaseException) -> int:
    from .plan.rules import PlanError
    from .trainer._argparse import ConfigError

    return 2 if isinstance(error, (ConfigError, PlanError)) else 1


def run_main(fn: Callable[[list[str]], Any], argv: list[str] | None = None) -> Any:
    """Call ``fn(argv)`` (``--debug`` removed); turn braeburn's own errors into one message and an exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested(argv)
    args = [arg for arg in argv if arg != DEBUG_FLAG]
    script = getattr(sys.modules.get(getattr(fn, "__module__", ""), None), "__file__", None)
    script_dir = Path(script).resolve().parent if script else None
    try:
        return fn(args)
    except Exception as error:
        if debug or not is_user_error(error, script_dir):
            raise
        print(f"error: {error}\n(run with {DEBUG_FLAG} or {DEBUG_VAR}=1 for the full traceback)", file=sys.stderr)
        raise SystemExit(exit_status(error)) from None


__all__ = ["MalformedFileError", "StateMismatchError", "UnsafeFileError", "debug_requested", "exit_status",
           "is_user_error", "note_once", "one_line", "run_main"]
