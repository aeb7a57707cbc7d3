"""The process group: started from torchrun's environment, one DDP wrap, and collective helpers.

Names no device: the backend comes from the plan (the device kind's ``process_group_backend``) and
the per-process accelerator is chosen through ``torch.accelerator``.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..data.loader import apply_to_tensors
from ..plan.rules import OptionError, PlanError
from .backend_threads import wait_until_parked


@dataclass(frozen=True)
class WorldInfo:
    """Where this process sits, from the variables torchrun (torch.distributed.run) sets."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


class DistributedEnvironmentError(PlanError):
    """The variables that describe this process's place in the job (WORLD_SIZE, RANK, MASTER_ADDR, ...)
    cannot work; ``errors`` lists every one, each with the value, why and the fix."""

    def __init__(self, errors: list[OptionError]):
        super().__init__(errors)
        lines = "\n".join(f"  - {error}" for error in self.errors)
        noun = "variable" if len(self.errors) == 1 else "variables"
        self.args = (f"{len(self.errors)} distributed environment {noun} cannot work:\n{lines}",)


MAX_WORLD_SIZE = 1 << 20  # more processes than any job has; torch's own limit (a C int) would be a TypeError
_SET_BY_LAUNCHER = ("torchrun sets it: start the script with `braeburn launch --num-processes N` (or torchrun) "
                    "rather than setting it by hand")


def world_from_env(env: Mapping[str, str] | None = None) -> WorldInfo:
    """This process's place in the job, checked: every bad or missing variable is reported at once, before
    anything connects (a RANK beyond WORLD_SIZE would otherwise wait forever for a peer that never comes)."""
    env = os.environ if env is None else env
    errors: list[OptionError] = []

    def number(name: str, default: int) -> int:
        text = env.get(name, "").strip()
        if not text:
            return default
        try:
            return int(text)
        except ValueError:
            errors.append(OptionError(name, text, f"is not a whole number; {_SET_BY_LAUNCHER}"))
            return default

    world = number("WORLD_SIZE", 1)
    rank, local_rank = number("RANK", 0), number("LOCAL_RANK", 0)
    if not 1 <= world <= MAX_WORLD_SIZE:
        errors.append(OptionError("WORLD_SIZE", world, f"must be from 1 to {MAX_WORLD_SIZE} (the number of "
                                  f"processes); {_SET_BY_LAUNCHER}"))
        world = 1
    for name, value in (("RANK", rank), ("LOCAL_RANK", local_rank)):
        if not 0 <= value < world:
            errors.append(OptionError(name, value, f"must be from 0 to WORLD_SIZE-1 ({world - 1}): no process of a "
                                      f"{world}-process job has it, so its peers would wait for it forever; "
                                      f"{_SET_BY_LAUNCHER}"))
    if world > 1 and not is_initialized():  # a group the script joined itself needs no rendezvous here
        errors.extend(_rendezvous_errors(env))
    if errors:
        raise DistributedEnvironmentError(errors)
    return WorldInfo(world_size=world, rank=rank, local_rank=local_rank)


def _rendezvous_errors(env: Mapping[str, str]) -> list[OptionError]:
    """MASTER_ADDR and MASTER_PORT: where the processes of a job meet (torch's env:// rendezvous)."""
    errors = []
    if not env.get("MASTER_ADDR", "").strip():
        errors.append(OptionError("MASTER_ADDR", env.get("MASTER_ADDR"), "is not set, and WORLD_SIZE > 1 needs the "
                                  "address of the rank-0 machine to meet there; start the script with `braeburn "
                                  "launch` (which sets it), or export MASTER_ADDR=127.0.0.1 on one machine"))
    port = env.get("MASTER_PORT", "").strip()
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        why = "is not set" if not port else "is not a port number from 1 to 65535"
        errors.append(OptionError("MASTER_PORT", env.get("MASTER_PORT"), f"{why}, and WORLD_SIZE > 1 needs the port "
                                  "of the rendezvous on MASTER_ADDR; start the script with `braeburn launch` (which "
                                  "picks a free one), or export MASTER_PORT=29500 (the same on every process)"))
    return errors


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def init_process_group(backend: str, world: WorldInfo, device: torch.device | None = None,
                       timeout: Any = None) -> bool:
    """Join the group torchrun described; True when this call created it (and so should destroy it).
    ``timeout`` (a timedelta) bounds each collective; None keeps torch's default."""
    if is_initialized():
        return False
    if not dist.is_available():
        raise RuntimeError(f"WORLD_SIZE={world.world_size} asks for distributed training, but this torch was "
                           "built without torch.distributed. Run a single process, or install a torch with it.")
    if device is not None and device.index is not None:
        torch.accelerator.set_device_index(device.index)  # before any collective touches the GPU
    dist.init_process_group(backend=backend, store=_attempt_store(world), rank=world.rank,
                            world_size=world.world_size, **({"timeout": timeout} if timeout is not None else {}))
    # Kept until the process ends unless destroyed sooner (Accelerator.end_training): evaluate() and
    # predict() after Trainer.train() gather from every rank, so the group must outlive train().
    atexit.register(_destroy_at_exit)
    return True


