"""Writing in an output folder without following links that braeburn did not create.

A shared scratch folder can hold a symbolic link planted under a name braeburn writes (``metrics.jsonl``,
``.braeburn.lock``, a temporary file): a plain ``open`` writes through it, into a file outside the run.
Every writer in braeburn's folders goes through these functions instead:

- a file written whole is written to a fresh temporary file (``O_EXCL``: never an existing one) and renamed
  over its name, which replaces a link there (the link, not its target);
- a file appended to or locked (the metrics log, the lock file) is opened with ``O_NOFOLLOW``: a link there
  is refused with :class:`PlantedLinkError`, which names the link and the fix;
- a file appended to or cut in place that another name shares (a hard link: ``cp -al`` of a run, ``ln`` of a file
  outside) is refused the same way, with :class:`SharedFileError`: ``O_NOFOLLOW`` does not stop a hard link, and
  a write into it would change the file under its other name too. Refused, not copied: the policy for a
  symbolic link at these names, since a copy would put the contents of a file outside the run into the run's
  folder;
- a folder to be removed is unlinked when it is a link (its target is left alone);
- a writer that is not braeburn's (Transformers' ``save_pretrained``, a tokenizer's), which follows links, writes
  into a fresh private folder inside the output folder (:func:`private_folder`); each file it wrote is then
  renamed over its name (:func:`publish_files`), as a file written whole is.

Only the last part of a path is guarded: the output folder itself may be a link the user made.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # (Windows has no O_NOFOLLOW; it has no unprivileged symlinks either)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)


class PlantedLinkError(OSError):
    """A file braeburn writes is a symbolic link it did not create; nothing was written through it."""

    def __init__(self, path: str | os.PathLike):
        path = Path(path)
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        super().__init__(errno.ELOOP, (
            f"{path} is a symbolic link (to {target}) that braeburn did not create. braeburn never writes through "
            "a link in its folders: it would change a file outside them. Remove the link "
            f"(rm {str(path)!r}; its target is not touched), or use another folder."))

    def __str__(self) -> str:
        return self.strerror


class SharedFileError(PlantedLinkError):
    """A file braeburn appends to or cuts in place has another name too (a hard link); nothing was written."""

    def __init__(self, path: str | os.PathLike, names: int, fix: str | None = None):
        path = Path(path)
        fix = fix or (f"Make it a file of its own (cp {str(path)!r} {str(path) + '.copy'!r} && mv "
                      f"{str(path) + '.copy'!r} {str(path)!r}: the other name keeps its contents), or use another "
                      "folder")
        OSError.__init__(self, errno.EMLINK, (
            f"{path} is a hard link: {names} names share that file (cp -al and ln make them), so a write into it "
            "would change it under its other names too. braeburn never appends to or cuts a file another name "
            f"shares. {fix}."))


def refuse_shared(fd: int, path: str | os.PathLike, fix: str | None = None) -> int:
    """``fd``, or :class:`SharedFileError` (``fd`` closed) when the regular file it is open on has other names."""
    found = os.fstat(fd)
    if stat.S_ISREG(found.st_mode) and found.st_nlink > 1:
        os.close(fd)
        raise SharedFileError(path, found.st_nlink, fix)
    return fd


def check_unshared(path: str | os.PathLike, fix: str | None = None) -> None:
    """:class:`SharedFileError` when ``path`` is a regular file that other names share; nothing there is fine."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(found.st_mode) and found.st_nlink > 1:
        raise SharedFileError(path, found.st_nlink, fix)


