"""What runs first in each process of a `braeburn launch` job whose standard output goes to files.

    python -u -mbraeburn.cli.rank_output (script.py | -m module) [script args...]

`braeburn launch` keeps the standard output of every local rank but 0 in files, in a folder it makes
in the temp folder (torchrun's ``--redirects``). When that disk filled up (a small ``/tmp`` tmpfs), the
rank's next ``print`` raised ``OSError: [Errno 28] No space left on device`` and the rank ended, and
with it the whole job. Here such a rank's ``sys.stdout`` becomes a stream whose writes never raise:
the first write that fails is said on standard error (never redirected: it reaches the launcher's
terminal, beside rank 0's output), once per machine, naming the folder and the space left in it, and the
rank's further standard output is dropped. Then the target runs as ``python script.py`` or
``python -m module`` runs it: same ``sys.argv``, ``sys.path[0]``, ``__main__`` and exit status, and an
uncaught error's traceback starts at the script's own frame.

Local rank 0 (whose output is not redirected) runs the target untouched. This module imports nothing
that loads torch, and takes braeburn's modules out of ``sys.modules`` before the target runs, so the
script's own ``import braeburn`` sees the process as a direct start would have.
"""

from __future__ import annotations

import io
import os
import runpy
import shutil
import sys

OUTPUT_DIR_VAR = "BRAEBURN_RANK_OUTPUT_DIR"  # the folder the launcher made for the ranks' output
# An empty file the launcher made in that folder: the rank that deletes it is the one that speaks, so that
# a full disk is said once per machine, not once per rank. Unset: every rank speaks for itself.
SAY_ONCE_VAR = "BRAEBURN_RANK_OUTPUT_SAY_ONCE"


def _size(count: float) -> str:
    if count < 1024:
        return f"{int(count)} bytes"
    for unit in ("KB", "MB", "GB"):
        count /= 1024
        if count < 1024:
            break
    return f"{count:.1f} {unit}"


def _free_space(folder: str) -> str:
    try:
        usage = shutil.disk_usage(folder)
    except OSError as error:
        return f"its free space unknown: {error.strerror or error}"
    return f"{_size(usage.free)} free of {_size(usage.total)}"


def _first_to_speak(token: str | None) -> bool:
    if not token:
        return True
    try:
        os.unlink(token)  # atomic: exactly one rank succeeds, and it needs no free space
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def output_failure_note(error: OSError, folder: str, rank: str) -> str:
    reason = error.strerror or str(error)
    return (f"braeburn launch: warning: rank {rank} could not write its standard output to a file in {folder} "
            f"({reason}; {_free_space(folder)}): its further standard output is dropped, and the job goes on. "
            "To keep it, free space there, or point TMPDIR at a folder with room, or pass "
            "--every-process-prints to see every process's output here.")


class DroppingWriter(io.RawIOBase):
    """Writes to file descriptor ``fd`` until a write fails; then calls ``on_failure`` once, and drops."""

    def __init__(self, fd: int, on_failure) -> None:
        super().__init__()
        self._fd, self._on_failure, self.dropping = fd, on_failure, False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        written = 0
        while not self.dropping and written < len(view):
            try:
                written += os.write(self._fd, view[written:])
            except InterruptedError:
                continue
            except OSError as error:  # ENOSPC, EDQUOT, EFBIG, EIO...: the rank must not end for its log
                self.dropping = True
                self._on_failure(error)
        return len(view)


def _say(note: str) -> None:
    try:
        print(note, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # standard error is gone too: nothing left to say it on


def spare_stdout(folder: str, rank: str, say_once_token: str | None) -> None:
    """Replace sys.stdout (and sys.__stdout__) by a text stream over fd 1 whose writes never raise."""
    def on_failure(error: OSError) -> None:
        if _first_to_speak(say_once_token):
            _say(output_failure_note(error, folder, rank))

    old = sys.stdout
    try:
        fd = old.fileno()
    except (AttributeError, OSError, ValueError):  # no standard output at all: nothing to guard
        return
    stream = io.TextIOWrapper(DroppingWriter(fd, on_failure), encoding=old.encoding, errors=old.errors,
                              write_through=True)  # as `python -u`, which torchrun runs: no buffer to lose
    sys.stdout = sys.__stdout__ = stream


def _forget_braeburn() -> None:
    for name in [name for name in sys.modules if name == "braeburn" or name.startswith("braeburn.")]:
        del sys.modules[name]


def run_target(argv: list[str]) -> None:
    """Run ``script.py args`` or ``-m module args`` as the interpreter would, as ``__main__``."""
    if argv[:1] == ["-m"]:
        sys.argv = argv[1:]  # run_module puts the module's file in sys.argv[0], as `python -m` does
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))  # as `python script.py`
    runpy.run_path(argv[0], run_name="__main__")


def _own_frames_left_out(tb):
    """The traceback from the target's first frame on: the lines of this module and runpy say nothing."""
    own = (_own_frames_left_out.__code__.co_filename, runpy.__file__, "<frozen runpy>")
    while tb is not None and tb.tb_frame.f_code.co_filename in own:
        tb = tb.tb_next
    return tb


def main() -> None:
    folder = os.environ.pop(OUTPUT_DIR_VAR, None)  # read here, not passed on to what the script starts
    if folder and os.environ.get("LOCAL_RANK", "0") != "0":
        spare_stdout(folder, os.environ.get("RANK", os.environ["LOCAL_RANK"]), os.environ.get(SAY_ONCE_VAR))
    os.environ.pop(SAY_ONCE_VAR, None)
    target = sys.argv[1:]
    if not target or target == ["-m"]:
        raise SystemExit("usage: python -mbraeburn.cli.rank_output (script.py | -m module) [args...]")
    _forget_braeburn()
    try:
        run_target(target)
    except Exception as error:  # what the interpreter does with an uncaught error, from the target's frame on
        trimmed = _own_frames_left_out(error.__traceback__)
        sys.excepthook(type(error), error.with_traceback(trimmed), trimmed)  # a hook may read either
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
