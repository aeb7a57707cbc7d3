"""FSDP2: shard a model's parameters, gradients and optimizer state across the processes.

Built on torch's public ``torch.distributed.fsdp.fully_shard`` (torch >= 2.6). For a model larger than
DDP could hold, each transformer block (or each large child) becomes one FSDP unit, so only one block's full
parameters exist at a time during forward and backward; the root is wrapped last and holds what is left
(embeddings, heads). A model that fits is one unit, the root (see :func:`wrap_fsdp`). Names no device: the mesh
is built on the device type of the tensors the plan chose.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# A child with at least this share of the parameters is worth its own unit when a model has no
# list of blocks; smaller ones stay with the root (one more all-gather costs more than it saves).
CHILD_SHARE = 0.1
# A list of blocks is the unit of choice when it holds at least this share of the parameters.
BLOCKS_SHARE = 0.5
# Bytes a parameter costs under DDP in mixed precision: float32 weight, gradient and AdamW's two moments.
DDP_BYTES_PER_PARAMETER = 16


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _declared_blocks(model: nn.Module) -> list[nn.Module]:
    """Modules whose class a Transformers model declares unsplittable (its blocks), outermost only."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    found: list[nn.Module] = []
    for module in model.modules():
        if module is not model and type(module).__name__ in names and not any(
                _contains(outer, module) for outer in found):
            found.append(module)
    return found


def _contains(outer: nn.Module, inner: nn.Module) -> bool:
    return any(module is inner for module in outer.modules())


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The submodules that each become one FSDP unit (the root is wrapped after them).

    In order of preference: the blocks a Transformers model declares (``_no_split_modules``); the
    entries of the largest ``nn.ModuleList`` when it holds at least half of the parameters (the
    layers of most transformers); else each direct child holding at least a tenth of them.
    """
    total = _count(model)
    if total == 0:
        return []
    declared = _declared_blocks(model)
    if declared:
        return declared
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 1]
    if lists:
        largest = max(lists, key=_count)
        if _count(largest) >= BLOCKS_SHARE * total:
            return [block for block in largest if _count(block) > 0]
    return [child for child in model.children() if _count(child) >= CHILD_SHARE * total]


def mixed_precision_policy(dtype: torch.dtype | None):
    """FSDP's policy for the plan's precision: compute in ``dtype``, reduce gradients in float32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if dtype is None:
        return MixedPrecisionPolicy()
    # float32 gradient reduction: summing bf16 gradients over many ranks loses too many bits.
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32, output_dtype=torch.float32)


def keeps_gathered(model: nn.Module, device_bytes: int | None) -> bool:
    """Whether each unit keeps its gathered parameters from forward to backward (fully_shard's
    ``reshard_after_forward=False``, ZeRO-2-like): for a model that DDP could hold on this device.

    Keeping them saves backward's all-gather of every unit, one collective (a point where every rank waits
    for the slowest) per unit per step: on 4 H200s GPT-2 small trained 30% faster with it (docs/benchmarks.md).
    It costs the whole model's parameters in the compute dtype at once, which is at most an eighth of what
    DDP holds (16 bytes a parameter), so it is the default only where that fits the device's memory
    (``device_bytes``); elsewhere, or where the memory is not known, backward gathers them again (ZeRO-3).
    """
    return device_bytes is not None and _count(model) * DDP_BYTES_PER_PARAMETER <= device_bytes


def group_units(units: list[nn.Module], groups: int | None) -> list[list[nn.Module]]:
    """``units`` in ``groups`` contiguous groups of nearly equal length, each group one FSDP unit (one all-gather
    and one reduce-scatter a step); ``None``: each unit alone; ``0``: none (the root holds every parameter)."""
    if groups is None:
        return [[unit] for unit in units]
    if groups < 0:
        raise ValueError(f"unit_groups={groups}: must be None (each block its own FSDP unit), 0 (the root alone) "
                         "or a positive number of groups of consecutive blocks")
    groups = min(groups, len(units))
    bounds = [round(i * len(units) / groups) for i in range(groups + 1)] if groups else [0]
    return [units[a:b] for a, b in zip(bounds, bounds[1:])]


UNITS = {"auto": "auto", "block": None, "root": 0}  # the fsdp_units option: wrap_fsdp's unit_groups


def wrap_fsdp(model: nn.Module, device: torch.device, world_size: int,
              dtype: torch.dtype | None = None, device_bytes: int | None = None,
              unit_groups: int | None | str = "auto", **options: Any) -> nn.Module:
    """``fully_shard`` each unit of :func:`shard_units`, then the root; returns the same (now sharded) module.

    The model must already be on ``device``; its parameters become DTensors, so build the optimizer
    from them afterwards (the Trainer and the Accelerator's prepare order do). ``options`` are
    ``fully_shard``'s own arguments, for every unit and the root; ``reshard_after_forward`` defaults to
    what :func:`keeps_gathered` says for a device of ``device_bytes`` memory. ``unit_groups`` joins
    consecutive units into that many (:func:`group_units`): fewer collectives a step, less overlap.

    By default (``"auto"``) a model that :func:`keeps_gathered` is one unit, the root: one all-gather and one
    reduce-scatter a step instead of one per block, each a point where every rank waits for the slowest, and
    FSDP's hooks run once instead of per block. On 4 H200s GPT-2 small trained at 486 samples/s instead of 400
    this way (92% of DDP's rate instead of 76%, 3 rounds; docs/benchmarks.md). It holds the whole model's
    gradients unsharded until backward ends, which such a model affords; a larger one keeps a unit per block.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    fits = keeps_gathered(model, device_bytes)
    options.setdefault("reshard_after_forward", not fits)
    if unit_groups == "auto":
        unit_groups = 0 if fits else None
    mesh = init_device_mesh(device.type, (world_size,))
    policy = mixed_precision_policy(dtype)
    for group in group_units(shard_units(model), unit_groups):
        fully_shard(group if len(group) > 1 else group[0], mesh=mesh, mp_policy=policy, **options)
    fully_shard(model, mesh=mesh, mp_policy=policy, **options)
    return model


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def set_gradient_sync(model: nn.Module, enabled: bool) -> None:
    """Off: backward keeps accumulating unsharded gradients locally (no reduce-scatter) until a boundary."""
    if is_sharded(model):
        model.set_requires_gradient_sync(enabled)


def full_value(tensor: torch.Tensor) -> torch.Tensor:
    """A plain tensor for a DTensor (the gradient norm FSDP's clip returns), else ``tensor`` itself."""
    if type(tensor) is torch.Tensor:  # every step without FSDP: no import, no isinstance walk
        return tensor
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


__all__ = ["UNITS", "shard_units", "group_units", "keeps_gathered", "wrap_fsdp", "is_sharded", "set_gradient_sync",
           "mixed_precision_policy", "full_value"]
