"""The process group: started from torchrun's environment, one DDP wrap, and collective helpers.

Names no device: the backend comes from the plan (the device kind's ``process_group_backend``) and
the per-process accelerator is chosen through ``torch.accelerator``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..data import apply_to_tensors


@dataclass(frozen=True)
class WorldInfo:
    """Where this process sits, from the variables torchrun (torch.distributed.run) sets."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def world_from_env(env: Mapping[str, str] | None = None) -> WorldInfo:
    env = os.environ if env is None else env

    def number(name: str, default: int) -> int:
        text = env.get(name, "").strip()
        if not text:
            return default
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{name}={text!r} is not a whole number; torchrun sets it, so start the script "
                             "with `braeburn launch` or `torchrun` rather than setting it by hand") from None

    world = number("WORLD_SIZE", 1)
    return WorldInfo(world_size=world, rank=number("RANK", 0), local_rank=number("LOCAL_RANK", 0))


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def init_process_group(backend: str, world: WorldInfo, device: torch.device | None = None) -> bool:
    """Join the group torchrun described; True when this call created it (and so should destroy it)."""
    if is_initialized():
        return False
    if not dist.is_available():
        raise RuntimeError(f"WORLD_SIZE={world.world_size} asks for distributed training, but this torch was "
                           "built without torch.distributed. Run a single process, or install a torch with it.")
    if device is not None and device.index is not None:
        torch.accelerator.set_device_index(device.index)  # before any collective touches the GPU
    dist.init_process_group(backend=backend, store=_attempt_store(world), rank=world.rank,
                            world_size=world.world_size)
    return True


def _attempt_store(world: WorldInfo) -> "dist.Store":
    """torchrun's store, under a prefix of its own for each restart of the job.

    A restarted group (``--max-restarts``) meets in the same store as the attempt that failed; without
    a fresh prefix, a rank can read the dead workers' addresses left there and fail to connect.
    """
    from .elastic import restart_count

    store, _, _ = next(dist.rendezvous("env://", rank=world.rank, world_size=world.world_size))
    return dist.PrefixStore(f"braeburn/attempt-{restart_count()}/", store)


def new_host_group() -> "dist.ProcessGroup":
    """A gloo group of every rank, for small CPU tensors checked on the host: on any device backend, a
    collective on it never syncs the device. A collective call: every rank must make it, in the same order."""
    return dist.new_group(backend="gloo")


def destroy_process_group() -> None:
    if is_initialized():
        dist.destroy_process_group()


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [device.index] if device.index is not None else None
    # Gradients as views into DDP's communication buckets: no copy in and out of the buckets each step.
    return DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True)


def barrier() -> None:
    if is_initialized():
        dist.barrier()


def all_ok(ok: bool, device: torch.device) -> bool:
    """True when ``ok`` is True on every rank (a barrier that also carries a verdict)."""
    if not is_initialized() or dist.get_world_size() == 1:
        return ok
    flag = torch.tensor([1 if ok else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _gather_one(tensor: torch.Tensor) -> torch.Tensor:
    if not is_initialized() or dist.get_world_size() == 1:
        return tensor.unsqueeze(0) if tensor.dim() == 0 else tensor
    tensor = tensor.unsqueeze(0) if tensor.dim() == 0 else tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    return torch.cat(parts, dim=0)


def gather(data: Any) -> Any:
    """Every rank's tensors concatenated on dim 0 (rank order), inside any nesting of lists/tuples/dicts.
    Shapes must match across ranks (a prepared DataLoader pads the last batch so they do)."""
    return apply_to_tensors(_gather_one, data)


def gather_object(value: Any) -> list[Any]:
    """Every rank's picklable ``value``, in rank order."""
    if not is_initialized() or dist.get_world_size() == 1:
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _reduce_one(tensor: torch.Tensor, reduction: str) -> torch.Tensor:
    if not is_initialized() or dist.get_world_size() == 1:
        return tensor
    result = tensor.clone()
    dist.all_reduce(result, op=dist.ReduceOp.SUM)
    return result / dist.get_world_size() if reduction == "mean" else result


def reduce(data: Any, reduction: str = "mean") -> Any:
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r} is not supported; pass 'mean' or 'sum'")
    return apply_to_tensors(lambda tensor: _reduce_one(tensor, reduction), data)


def broadcast_int(value: int, src: int = 0) -> int:
    """Rank ``src``'s ``value`` on every rank (for seeds drawn on one process)."""
    if not is_initialized() or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return int(box[0])
