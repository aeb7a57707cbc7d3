"""Training state on disk: atomic directory writes and the RNG states of every generator in use.

Everything is written with ``torch.save`` in a form ``torch.load(weights_only=True)`` accepts
(tensors, numbers, strings, lists, tuples, dicts): nothing is unpickled as code on load.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .devices.base import DeviceKind


# -- random number generators -------------------------------------------------------------------
def _numpy_random():
    try:
        import numpy
    except ImportError:  # numpy is optional
        return None
    return numpy.random


def rng_state(kind: DeviceKind) -> dict[str, Any]:
    """The state of python's ``random``, numpy's global generator, torch's CPU one and ``kind``'s own."""
    state: dict[str, Any] = {"python": random.getstate(), "torch_cpu": torch.get_rng_state()}
    np_random = _numpy_random()
    if np_random is not None:
        name, keys, pos, has_gauss, cached = np_random.get_state(legacy=True)
        # numpy arrays are not weights_only-safe; a tensor of the uint32 keys is.
        state["numpy"] = (name, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(cached))
    device_state = kind.rng_state()
    if device_state is not None:
        state["device"] = {"kind": kind.name, "state": device_state}
    return state


def set_rng_state(state: dict[str, Any], kind: DeviceKind) -> None:
    """Restore what :func:`rng_state` returned."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch_cpu"])
    np_random = _numpy_random()
    if np_random is not None and "numpy" in state:
        import numpy

        name, keys, pos, has_gauss, cached = state["numpy"]
        np_random.set_state((name, keys.numpy().astype(numpy.uint32), pos, has_gauss, cached))
    device = state.get("device")
    if device is not None and device["kind"] == kind.name:
        kind.set_rng_state(device["state"])


def seed_everything(seed: int, kind: DeviceKind) -> None:
    """Seed python, numpy, torch (CPU) and ``kind``'s generators."""
    random.seed(seed)
    np_random = _numpy_random()
    if np_random is not None:
        np_random.seed(seed % 2**32)
    torch.manual_seed(seed)
    kind.manual_seed(seed)


# -- atomic directory writes --------------------------------------------------------------------
def staging_dir(output_dir: str | os.PathLike) -> Path:
    """Where a state directory is written before it is renamed into place (same filesystem)."""
    target = Path(output_dir)
    return target.parent / f".{target.name}.partial"


@contextlib.contextmanager
def atomic_directory(output_dir: str | os.PathLike, *, owner: bool = True) -> Iterator[Path]:
    """Yield a staging directory beside ``output_dir``; on success it replaces ``output_dir``.

    Readers see the old directory or the new one, never half of one: a crash leaves only the staging
    directory behind (cleared by the next save). With several processes, every process writes into the
    staging directory and only the ``owner`` renames it (call :func:`prepare_staging` / :func:`publish`
    with a barrier between them instead of this context manager).
    """
    staging = prepare_staging(output_dir) if owner else staging_dir(output_dir)
    yield staging
    if owner:
        publish(output_dir)


def prepare_staging(output_dir: str | os.PathLike) -> Path:
    staging = staging_dir(output_dir)
    if staging.exists():
        shutil.rmtree(staging)  # left by a save that crashed
    staging.mkdir(parents=True)
    return staging


def publish(output_dir: str | os.PathLike) -> Path:
    """Move the staged directory into place, replacing an older one."""
    target, staging = Path(output_dir), staging_dir(output_dir)
    for path in staging.rglob("*"):  # data on disk before the rename that makes it visible
        if path.is_file():  # (sharded checkpoints hold a folder of files)
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    old = target.parent / f".{target.name}.old"
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        os.replace(target, old)
    os.replace(staging, target)
    if old.exists():
        shutil.rmtree(old)
    return target


_captured: dict[str, bytes] | None = None


@contextlib.contextmanager
def capture_writes() -> Iterator[dict[str, bytes]]:
    """While active, :func:`save_file` serialises into the yielded dict (name -> bytes) instead of writing:
    a snapshot of the state at this moment, to be written later (trainer/background_save.py)."""
    global _captured
    previous, _captured = _captured, {}
    try:
        yield _captured
    finally:
        _captured = previous


def save_file(obj: Any, directory: Path, name: str) -> None:
    if _captured is not None:
        buffer = io.BytesIO()
        torch.save(obj, buffer)  # copies device tensors to the host now: the snapshot is of this moment
        _captured[name] = buffer.getvalue()
        return
    with open(directory / name, "wb") as handle:  # a full disk then raises OSError with its errno, not a torch enforce
        torch.save(obj, handle)


def load_file(directory: str | os.PathLike, name: str, map_location: Any = "cpu") -> Any:
    path = Path(directory) / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: load_state() expects a directory written by save_state() "
                                "with the same prepared objects (same number of models, optimizers, "
                                "schedulers and dataloaders)")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:  # weights_only refused an object: loading it could run code
        from .errors import UnsafeFileError

        reason = next((line.strip().split(". ")[0] for line in str(error).splitlines()
                       if "WeightsUnpickler error" in line), type(error).__name__)
        raise UnsafeFileError(
            f"{path} holds pickled objects other than tensors and plain data, which braeburn refuses to load: "
            f"unpickling them could run arbitrary code ({reason}). A file written by save_state() never "
            "does. Delete this checkpoint, or resume from one you wrote yourself.") from None


__all__ = ["rng_state", "set_rng_state", "seed_everything", "atomic_directory", "prepare_staging", "publish",
           "staging_dir", "save_file", "load_file"]