def open_fd(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a link at ``path`` (:class:`PlantedLinkError`) instead of following it."""
    try:
        return os.open(path, flags | _NOFOLLOW | _CLOEXEC | _BINARY, mode)
    except OSError as error:
        if os.path.islink(path) and error.errno in (errno.ELOOP, errno.EMLINK, errno.EEXIST):
            raise PlantedLinkError(path) from None  # (FreeBSD says EMLINK; O_EXCL on a link says EEXIST)
        raise


def read_capped(path: str | os.PathLike, cap: int) -> bytes:
    """The first ``cap + 1`` bytes of the regular file ``path``, opened without following a link and without
    blocking (a FIFO there would hang an ``open``; ``/dev/zero`` would read until memory runs out).
    FileNotFoundError when nothing is there; :class:`NotARegularFileError` for a link, FIFO, device or folder."""
    try:
        fd = open_fd(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except PlantedLinkError:
        raise NotARegularFileError(errno.ELOOP, "it is a symbolic link") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
            raise NotARegularFileError(errno.EINVAL, f"it is {kind}, not a regular file")
        chunks, left = [], cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class NotARegularFileError(OSError):
    """A record or manifest that is a link, a FIFO, a device or a folder: never opened for reading."""


def open_append(path: str | os.PathLike) -> IO[str]:
    """``path`` opened for appending text (created when missing); a symbolic link there, or a file that another
    name shares (a hard link), is refused."""
    fd = refuse_shared(open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), path)
    return os.fdopen(fd, "a", encoding="utf-8")


def open_update(path: str | os.PathLike) -> IO[bytes]:
    """An existing ``path`` opened to read and write bytes (``r+b``); a symbolic link there, or a file that another
    name shares (a hard link), is refused."""
    return os.fdopen(refuse_shared(open_fd(path, os.O_RDWR), path), "r+b")


def create_new(path: str | os.PathLike) -> IO[bytes]:
    """A new, empty file at ``path`` for writing bytes. Whatever had that name (a file or link left by a
    crash, or planted) is removed first: only the name, never a link's target. Use it for names that are
    braeburn's alone (temporary and staging files)."""
    remove_file(path)
    return os.fdopen(open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb")


def create_temporary(path: str | os.PathLike) -> tuple[IO[bytes], Path]:
    """A new file beside ``path`` for writing bytes, under a fresh hidden name (``.<name>.<pid>.<random>.tmp``):
    never a name that exists, so nothing there (a file, a planted link) is touched. The file and its path."""
    path = Path(path)
    for _ in range(100):
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.fdopen(open_fd(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb"), temporary
        except (FileExistsError, PlantedLinkError):
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name beside {path} in 100 tries")


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """``path`` replaced by ``data`` (text is UTF-8): a temporary file renamed over it, so a reader sees
    the old file or the new one, and a link at ``path`` is replaced, never written through."""
    path = Path(path)
    handle, temporary = create_temporary(path)
    try:
        with handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(temporary, path)
    except BaseException:
        remove_file(temporary)
        raise
    return path


def remove_file(path: str | os.PathLike) -> None:
    """Remove the name ``path`` (a file, or a link: never its target); nothing there is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        remove_tree(path)
    except PermissionError:
        if not os.path.isdir(path) or os.path.islink(path):
            raise
        remove_tree(path)  # (macOS says EPERM for unlink() of a folder)


class MountInsideError(OSError):
    """A folder braeburn would remove has a file system mounted inside it; nothing of it was removed."""

    def __str__(self) -> str:
        return self.strerror


def _mount_points() -> set[str]:
    """Every mount point (Linux's mount table, read once; elsewhere empty: the device check still holds)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return set()
    unescape = lambda m: chr(int(m.group(1), 8))  # noqa: E731  (\040: a space)
    return {re.sub(r"\\([0-7]{3})", unescape, f[4]) for f in (line.split() for line in lines) if len(f) > 4}


def check_no_mount_inside(path: str | os.PathLike) -> None:
    """Raise :class:`MountInsideError` (one line) when a folder below ``path`` is a mount point: a bind mount
    or another file system there must never be emptied by a removal of braeburn's."""
    top = os.lstat(path).st_dev
    points = _mount_points()
    if os.path.realpath(path) in points:
        raise MountInsideError(errno.EBUSY, (
            f"{str(path)!r} is a mount point, which braeburn would remove: it left it as it is. Unmount it "
            f"(umount {str(path)!r}), then run again."))
    for folder, subfolders, _ in os.walk(path):  # (does not follow links)
        for name in subfolders:
            below = os.path.join(folder, name)
            try:
                info = os.lstat(below)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode) and (info.st_dev != top or os.path.realpath(below) in points):
                raise MountInsideError(errno.EBUSY, (
                    f"{below!r} is a mount point inside {str(path)!r}, which braeburn would remove: it left the whole "
                    f"folder as it is. Unmount it (umount {below!r}), then run again."))


def remove_tree_quietly(path: str | os.PathLike) -> bool:
    """:func:`remove_tree` that removes what it can (``ignore_errors``) and says on stderr, in one line, why it
    left a tree with a mount point inside; whether ``path`` is gone now."""
    try:
        if os.path.islink(path):
            os.unlink(path)
        elif os.path.exists(path):
            check_no_mount_inside(path)
            shutil.rmtree(path, ignore_errors=True)
    except MountInsideError as error:
        print(f"braeburn: warning: {error}", file=sys.stderr, flush=True)
    except OSError:
        pass
    return not os.path.lexists(path)


def remove_tree(path: str | os.PathLike) -> None:
    """Remove the folder ``path`` and what it holds; a link there is removed itself (its target is kept). A mount
    point inside it refuses the removal (:class:`MountInsideError`) before anything is removed."""
    if os.path.islink(path):
        os.unlink(path)
    elif os.path.exists(path):
        check_no_mount_inside(path)
        shutil.rmtree(path)


@contextlib.contextmanager
def private_folder(parent: str | os.PathLike) -> Iterator[Path]:
    """A new folder inside ``parent`` (a name no one could guess beforehand, readable by this user only), removed
    with what is left in it after the block: where a writer that follows links writes, before
    :func:`publish_files` moves its files into ``parent``."""
    folder = Path(tempfile.mkdtemp(prefix=".braeburn-write-", dir=parent))
    try:
        yield folder
    finally:
        remove_tree(folder)


def publish_files(source: str | os.PathLike, target: str | os.PathLike) -> list[Path]:
    """Move every file below ``source`` to the same name below ``target`` (renames on one filesystem): a link
    planted at a name is replaced, never written through, and so is a link standing for a sub-folder on the way.
    Returns the files now in ``target``."""
    source, target = Path(source), Path(target)
    published = []
    for folder, _, names in sorted(os.walk(source)):  # (os.walk does not follow links)
        for name in sorted(names):
            relative = (Path(folder) / name).relative_to(source)
            _real_folders(target, relative.parent)
            os.replace(source / relative, target / relative)
            published.append(target / relative)
    return published


def _real_folders(top: Path, relative: Path) -> None:
    """``top/relative`` made a real folder, each part of the way: a link there is replaced by a folder."""
    folder = top
    for name in relative.parts:
        folder = folder / name
        if folder.is_symlink():
            os.unlink(folder)  # the link only: what it points to is not touched
        if not folder.is_dir():
            folder.mkdir()


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make the renames inside ``folder`` durable (a power loss can otherwise undo a rename)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some systems cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["MountInsideError", "NotARegularFileError", "PlantedLinkError", "SharedFileError", "check_no_mount_inside",
           "check_unshared", "create_new", "create_temporary", "fsync_dir", "open_append", "open_fd", "open_update", "private_folder",
           "publish_files", "read_capped", "refuse_shared", "remove_file", "remove_tree", "remove_tree_quietly",
           "write_atomic"]
