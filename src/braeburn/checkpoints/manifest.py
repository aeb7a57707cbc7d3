"""The manifest of a saved state: the files it holds, their sizes, and how the weights were written.

``Accelerator.save_state`` writes ``manifest.json`` last, into the staging folder; the Trainer rewrites
it with checksums and the step. Loading trusts nothing that the manifest does not vouch for: a file it
does not list, a name that leaves the folder, or a manifest listing no file is refused with one line
before anything is read, and torch's sharded path (whose metadata is a pickle) is taken only when the
manifest says the weights were written sharded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from . import no_follow
from ..errors import UnsafeFileError

MANIFEST = "manifest.json"
WHOLE, SHARDED = "whole", "sharded"  # plain torch.save files, or torch.distributed.checkpoint shards
SHARDED_METADATA = "sharded/.metadata"
MAX_BYTES = 8 << 20  # about 50,000 files' entries: far more than any checkpoint holds (a 64 MB one took 33 s, 630 MB)


class ManifestError(UnsafeFileError):
    """A saved state whose manifest does not vouch for what the folder holds; nothing was loaded."""


def listed_files(folder: Path) -> list[str]:
    """Every file below ``folder`` except the manifest, as relative POSIX names, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write(folder: Path, data: dict[str, Any]) -> Path:
    path = folder / MANIFEST
    with no_follow.create_new(path) as handle:
        handle.write(json.dumps(data, indent=1).encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
    return path


def write_sizes(folder: Path, layout: str) -> Path:
    """The Accelerator's manifest: each file's size and the layout of the weights."""
    files = {name: {"size": (folder / name).stat().st_size} for name in listed_files(folder)}
    return write(folder, {"format": 1, "layout": layout, "files": files})


def read(folder: Path) -> dict[str, Any] | None:
    """The manifest as a dict, None when there is none; :class:`ManifestError` when it is not one."""
    path = folder / MANIFEST
    try:
        raw = no_follow.read_capped(path, MAX_BYTES)  # (a FIFO or /dev/zero there: refused, never read)
    except FileNotFoundError:
        return None
    except no_follow.NotARegularFileError:  # (a named pipe would hang the read)
        raise ManifestError(f"{path} is not a regular file, so nothing in {folder} can be trusted. Use another "
                            "checkpoint, or save this state again.") from None
    except OSError as error:
        raise ManifestError(f"{path} cannot be read ({error.strerror or error}), so nothing in {folder} can be "
                            "trusted. Use another checkpoint, or save this state again.") from None
    if len(raw) > MAX_BYTES:
        size = os.lstat(path).st_size
        raise ManifestError(f"{path} is {size:,} bytes, more than the {MAX_BYTES:,} a manifest of any checkpoint "
                            f"needs: it was not read, and nothing in {folder} can be trusted. Use another "
                            "checkpoint, or save this state again.")
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as error:
        raise ManifestError(f"{path} cannot be read ({type(error).__name__}: {error}), so nothing in {folder} can be "
                            "trusted. Use another checkpoint, or save this state again.") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise ManifestError(f"{path} is not a braeburn manifest (no 'files' table). Use another checkpoint, or save "
                            "this state again.")
    return data


def name_problem(folder: Path, name: Any, entry: Any) -> str | None:
    """Why a manifest entry cannot be trusted (a name outside the folder, a bad size), or None."""
    where = folder / MANIFEST
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        return f"{where} lists the file name {name!r}, which is not a plain relative name"
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or name != pure.as_posix():
        return (f"{where} lists {name!r}, a name that leaves the checkpoint folder (absolute, or with '..'): "
                "braeburn reads only files inside it")
    if not isinstance(entry, dict) or not isinstance(entry.get("size"), int) or isinstance(entry.get("size"), bool):
        return f"{where} gives {name!r} no whole-number size"
    if not (folder / name).resolve().is_relative_to(folder.resolve()):
        return f"{folder / name} is a link leading out of the checkpoint folder: braeburn reads only files inside it"
    return None


def problem(folder: Path, manifest: dict[str, Any]) -> str | None:
    """The first reason ``folder`` does not match ``manifest`` (names, sizes, unlisted files), or None."""
    files = manifest["files"]
    if not files:
        return (f"{folder / MANIFEST} lists no files, so it vouches for nothing (a complete state lists every file "
                "it wrote)")
    for name, entry in files.items():
        reason = name_problem(folder, name, entry)
        if reason:
            return reason
    layout = manifest.get("layout", SHARDED if SHARDED_METADATA in files else WHOLE)
    if layout not in (WHOLE, SHARDED):
        return f"{folder / MANIFEST} gives the layout {layout!r}; braeburn writes {WHOLE!r} or {SHARDED!r}"
    unlisted = [name for name in listed_files(folder) if name not in files]
    if unlisted:
        return (f"{folder / unlisted[0]} is not listed in {folder / MANIFEST}"
                + (f" (nor are {len(unlisted) - 1} more files)" if len(unlisted) > 1 else "")
                + ": a file braeburn did not write could be anything, and it is never read")
    for name, entry in files.items():
        path = folder / name
        if not path.is_file():
            return f"{path} is {'not a regular file' if os.path.lexists(path) else 'missing'}"
        if path.stat().st_size != entry["size"]:
            return f"{path} is truncated or altered: {path.stat().st_size} bytes, the manifest says {entry['size']}"
    return None


def layout_of(folder: Path) -> str:
    """Check ``folder`` against its manifest and return the layout of its weights; raise ManifestError.

    A folder without a manifest (written before braeburn wrote them) holds whole weights only: a
    ``sharded`` folder there is refused, since no record says braeburn wrote it.
    """
    manifest = read(folder)
    if manifest is None:
        if (folder / "sharded").exists():
            raise ManifestError(f"{folder / 'sharded'} exists but {folder} has no {MANIFEST} saying the state was "
                                "written sharded, so braeburn does not read it (its metadata is a pickle, which could "
                                "run code). Delete the folder if you did not put it there, or save the state again.")
        return WHOLE
    reason = problem(folder, manifest)
    if reason:
        raise ManifestError(f"The saved state {folder} cannot be loaded: {reason}. Nothing was loaded. Use another "
                            "checkpoint, or save this state again.")
    return manifest.get("layout", SHARDED if SHARDED_METADATA in manifest["files"] else WHOLE)


__all__ = ["MANIFEST", "SHARDED", "WHOLE", "ManifestError", "layout_of", "listed_files", "name_problem",
           "problem", "read", "write", "write_sizes"]
