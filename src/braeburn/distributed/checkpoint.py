"""Checkpoints that outlive the world size they were written with.

* Replicated models (one process, DDP): every rank holds the same weights and optimizer state, so
  rank 0 writes them once as plain ``torch.save`` files; any world size loads them.
* Sharded models (FSDP): every rank writes its own shards through ``torch.distributed.checkpoint``
  (DCP) into ``<checkpoint>/sharded``; DCP reshards on load, so another world size, or a single
  process with a plain model, reads them back.
* Loading never runs code from the folder: DCP's ``.metadata`` (a pickle) is read through
  :class:`_MetadataUnpickler`, which builds only DCP's own metadata classes; the file names it gives
  must be plain names inside ``sharded``; non-tensor values are read with ``weights_only=True``.
* Data position: saved in samples of the epoch, and turned back into whole batches of the world
  size and batch size that loads it (:func:`resume_position`).
"""

from __future__ import annotations

import io
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

SHARDED_DIR = "sharded"  # DCP's folder inside a checkpoint


def _owner(optimizer: torch.optim.Optimizer, models: list[nn.Module]) -> nn.Module:
    """The model whose parameters ``optimizer`` updates (DCP keys optimizer state by parameter name)."""
    first = next((p for group in optimizer.param_groups for p in group["params"]), None)
    for model in models:
        if any(p is first for p in model.parameters()):
            return model
    raise ValueError("an optimizer prepared with strategy='fsdp' updates parameters of no prepared model: pass the "
                     "model to prepare() first, then build the optimizer from model.parameters() and prepare it")


def _state(models: list[nn.Module], optimizers: list[torch.optim.Optimizer]) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    state: dict[str, Any] = {f"model_{i}": get_model_state_dict(model) for i, model in enumerate(models)}
    for i, optimizer in enumerate(optimizers):
        state[f"optimizer_{i}"] = get_optimizer_state_dict(_owner(optimizer, models), optimizer)
    return state


def save_sharded(models: list[nn.Module], optimizers: list[torch.optim.Optimizer], directory: str | os.PathLike) -> None:
    """Every rank writes its shards of ``models`` and ``optimizers`` (a collective: call it on all ranks)."""
    import torch.distributed.checkpoint as dcp

    with _single_process_quiet():
        dcp.save(_state(models, optimizers), checkpoint_id=str(Path(directory) / SHARDED_DIR))


