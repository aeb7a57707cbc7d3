"""One writer per output directory: an OS lock that the kernel drops when its process dies.

A run takes ``<output_dir>/.braeburn.lock`` with ``flock`` (exclusive, non-blocking) before it writes
anything else there, and holds it to its end. A second process aimed at the same directory is refused
at once with the holder's pid, host, start time and command (written into the lock file by the
holder). Nothing has to be cleaned up after a crash: the kernel releases the lock of a dead process,
and the file left behind is only a record, which the next run (of any user: the file is created
world-writable, and taking it needs only read access) locks again.

The last release deletes the file while still holding its lock. A process that opened the same name
before that is granted the lock of a deleted file: it sees that the name no longer leads to the inode
it holds, and starts over (so two processes never each hold a lock on a different inode of one name).

``save_state(folder)`` of the Accelerator locks its state folder with the file ``.<folder>.braeburn.lock``
beside it (the folder itself is replaced whole at every save), never the parent folder: jobs saving to
sibling folders do not exclude each other.

Within one process the lock is shared: a Trainer and the Accelerator it drives (or two Trainers run one
after the other in a notebook) take it again without conflict, counted, and the last release drops it.
The lock file is opened without following links (:mod:`braeburn.checkpoints.no_follow`): a link planted there is refused.
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import no_follow
from ..plan.option_spelling import given, option

try:  # POSIX
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
try:
    import msvcrt
except ImportError:
    msvcrt = None  # type: ignore[assignment]

LOCK_FILE = ".braeburn.lock"
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, getattr(errno, "ENOTSUP", -1)}
_BUSY = {errno.EAGAIN, errno.EACCES, getattr(errno, "EWOULDBLOCK", errno.EAGAIN)}


class OutputDirBusyError(RuntimeError):
    """Another live process holds the output directory's lock; the message names it and the fix."""


class OutputLockUnsupportedError(RuntimeError):
    """The file system of the output directory cannot lock files, so one writer cannot be guaranteed."""


@dataclass
class _Held:
    fd: int
    count: int
    lock_file: Path


_held: dict[Path, _Held] = {}  # this process's locks, by the directory they guard


