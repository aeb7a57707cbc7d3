"""A folder whose disk fills up on request (tests of writes that must survive ENOSPC).

Where this process may mount one (root, and a kernel that lets this container mount), the folder is a
real 512 KB tmpfs and ``fill()`` fills it with a ballast file: every later write fails in the kernel
with ENOSPC. Elsewhere (CI runners, macOS) a fake stands in: ``open`` returns files whose writes under
the folder raise ``OSError(ENOSPC)`` while the disk is "full". Use it as a fixture:
``from tests.full_disk import full_disk  # noqa: F401``.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import subprocess
from pathlib import Path

import pytest


class _FullFile:
    """A real file whose write and flush fail with ENOSPC while ``disk.full``."""

    def __init__(self, file, disk: "FullDisk"):
        self._file, self._disk = file, disk

    def _check(self) -> None:
        if self._disk.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, data):
        self._check()
        return self._file.write(data)

    def flush(self):
        self._check()
        return self._file.flush()

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()

    def __iter__(self):
        return iter(self._file)


class FullDisk:
    def __init__(self, folder: Path, real: bool):
        self.folder, self.real, self.full = folder, real, False

    def fill(self) -> None:
        self.full = True
        if self.real:
            with open(self.folder / ".ballast", "wb", buffering=0) as ballast:  # unbuffered: close cannot fail
                try:
                    while True:
                        ballast.write(b"\0" * 65536)
                except OSError as error:
                    assert error.errno == errno.ENOSPC

    def free(self) -> None:
        self.full = False
        if self.real:
            (self.folder / ".ballast").unlink(missing_ok=True)


def _mount_tmpfs(folder: Path, size: str = "512k") -> bool:
    if os.environ.get("BRAEBURN_TEST_NO_TMPFS") or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.fixture
def full_disk(tmp_path, monkeypatch):
    """A :class:`FullDisk` on a real tmpfs where one can be mounted, else on the ENOSPC fake."""
    folder = tmp_path / "disk"
    folder.mkdir()
    disk = FullDisk(folder, real=_mount_tmpfs(folder))
    if not disk.real:
        real_open = builtins.open

        def fake_open(file, mode="r", *args, **kwargs):
            opened = real_open(file, mode, *args, **kwargs)
            inside = isinstance(file, (str, os.PathLike)) and Path(os.fspath(file)).resolve().is_relative_to(folder)
            return _FullFile(opened, disk) if inside and any(c in mode for c in "wax+") else opened

        monkeypatch.setattr(builtins, "open", fake_open)
        monkeypatch.setattr(io, "open", fake_open)
    yield disk
    if disk.real:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=10)
