"""What runs first in each process of a `braeburn launch` job whose standard output goes to files.

    python -u -c "<'' off sys.path>; from braeburn.cli.rank_output import main; main()" (script.py | -m mod) [args]

(`python -u -m braeburn.cli.rank_output ...` works too.) `braeburn launch` keeps the standard output of every
local rank but 0 in files, in a folder it makes in the temp folder (torchrun's ``--redirects``). When that disk
filled up (a small ``/tmp`` tmpfs), the rank's next ``print`` raised ``OSError: [Errno 28] No space left on
device`` and the rank ended, and with it the whole job; so did a DataLoader worker or any other child that
printed, since children write to the file descriptor, not to Python's ``sys.stdout``.

So here, before the target runs, descriptor 1 (and 2, when it is a file too) becomes the write end of a pipe,
which the rank's children inherit. A small copier process reads the pipe and writes to the real file; the
first write that fails is said on standard error (never redirected: it reaches the launcher's terminal, beside
rank 0's output), once per machine, with the cause (and the space left, for a full disk or a quota), and the
rest of that stream is read and dropped: no writer ever sees the error. The copier is a process, not a thread,
so that what a rank wrote just before it crashed or was killed still reaches the file, and the rank stays a
single-threaded process as in a direct start; it is started by a double fork, so it is no child of the rank
(a script that reaps or kills its own children never meets it) and it ignores the stop signals: it ends when
every writer has closed the pipe. At exit the rank closes its end and waits (a few seconds at most) for the
copier to finish, so the file is complete when the job's end is seen.

Then the target runs as ``python script.py`` or ``python -m module`` runs it: a fresh ``__main__`` module that
stays in ``sys.modules`` (threads and atexit handlers that run after the script's last line can still pickle its
classes), ``__file__`` absolute, code compiled with that name, the same ``sys.argv``, ``sys.path[0]`` (none
with PYTHONSAFEPATH), exit status, ``sys.last_value`` after an uncaught error, and a traceback that starts at
the script's own frame. The launcher starts this module with ``''`` taken off ``sys.path``, so that a
``token.py`` or ``platform.py`` in the working folder is never imported in place of the standard library's.

Local rank 0 (whose output is not redirected) runs the target untouched. This module imports nothing that
loads torch, and takes braeburn's modules out of ``sys.modules`` before the target runs, so the script's own
``import braeburn`` sees the process as a direct start would have.
"""

from __future__ import annotations

import atexit
import builtins
import errno
import io
import os
import runpy
import selectors
import signal
import stat
import sys
import types
import zipfile

OUTPUT_DIR_VAR = "BRAEBURN_RANK_OUTPUT_DIR"  # the folder the launcher made for the ranks' output
# An empty file the launcher made in that folder: the rank that deletes it is the one that speaks, so that
# a full disk is said once per machine, not once per rank. Unset: every rank speaks for itself.
SAY_ONCE_VAR = "BRAEBURN_RANK_OUTPUT_SAY_ONCE"
# The causes for which free space is worth naming: a full disk, a quota, a file-size limit.
LACK_OF_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
FINISH_WAIT_S = 5.0  # at exit, the longest a rank waits for its copier (only a child still holding the pipe delays it)
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
                      if hasattr(signal, name))


def _size(count: float) -> str:
    if count < 1024:
        return f"{int(count)} bytes"
    for unit in ("KB", "MB", "GB", "TB"):
        count /= 1024
        if count < 1024:
            break
    return f"{count:.1f} {unit}"


def _free_space(fd: int) -> str:
    try:
        usage = os.fstatvfs(fd)
    except OSError as error:
        return f"its free space unknown: {error.strerror or error}"
    return f"{_size(usage.f_bavail * usage.f_frsize)} free of {_size(usage.f_blocks * usage.f_frsize)}"


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


class Stream:
    """One guarded descriptor: ``fd`` (1 or 2) becomes the pipe's write end; ``real`` is the file it was."""

    def __init__(self, fd: int, name: str, where: str, advice: str) -> None:
        self.fd, self.name, self.where, self.advice = fd, name, where, advice
        self.real = os.dup(fd)
        self.read, self.write = os.pipe()
        self.dropping = False

    def close_pipe(self) -> None:
        for end in (self.read, self.write):
            try:
                os.close(end)
            except OSError:
                pass


