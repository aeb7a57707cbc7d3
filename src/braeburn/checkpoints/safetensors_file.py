"""Model weights as safetensors files, written and read by the maintained ``safetensors`` package.

The package (what Transformers uses) parses and checks every file: a header it cannot parse, a byte range that
overlaps another tensor's or leaves the file, a shape that does not fit its bytes, an unknown dtype, a header
claiming more than 100 MB, nesting past its recursion limit or numbers past its integer range. braeburn keeps only
what the package does not do here:

- one error for every file it refuses (:class:`MalformedFileError`), naming the file and the reason: never the
  package's bare exception, nor a raw ``OverflowError``, ``RecursionError`` or ``MemoryError``;
- a check that no name appears twice in the header (the package keeps the last of two entries of one name when
  both cover the same bytes: two readers could then disagree on what the file holds);
- the package's write errors as ``OSError`` (a full disk says ``[Errno 28] No space left on device``, as every
  other checkpoint write does);
- which state dicts the package can hold (:func:`can_hold`): dense tensors of a dtype the installed version writes.

Atomic publishing, the manifest and the background write stay braeburn's (``state.py``, ``manifest.py``,
``trainer/background_save.py``). ``save_file`` streams each tensor from its own memory into the file (no copy of
the whole model as bytes); tensors on a device are copied to the host first, by the package.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import stat
import struct
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as _save_bytes
from safetensors.torch import save_file as _save_file

from . import no_follow
from ..errors import MalformedFileError

_OS_ERROR = re.compile(r"os error (\d+)|code: (\d+)")  # how the package's Rust side spells an errno


@functools.lru_cache(maxsize=None)
def _package_writes(dtype: torch.dtype) -> bool:
    """Whether the installed safetensors package writes tensors of ``dtype`` (versions add dtypes)."""
    try:
        _save_bytes({"probe": torch.empty(0, dtype=dtype)})
    except (KeyError, ValueError, TypeError, RuntimeError, SafetensorError):  # (torch cannot even make some)
        return False
    return True


def can_hold(state: dict[str, Any]) -> bool:
    """Whether every value is a dense tensor of a dtype the package writes (on a little-endian host)."""
    return sys.byteorder == "little" and all(
        isinstance(value, torch.Tensor) and value.layout == torch.strided and not value.is_quantized
        and _package_writes(value.dtype) for value in state.values())


def write(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """``tensors`` (sharing no memory: the caller drops aliases) as the safetensors file ``path``.

    ``path`` is made afresh first (a link or file there is removed: the link, never its target); the package
    then writes it whole. Its I/O errors come out as ``OSError`` with their errno."""
    with no_follow.create_new(path) as made:
        mode = os.fstat(made.fileno()).st_mode & 0o777  # what the umask gives any new file (0644 under 022)
    packed = {name: tensor.detach().contiguous() for name, tensor in tensors.items()}  # a copy only where not dense
    try:
        _save_file(packed, str(path), metadata=metadata)
    except SafetensorError as error:
        code = _errno(error)
        if code is None:
            raise
        raise OSError(code, os.strerror(code)) from None  # (as a Python write says it: no file name)
    _give_mode(path, mode)


def _give_mode(path: Path, mode: int) -> None:
    """The package (0.8) writes a private temporary file (0600) and renames it over ``path``: the weights alone
    would then be unreadable to the group and others that may read every other file of the checkpoint."""
    fd = no_follow.open_fd(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_mode & 0o777 != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _errno(error: BaseException) -> int | None:
    """The errno of an I/O error of the package (its Rust side writes it into the message)."""
    if getattr(error, "errno", None) is not None:
        return error.errno
    match = _OS_ERROR.search(str(error))
    return int(match.group(1) or match.group(2)) if match else None


def _refuse(path: Path, reason: str) -> MalformedFileError:
    return MalformedFileError(f"{path} is not a safetensors file that braeburn can read ({reason}), so nothing was "
                              "loaded from it. A file written by save_state() always is: delete this checkpoint, or "
                              "resume from another one.")


def _reason(error: BaseException) -> str:
    if isinstance(error, SafetensorError):
        return f"the safetensors package refuses it: {str(error).removeprefix('Error while deserializing header: ')}"
    return f"{type(error).__name__} while reading it: {error}"


class DuplicateName(ValueError):
    """A JSON object that gives one name twice (``json.loads`` alone keeps the last)."""


def unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads``: the object, or :class:`DuplicateName` naming a name given twice."""
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            raise DuplicateName(name)
        seen.add(name)
    return dict(pairs)


def _duplicate_name(path: Path) -> str | None:
    """A name given twice in the header (of any table in it), or None. Called once the package has accepted the
    header: its length is within the file and 100 MB, its nesting within the package's recursion limit."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        text = handle.read(length)
    try:
        json.loads(text, object_pairs_hook=unique_names)
    except DuplicateName as twice:
        return str(twice)
    return None


_NOT_REGULAR = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (reading it would wait for a writer, "
                 "maybe forever)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"))


def require_regular_file(path: str | os.PathLike) -> None:
    """:class:`MalformedFileError` naming ``path`` unless it is a regular file, checked before it is opened: a
    named pipe would hang the read, a folder or a device holds no checkpoint. A link is followed, as the read
    follows it: a manifest has refused one leading out of its checkpoint folder (:mod:`braeburn.checkpoints.manifest`), and
    one inside is read as its target. A missing file is left to the caller's error."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
        raise MalformedFileError(f"{path} is {kind}, not a regular file, so nothing was read from it. A file written "
                                 "by save_state() always is one: delete this checkpoint, or resume from another one.")


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of the safetensors file ``path``; :class:`MalformedFileError` (naming the file and
    what is wrong with it) when it is not one, whatever is wrong, or is not a regular file."""
    require_regular_file(path)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as file:
            metadata, names = file.metadata() or {}, list(file.keys())
            twice = _duplicate_name(path)
            if twice is not None:
                raise _refuse(path, f"its header names {twice!r} twice: which of the two is meant is not clear")
            return {name: file.get_tensor(name) for name in names}, metadata
    except MalformedFileError:
        raise
    except OSError as error:
        code = _errno(error)
        if code == errno.ENODEV:  # (a file of /proc, say: the package maps files into memory)
            raise _refuse(path, "it cannot be mapped into memory, which is how the package reads a file") from None
        raise (OSError(code, os.strerror(code), str(path)) if code is not None
               else OSError(f"cannot read {path}: {error}")) from None
    except (SafetensorError, ValueError, KeyError, TypeError, OverflowError, RecursionError, MemoryError,
            RuntimeError) as error:
        raise _refuse(path, _reason(error)) from None


__all__ = ["DuplicateName", "can_hold", "read", "require_regular_file", "unique_names", "write"]
