"""Checkpoints that outlive the world size they were written with.

* Replicated models (one process, DDP): every rank holds the same weights and optimizer state, so
  rank 0 writes them once as plain ``torch.save`` files; any world size loads them.
* Sharded models (FSDP): every rank writes its own shards through ``torch.distributed.checkpoint``
  (DCP) into ``<checkpoint>/sharded``; DCP reshards on load, so another world size, or a single
  process with a plain model, reads them back.
* Data position: saved in samples of the epoch, and turned back into whole batches of the world
  size and batch size that loads it (:func:`resume_position`).
"""

from __future__ import annotations

import os
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
    """Read what :func:`save_sharded` wrote, resharded for these models (sharded or not, any world size)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    state = _state(models, optimizers)
    with _single_process_quiet():
        dcp.load(state, checkpoint_id=str(Path(directory) / SHARDED_DIR))
    for i, model in enumerate(models):
        set_model_state_dict(model, state[f"model_{i}"])
    for i, optimizer in enumerate(optimizers):
        set_optimizer_state_dict(_owner(optimizer, models), optimizer, state[f"optimizer_{i}"])


def is_sharded_checkpoint(directory: str | os.PathLike) -> bool:
    return (Path(directory) / SHARDED_DIR).is_dir()


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


__all__ = ["SHARDED_DIR", "save_sharded", "load_sharded", "is_sharded_checkpoint", "resume_position"]