_EXIT_WAIT_S = 300.0  # at exit, a rank waits this long for peers still finishing (rank-0-only reports, plots)


def _destroy_at_exit() -> None:
    """The group this process made, torn down once every rank has reached its exit. After an uncaught
    exception (``sys.last_value`` is set then) it is torn down without waiting: a peer may be waiting in a
    collective that never completes, and the launcher ends the job; waiting would only delay that."""
    destroy_process_group(wait_s=0 if hasattr(sys, "last_value") else _EXIT_WAIT_S)


def _attempt_store(world: WorldInfo) -> "dist.Store":
    """torchrun's store, under a prefix of its own for each restart of the job.

    A restarted group (``--max-restarts``) meets in the same store as the attempt that failed; without
    a fresh prefix, a rank can read the dead workers' addresses left there and fail to connect.
    """
    from .elastic import restart_count

    try:
        store, _, _ = next(dist.rendezvous("env://", rank=world.rank, world_size=world.world_size))
    except RuntimeError as error:  # torch's DistNetworkError: rank 0 could not open the rendezvous port
        if "EADDRINUSE" not in str(error) and "address already in use" not in str(error).lower():
            raise
        port = os.environ.get("MASTER_PORT")
        raise DistributedEnvironmentError([OptionError(
            "MASTER_PORT", port, f"is already in use on this machine (another job, or a process still holding "
            f"it), so rank 0 cannot open the rendezvous there; `braeburn launch` picks a free port by itself, or "
            f"pass --main-process-port / export MASTER_PORT with a free one (`ss -ltnp | grep :{port}` shows "
            "who holds it)")]) from None
    return dist.PrefixStore(f"braeburn/attempt-{restart_count()}/", store)


_host_group: tuple[Any, Any] | None = None  # (the default group it was made in, the gloo group)


def host_group() -> "dist.ProcessGroup":
    """A gloo group of every rank, for small CPU tensors checked on the host: on any device backend, a
    collective on it never syncs the device. Made once per process group; the first call is a collective
    call (every rank must make it, at the same point)."""
    global _host_group
    if _host_group is None or _host_group[0] is not dist.group.WORLD:
        _host_group = (dist.group.WORLD, dist.new_group(backend="gloo"))
    return _host_group[1]


def destroy_process_group(wait_s: float = 10.0) -> None:
    """Where the host group exists (the Trainer makes it), every rank meets on it first (``wait_s``; 0: not), so no
    rank tears its connections down while a peer still uses them. No group is made here: making one is a
    collective that a rank already gone would never join.

    Then this waits until gloo's worker threads have let go of their last collective, which a DDP model keeps
    alive until the process ends: one still releasing it when the interpreter finalizes aborts the process
    ("terminate called without an active exception", see backend_threads)."""
    global _host_group
    if not is_initialized():
        return
    if wait_s > 0 and _host_group is not None and _host_group[0] is dist.group.WORLD:
        import datetime

        try:
            dist.monitored_barrier(group=_host_group[1], timeout=datetime.timedelta(seconds=wait_s))
        except Exception:  # a peer already gone (or slow): tear down anyway, as before
            pass
    dist.destroy_process_group()
    _host_group = None  # its threads end now; the default group's live on inside a DDP model
    wait_until_parked(_PARK_WAIT_S if wait_s > 0 else 0.5)