def load_sharded(models: list[nn.Module], optimizers: list[torch.optim.Optimizer], directory: str | os.PathLike) -> None:
    """Read what :func:`save_sharded` wrote, resharded for these models (sharded or not, any world size).

    The caller has checked ``directory`` against its manifest (every file listed, none outside).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    from torch.distributed.checkpoint.api import CheckpointException

    state = _state(models, optimizers)
    folder = Path(directory) / SHARDED_DIR
    metadata = read_metadata(folder / ".metadata")  # checked before DCP opens anything
    try:
        with _single_process_quiet():
            dcp.load(state, storage_reader=_safe_reader(folder, metadata), planner=_safe_planner())
    except CheckpointException as error:  # a BaseException that wraps each rank's error: give the first back
        raise _first_failure(error, folder) from None
    for i, model in enumerate(models):
        set_model_state_dict(model, state[f"model_{i}"])
    for i, optimizer in enumerate(optimizers):
        set_optimizer_state_dict(_owner(optimizer, models), optimizer, state[f"optimizer_{i}"])


# -- reading DCP's files without running code -------------------------------------------------------
# DCP pickles its metadata (dataclasses of torch.distributed.checkpoint, torch.Size, dtypes); these are
# the only globals that file may name. Anything else (exec, os.system, any other class) is refused.
_METADATA_CLASSES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "collections": {"OrderedDict"},
    "pathlib": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"},
    "pathlib._local": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"},  # Python 3.13+
}


class UnsafeMetadataError(pickle.UnpicklingError):
    pass


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if name in _METADATA_CLASSES.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeMetadataError(f"it names {module}.{name}, which is not part of torch's checkpoint metadata")


def read_metadata(path: Path) -> Any:
    """DCP's metadata from ``path``, built only from DCP's own classes; UnsafeFileError otherwise."""
    from torch.distributed.checkpoint.metadata import Metadata

    from ..errors import UnsafeFileError

    try:
        with open(path, "rb") as handle:
            metadata = _MetadataUnpickler(handle).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError) as error:
        raise UnsafeFileError(f"{path} is not torch checkpoint metadata that braeburn can read safely ({error}); "
                              "it was not loaded, and nothing in it ran. Use another checkpoint.") from None
    if not isinstance(metadata, Metadata):
        raise UnsafeFileError(f"{path} holds a {type(metadata).__name__}, not torch checkpoint metadata; it was not "
                              "loaded. Use another checkpoint.")
    for info in metadata.storage_data.values():  # where the tensors are: plain names inside this folder
        name = getattr(info, "relative_path", None)
        if (not isinstance(name, str) or not name or os.path.basename(name) != name or name in (".", "..")
                or not (path.parent / name).is_file() or getattr(info, "transform_descriptors", None)):
            raise UnsafeFileError(f"{path} points at {name!r}, which is not a file of {path.parent}: braeburn reads "
                                  "only the checkpoint's own files. Use another checkpoint.")
    return metadata


def _first_failure(error: BaseException, folder: Path) -> Exception:
    from ..errors import UnsafeFileError

    failures = list(getattr(error, "failures", {}).values())
    cause = failures[0][0] if failures and isinstance(failures[0], tuple) else error
    if isinstance(cause, UnsafeFileError):
        return cause
    reason = (str(cause).strip().splitlines() or [""])[0][:300]
    if isinstance(cause, pickle.UnpicklingError):
        return UnsafeFileError(f"{folder} holds pickled objects other than plain data, which braeburn refuses to "
                               f"load ({reason}); nothing in it ran. Use another checkpoint.")
    return RuntimeError(f"{folder} cannot be read as torch checkpoint data for these models: "
                        f"{type(cause).__name__}: {reason}")


def _safe_reader(folder: Path, metadata: Any):
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any):  # read and checked already, never re-read
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(str(folder))


def _safe_planner():
    from torch.distributed.checkpoint import DefaultLoadPlanner

    class SafePlanner(DefaultLoadPlanner):
        """DCP loads non-tensor values (learning rates, betas) with weights_only=False; not here."""

        def load_bytes(self, read_item, value: io.BytesIO) -> None:
            try:
                plain = torch.load(value, weights_only=True)
            except pickle.UnpicklingError as error:
                from ..errors import UnsafeFileError

                raise UnsafeFileError(f"the sharded checkpoint's value {read_item.dest_index.fqn!r} holds pickled "
                                      f"objects other than plain data ({str(error).splitlines()[0]}); it was not "
                                      "loaded, and nothing in it ran. Use another checkpoint.") from None
            again = io.BytesIO()  # plain data, written by us: DCP's own (unrestricted) load of it is harmless
            torch.save(plain, again)
            again.seek(0)
            super().load_bytes(read_item, again)

    return SafePlanner()


class _single_process_quiet(warnings.catch_warnings):
    """DCP warns that it assumes one process when no process group exists: that is what we mean."""

    def __enter__(self):
        super().__enter__()
        warnings.filterwarnings("ignore", message=".*assuming the intent is to (load|save) in a single process.*")
        return self


def resume_position(saved: dict[str, int], batch_size: int | None, num_processes: int) -> dict[str, int]:
    """A DeviceDataLoader state for this world size and batch size, from one saved with any other.

    The global sample order of an epoch depends only on the seed and the epoch (every rank takes its
    slice of each global batch), so the position is the number of samples of the epoch already
    consumed. It is rounded down to whole global batches of the new run: at most one global batch
    minus one sample is seen twice, none is skipped. With the same global batch the resume is exact.
    """
    saved_world, saved_batch = saved.get("num_processes"), saved.get("batch_size")
    if saved_world is None or saved_batch is None or batch_size is None:
        return dict(saved)  # written before positions were kept in samples, or a loader braeburn does not shard
    samples = int(saved["batches_yielded"]) * int(saved_batch) * int(saved_world)
    position = dict(saved)
    position["batches_yielded"] = samples // (batch_size * num_processes)
    return position


__all__ = ["SHARDED_DIR", "save_sharded", "load_sharded", "read_metadata", "resume_position"]