def output_failure_note(error: OSError, stream: Stream, rank: str, room: str) -> str:
    """The one warning: which rank, which stream, where, the cause; free space only when space is the cause."""
    reason = error.strerror or str(error)
    if error.errno in LACK_OF_ROOM:
        return (f"braeburn launch: warning: rank {rank} could not write its {stream.name} to {stream.where} "
                f"({reason}; {room}): its further {stream.name} is dropped, and the job goes on. To keep it, "
                f"{stream.advice}, or pass --every-process-prints to see every process's output here.")
    return (f"braeburn launch: warning: rank {rank} could not write its {stream.name} to {stream.where} "
            f"({reason}): its further {stream.name} is dropped, and the job goes on. Pass --every-process-prints "
            "to see every process's output here.")


def _streams(folder: str) -> list[Stream]:
    """Descriptor 1 (redirected by torchrun to a file in ``folder``), and 2 where it is a file as well."""
    streams = []
    try:
        streams.append(Stream(1, "standard output", f"a file in {folder}",
                              "free space there, or point TMPDIR at a folder with room"))
    except OSError:  # no descriptor 1 at all: nothing to guard
        pass
    try:
        if stat.S_ISREG(os.fstat(2).st_mode):  # `braeburn launch ... 2>file`: a full disk ends a rank there too
            path = os.readlink("/proc/self/fd/2") if os.path.exists("/proc/self/fd/2") else "its file"
            streams.append(Stream(2, "standard error", path, "free space there"))
    except OSError:
        pass
    return streams


def _copy_until_every_writer_is_gone(streams: list[Stream], rank: str, token: str | None) -> None:
    """The copier's loop: pipe -> real file; after a failed write, read and drop. Ends at end of file."""
    selector = selectors.DefaultSelector()
    for stream in streams:
        selector.register(stream.read, selectors.EVENT_READ, stream)
    said = False
    while selector.get_map():
        for key, _ in selector.select():
            stream = key.data
            data = os.read(stream.read, 1 << 16)
            if not data:
                selector.unregister(stream.read)
                continue
            error = None if stream.dropping else _write_all(stream.real, data)
            if error is not None:
                stream.dropping = True
                if not said and _first_to_speak(token):
                    _say(output_failure_note(error, stream, rank, _free_space(stream.real)))
                said = True


def _write_all(fd: int, data: bytes) -> OSError | None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except InterruptedError:
            continue
        except OSError as error:  # ENOSPC, EDQUOT, EFBIG, EIO...: the rank must not end for its log
            return error
    return None


def _say(note: str) -> None:
    try:
        os.write(2, (note + "\n").encode("utf-8", "replace"))  # the copier's own descriptor 2: the real one
    except OSError:
        pass  # standard error is gone too: nothing left to say it on


def _start_copier(streams: list[Stream], done_write: int, done_read: int, rank: str, token: str | None) -> bool:
    """Double fork: the copier is reparented away from the rank. True once it runs."""
    middle = os.fork()
    if middle == 0:
        code = 1
        try:
            if os.fork() == 0:
                try:
                    for signum in _STOP_SIGNALS:  # a stop ends the writers; the copier ends with the last of them
                        signal.signal(signum, signal.SIG_IGN)
                    os.close(done_read)
                    for stream in streams:
                        os.close(stream.write)
                    _copy_until_every_writer_is_gone(streams, rank, token)
                finally:
                    os._exit(0)  # done_write closes here: the rank's wait ends
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(middle, 0)
    return os.waitstatus_to_exitcode(status) == 0


def guard_output(folder: str, rank: str, token: str | None) -> None:
    """Descriptor 1 (and 2 where it is a file) become pipes read by the copier; at exit the rank waits for it."""
    streams = _streams(folder) if hasattr(os, "fork") else []  # (no fork on Windows: the rank runs unguarded)
    if not streams:
        return
    done_read, done_write = os.pipe()
    try:
        started = _start_copier(streams, done_write, done_read, rank, token)
    except OSError:  # no process to spare: the rank runs unguarded, as before
        started = False
    os.close(done_write)
    if not started:
        os.close(done_read)
        for stream in streams:
            stream.close_pipe()
            os.close(stream.real)
        return
    for stream in streams:
        os.dup2(stream.write, stream.fd)  # inheritable, as descriptors 1 and 2 are: children write to the pipe
        stream.close_pipe()
    atexit.register(_finish, os.getpid(), streams, done_read)  # first registered, so it runs last


def _finish(owner: int, streams: list[Stream], done_read: int) -> None:
    """The rank's last act: its own ends of the pipes closed, the real files back in place, the copier awaited."""
    if os.getpid() != owner:  # a child forked by the script that exits through sys.exit: not the rank's end
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    for stream in streams:
        os.dup2(stream.real, stream.fd)  # what is written after this goes straight to the file
    with selectors.DefaultSelector() as selector:
        selector.register(done_read, selectors.EVENT_READ)
        while selector.select(FINISH_WAIT_S) and os.read(done_read, 1):
            pass  # end of file: the copier has written everything and ended