_PARK_WAIT_S = 10.0  # a worker still in a collective whose peer is gone never parks: the wait has an end


def _buffer_sync_argument() -> str:
    """DDP's name for "sync buffers before each forward": forward_sync_buffers from torch 2.13 on (which
    deprecates broadcast_buffers), broadcast_buffers before. Both still sync them once at construction."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    parameters = inspect.signature(DistributedDataParallel.__init__).parameters
    return "forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers"


def buffers_change_in_forward(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds buffers that its forward updates: the running statistics of torch's
    normalisation layers (BatchNorm, SyncBatchNorm, InstanceNorm with track_running_stats)."""
    return any(getattr(module, "track_running_stats", False) and getattr(module, "running_mean", None) is not None
               for module in model.modules())


def wrap_ddp(model: torch.nn.Module, device: torch.device, **options: Any) -> torch.nn.Module:
    """DistributedDataParallel as braeburn configures it; ``options`` (DDP's own arguments) override that."""
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [device.index] if device.index is not None else None
    # Gradients as views into DDP's communication buckets: no copy in and out of the buckets each step.
    # Buffers are broadcast from rank 0 before every forward only where the forward changes them (running
    # statistics): elsewhere (position ids, attention masks) they are equal on every rank, and the broadcast
    # would be a second collective a step that holds the ranks in lockstep (BERT-base on 2 x H200: 77% ->
    # 85% scaling efficiency without it, benchmarks/results/h200x2-scaling).
    settings = {"gradient_as_bucket_view": True, _buffer_sync_argument(): buffers_change_in_forward(model)}
    if "broadcast_buffers" in options:  # asked for by name (Accelerate's DDP kwargs): passed as given, as Accelerate
        settings.pop(_buffer_sync_argument())  # does (False also skips the sync at construction), not braeburn's
    return DistributedDataParallel(model, device_ids=device_ids, **{**settings, **options})


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


def pad_across(data: Any, dim: int, pad_index: int, pad_first: bool = False) -> Any:
    """``data``'s tensors (nested too) padded with ``pad_index`` along ``dim`` to the longest on any rank, so that
    :func:`gather` can concatenate them: Accelerate's ``pad_across_processes``, with one exchange of the sizes for
    every tensor in ``data``. Tensors with no ``dim`` stay as they are."""
    if not is_initialized() or dist.get_world_size() == 1:
        return data
    sizes: list[int] = []
    apply_to_tensors(lambda t: sizes.append(int(t.shape[dim]) if -t.dim() <= dim < t.dim() else -1), data)
    every = gather_object(sizes)
    if any(len(other) != len(sizes) for other in every):
        raise RuntimeError(f"the ranks hold {sorted({len(other) for other in every})} tensors here, not the same "
                           "number: give every process outputs of the same structure so that they can be gathered")
    longest = iter([max(column) for column in zip(*every)])

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        size = next(longest)
        if size < 0 or tensor.shape[dim] == size:
            return tensor
        shape = list(tensor.shape)
        shape[dim] = size
        out = tensor.new_full(shape, pad_index)
        index = [slice(None)] * tensor.dim()
        index[dim] = slice(size - tensor.shape[dim], size) if pad_first else slice(0, tensor.shape[dim])
        out[tuple(index)] = tensor
        return out

    return apply_to_tensors(pad, data)


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
    dist.all_reduce(result, op=dist.ReduceOp.MAX if reduction == "max" else dist.ReduceOp.SUM)
    return result / dist.get_world_size() if reduction == "mean" else result


def reduce(data: Any, reduction: str = "sum") -> Any:
    """Every rank's tensors summed (Accelerate's default), averaged or maxed, inside any nesting."""
    if reduction not in ("sum", "mean", "max"):
        raise ValueError(f"reduction={reduction!r} is not supported; pass 'sum' (the default), 'mean' or 'max'")
    return apply_to_tensors(lambda tensor: _reduce_one(tensor, reduction), data)


def broadcast_int(value: int, src: int = 0) -> int:
    """Rank ``src``'s ``value`` on every rank (for seeds drawn on one process)."""
    if not is_initialized() or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return int(box[0])