def _os_lock(fd: int) -> None:
    """Take the lock or raise OSError (errno EAGAIN/EACCES: held elsewhere)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    elif msvcrt is not None:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    else:
        raise OSError(errno.ENOSYS, "this platform has neither fcntl nor msvcrt")


def _os_unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    elif msvcrt is not None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def _holder_record(purpose: str) -> str:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "purpose": purpose,
                       "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                       "command": shlex.join([sys.executable, *sys.argv])[:500]})


def describe_holder(lock_file: Path) -> str:
    """The holder as one phrase, from what it wrote into the lock file."""
    for _ in range(20):  # the holder writes its record just after it takes the lock
        try:
            data = json.loads(lock_file.read_text(encoding="utf-8") or "null")
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict):
            return (f"pid {data.get('pid')} on {data.get('host')}, {data.get('purpose', 'a run')} started "
                    f"{data.get('started')}: {data.get('command')}")
        time.sleep(0.05)
    return "a process that has not written its details (see `fuser` or `lsof` on the lock file)"


def _granted_to(lock_file: Path) -> bool:
    """Whether a fresh open of ``lock_file`` in this process gets the lock we hold (it must not)."""
    probe = no_follow.open_fd(lock_file, os.O_RDONLY)  # (flock needs no write access)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as error:
        if error.errno in _BUSY:
            return False
        raise
    finally:
        os.close(probe)


def _granted_to_child(lock_file: Path) -> bool:
    """The same question asked from a forked process (exit 0: granted, 1: refused, 2: error)."""
    pid = os.fork()
    if pid == 0:  # the child only makes system calls, then leaves without running any Python cleanup
        code = 2
        try:
            fcntl.flock(os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW), fcntl.LOCK_EX | fcntl.LOCK_NB)
            code = 0
        except OSError as error:
            code = 1 if error.errno in _BUSY else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 1


def _check_lock_works(lock_file: Path, fd: int) -> None:
    """The lock must refuse a second taker; some file systems grant every lock (and then it guards nothing).

    Asked first of a second open file in this process (flock refuses it on a local disk, no fork needed).
    Where flock is emulated with POSIX locks (NFS), a process is never refused its own lock and closing
    the probe dropped ours: take it again and ask a forked child.
    """
    if fcntl is None or not _granted_to(lock_file):
        return
    _os_lock(fd)
    if _granted_to_child(lock_file):
        _os_unlock(fd)
        raise OSError(errno.ENOLCK, "the file system granted the same lock to two processes")


def _unsupported(directory: Path, error: OSError) -> OutputLockUnsupportedError:
    if fcntl is None and msvcrt is None:
        return OutputLockUnsupportedError(
            f"output_dir={str(directory)!r} cannot be locked: this platform has no file locks (neither fcntl nor "
            "msvcrt), so braeburn cannot make sure that only one run writes there. Run on Linux, macOS or Windows.")
    return OutputLockUnsupportedError(
        f"{given('output_dir', str(directory))} is on a file system where file locks do not work "
        f"({error.strerror or error}; common on some network file systems), so braeburn cannot make sure that only "
        f"one run writes there: two runs would mix their checkpoints silently. Use {option('output_dir')} on a local "
        "disk, or a network file system mounted with working locks (NFS with lockd, for example).")


def _lock_file(directory: Path, state_folder: bool) -> Path:
    """A run's lock lies in its output_dir; a state folder's beside it (save_state replaces the folder whole)."""
    return directory.parent / f".{directory.name}{LOCK_FILE}" if state_folder else directory / LOCK_FILE


def _where(directory: Path, state_folder: bool) -> str:
    return f"save_state({str(directory)!r})" if state_folder else f"output_dir={str(directory)!r}"


def _open_lock_file(lock_file: Path) -> tuple[int, bool]:
    """The lock file opened (created world-writable when missing, so that any user can take it once its
    holder is gone); ``(fd, writable)``. A link at its name is refused, never followed."""
    while True:
        try:
            return no_follow.open_fd(lock_file, os.O_RDWR), True
        except FileNotFoundError:
            pass
        except PermissionError:  # another user's file (read access is enough to lock it)
            return no_follow.open_fd(lock_file, os.O_RDONLY), False
        try:
            fd = no_follow.open_fd(lock_file, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            if lock_file.is_symlink():
                raise no_follow.PlantedLinkError(lock_file) from None
            continue  # another process created it just now: open theirs
        try:
            os.fchmod(fd, 0o666)  # (the umask took write access from the others)
        except (OSError, AttributeError):
            pass
        return fd, True


def _still_named(fd: int, lock_file: Path) -> bool:
    """Whether ``lock_file`` still names the file open as ``fd`` (its last holder deletes it on release)."""
    try:
        named = os.stat(lock_file, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def _take(directory: Path, lock_file: Path, state_folder: bool) -> tuple[int, bool]:
    """Open and lock ``lock_file``: ``(fd, writable)``, or the error that says who holds it, or why it cannot."""
    where = _where(directory, state_folder)
    for _ in range(100):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, writable = _open_lock_file(lock_file)
        except no_follow.PlantedLinkError:
            raise
        except OSError as error:  # a read-only parent, a folder of someone else's, a full disk
            fix = "Pass save_state() a folder" if state_folder else f"Pass {option('output_dir')}"
            raise type(error)(f"{where} cannot be written: {error.strerror or error} ({lock_file}). {fix} in a "
                              "folder you can write to.") from None
        try:
            _os_lock(fd)
            _check_lock_works(lock_file, fd)
        except OSError as error:
            os.close(fd)
            raise _refusal(directory, lock_file, state_folder, error) from None
        if _still_named(fd, lock_file):
            return fd, writable
        os.close(fd)  # its holder deleted it as we opened it: take the new one
    raise OutputDirBusyError(f"{where}: the lock file {lock_file} kept being replaced (100 tries). Another program "
                             "is deleting it; stop that program, or use another folder.")


def _refusal(directory: Path, lock_file: Path, state_folder: bool, error: OSError) -> Exception:
    if error.errno in _UNSUPPORTED:
        return _unsupported(directory, error)
    if error.errno not in _BUSY:
        return error
    holder = describe_holder(lock_file)
    if state_folder:
        return OutputDirBusyError(
            f"save_state({str(directory)!r}): that folder is being saved to by another process ({holder}). Two "
            "processes saving one state folder would mix their files. Pass another folder to save_state(), or wait "
            "for that process to end (a process that died leaves no lock behind).")
    return OutputDirBusyError(
        f"{given('output_dir', str(directory))} is in use by another run ({holder}). Two runs writing one folder "
        f"would mix their checkpoints and logs. Pass another {option('output_dir')}, or wait for that run to end (a "
        "run that died leaves no lock behind).")


def acquire(directory: str | os.PathLike, purpose: str = "training", *, state_folder: bool = False) -> Path:
    """Hold ``directory``'s lock (creating the directory) or raise :class:`OutputDirBusyError`.

    ``state_folder=True`` (the Accelerator's save_state): the lock file lies beside ``directory``.
    """
    directory = Path(directory).resolve()
    held = _held.get(directory)
    if held is not None:
        held.count += 1
        return directory
    lock_file = _lock_file(directory, state_folder)
    fd, writable = _take(directory, lock_file, state_folder)
    if writable:  # (closing the file on refusal releases the lock)
        no_follow.refuse_shared(fd, lock_file, f"Remove it (rm {str(lock_file)!r}: it only records which process "
                                "holds the lock) once no run uses that folder")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, _holder_record(purpose).encode())  # (os.pwrite does not exist on Windows)
    _held[directory] = _Held(fd, 1, lock_file)
    return directory


def ensure_free(directory: str | os.PathLike, *, state_folder: bool = False) -> None:
    """Raise :class:`OutputDirBusyError` when another process holds ``directory``'s lock.

    Creates nothing: a folder without the lock file was never locked (a holder always has the file).
    """
    directory = Path(directory).resolve()
    lock_file = _lock_file(directory, state_folder)
    if directory in _held or not (lock_file.is_file() or lock_file.is_symlink()):
        return  # ours, or never locked
    acquire(directory, state_folder=state_folder)
    release(directory)


def release(directory: str | os.PathLike) -> None:
    """Drop one hold on ``directory``'s lock; the last one deletes the lock file and unlocks it (a no-op when
    not held). The file goes first, while still locked: see the module's docstring."""
    directory = Path(directory).resolve()
    held = _held.get(directory)
    if held is None:
        return
    held.count -= 1
    if held.count > 0:
        return
    del _held[directory]
    try:
        if _still_named(held.fd, held.lock_file):
            os.unlink(held.lock_file)
    except OSError:  # another user's file in a sticky folder (/tmp), or Windows (an open file stays)
        try:
            os.ftruncate(held.fd, 0)  # the record would name a process that no longer holds it
        except OSError:
            pass
    try:
        _os_unlock(held.fd)
    except OSError:
        pass
    finally:
        os.close(held.fd)


@atexit.register
def _release_all() -> None:
    """At a normal exit, no lock file is left behind (an Accelerator whose end_training() was not called)."""
    for directory in list(_held):
        _held[directory].count = 1
        release(directory)


def held_over(path: str | os.PathLike) -> bool:
    """Whether this process holds the lock of ``path`` or of a folder that contains it."""
    path = Path(path).resolve()
    return any(path == folder or path.is_relative_to(folder) for folder in _held)


__all__ = ["LOCK_FILE", "OutputDirBusyError", "OutputLockUnsupportedError", "acquire", "describe_holder",
           "ensure_free", "held_over", "release"]