# -- running the target as the interpreter would ---------------------------------------------------------

_started_as = sys.modules["__main__"]  # the interpreter's own __main__, kept alive (this module may run in it)


def _fresh_main() -> types.ModuleType:
    """A new ``__main__`` in ``sys.modules``, for good, holding what the interpreter gives its own."""
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    if "__annotations__" in vars(_started_as):
        main.__annotations__ = {}
    sys.modules["__main__"] = main
    return main


def _safe_path() -> bool:
    """PYTHONSAFEPATH (Python 3.11+): the script's folder, or the working folder for -m, is not put first."""
    return bool(getattr(sys.flags, "safe_path", False))


def run_module(name: str, argv: list[str]) -> None:
    """``python -m name args``: the interpreter's own runner, in a fresh ``__main__``."""
    sys.argv = list(argv)  # the module's file replaces argv[0], as `python -m` does
    if not _safe_path():
        sys.path.insert(0, os.getcwd())
    _fresh_main()
    runpy._run_module_as_main(name, alter_argv=True)  # what Modules/main.c calls for `python -m`


def run_script(path: str, argv: list[str]) -> None:
    """``python path args``: a source file, a .pyc, or a folder or zip file holding ``__main__.py``."""
    sys.argv = list(argv)
    filename = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)  # as the interpreter: not normalised
    if os.path.isdir(path) or zipfile.is_zipfile(path):
        sys.path.insert(0, filename)  # (even with PYTHONSAFEPATH: the interpreter needs it to find __main__.py)
        _fresh_main()
        runpy._run_module_as_main("__main__", alter_argv=False)
        return
    if not _safe_path():
        sys.path.insert(0, os.path.dirname(os.path.realpath(path)))
    try:
        with io.open_code(path) as file:
            source = file.read()
    except OSError as error:
        print(f"{sys.executable}: can't open file {filename!r}: [Errno {error.errno}] {error.strerror}",
              file=sys.stderr)
        raise SystemExit(2) from None  # the interpreter's status for a script it cannot open
    main = _fresh_main()
    from importlib.machinery import SourceFileLoader, SourcelessFileLoader

    is_pyc = path.endswith(".pyc")
    main.__file__, main.__cached__ = filename, None
    main.__loader__ = (SourcelessFileLoader if is_pyc else SourceFileLoader)("__main__", filename)
    code = main.__loader__.get_code("__main__") if is_pyc else compile(source, filename, "exec", dont_inherit=True)
    exec(code, vars(main))


def run_target(argv: list[str]) -> None:
    """Run ``script.py args`` or ``-m module args`` as the interpreter would, as ``__main__``."""
    if argv[:1] == ["-m"]:
        run_module(argv[1], argv[1:])
    else:
        run_script(argv[0], argv)


def _own_frames_left_out(tb):
    """The traceback from the target's first frame on: the lines of this module and runpy say nothing."""
    own = (_own_frames_left_out.__code__.co_filename, runpy.__file__, "<frozen runpy>")
    while tb is not None and tb.tb_frame.f_code.co_filename in own:
        tb = tb.tb_next
    return tb


def _report_uncaught(error: BaseException) -> None:
    """What the interpreter does with an uncaught error: sys.last_* set (an atexit handler may read them:
    braeburn's process-group teardown does not wait for peers after a crash), then sys.excepthook."""
    trimmed = _own_frames_left_out(error.__traceback__)
    error = error.with_traceback(trimmed)
    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, trimmed
    if sys.version_info >= (3, 12):
        sys.last_exc = error
    sys.excepthook(type(error), error, trimmed)


def _forget_braeburn() -> None:
    for name in [name for name in sys.modules if name == "braeburn" or name.startswith("braeburn.")]:
        del sys.modules[name]


def main() -> None:
    folder = os.environ.pop(OUTPUT_DIR_VAR, None)  # read here, not passed on to what the script starts
    token = os.environ.pop(SAY_ONCE_VAR, None)
    if folder and os.environ.get("LOCAL_RANK", "0") != "0":
        guard_output(folder, os.environ.get("RANK", os.environ["LOCAL_RANK"]), token)
    target = sys.argv[1:]
    if not target or target == ["-m"]:
        raise SystemExit("usage: python -mbraeburn.cli.rank_output (script.py | -m module) [args...]")
    _forget_braeburn()
    try:
        run_target(target)
    except Exception as error:  # what the interpreter does with an uncaught error, from the target's frame on
        _report_uncaught(error)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
