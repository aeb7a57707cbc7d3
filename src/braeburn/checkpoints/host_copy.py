"""A copy of a state (a state dict, an optimizer's, any nest of tensors and plain data) in host memory, now.

A background checkpoint (trainer/background_save.py) needs the state of one moment while training goes on. Serialising it
right away costs the training thread torch.save's whole price (its CRC-32 over every byte, growing a buffer, and a
device sync per tensor): about 2 s for GPT-2 small with its AdamW state on an H100 machine. A copy costs a memcpy
(a device-to-host copy for a GPU), and the serialising moves to the writer thread, where torch.save's writes let the
training thread run.

Each tensor's storage is copied once, and the tensors are rebuilt as the same views of the copies: memory shared
before is shared in the copy, so torch.save writes the copy as it would have written the original.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch

# At most this much of one snapshot goes to pinned memory, which torch keeps cached (rounded up to powers of two)
# for the next save and the system cannot page out; the rest of a larger state is copied to ordinary memory.
PINNED_LIMIT = 4 << 30

# Leaves that cannot change after the copy is taken, kept as they are; any other leaf is deep-copied.
_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


def _plain(tensor: torch.Tensor) -> bool:
    """A dense tensor that a view of a copied storage can stand for (no subclass, quantization or lazy bits)."""
    return (type(tensor) in (torch.Tensor, torch.nn.Parameter) and tensor.layout == torch.strided
            and not tensor.is_quantized and not tensor.is_conj() and not tensor.is_neg()
            and tensor.device.type != "meta")


def _map(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` rebuilt with ``leaf`` applied to everything that is not a dict, list or tuple (their types kept)."""
    if isinstance(value, dict):
        mapped = copy.copy(value)  # the same mapping type (an OrderedDict, a defaultdict with its factory)
        for key, item in value.items():
            mapped[key] = _map(item, leaf)
        return mapped
    if isinstance(value, list):
        return [_map(item, leaf) for item in value]
    if isinstance(value, tuple):
        items = [_map(item, leaf) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # a namedtuple, or a tuple
    return leaf(value)


def _pins(device_type: str) -> bool:
    """Whether copies from this kind of device go faster through pinned host memory (a device fact)."""
    from ..devices.registry import get_kind

    try:
        return get_kind(device_type).pin_memory_helps
    except (KeyError, ValueError):  # a device kind braeburn does not know: a plain copy
        return False


def _to_host(source: torch.UntypedStorage, pin: bool) -> tuple[torch.UntypedStorage, bool]:
    """A CPU copy of ``source``, and whether it is pinned. From a device where it helps (CUDA), and while ``pin``,
    into pinned memory: torch's pinned-memory cache hands the same blocks to the next save, so later snapshots pay
    no page faults and copy at the link's full speed. (One synchronous copy a storage: they run one after another
    either way.)"""
    if source.device.type == "cpu":
        return source.clone(), False
    if pin and _pins(source.device.type):
        try:
            host = torch.empty(source.nbytes(), dtype=torch.uint8, pin_memory=True).untyped_storage()
        except RuntimeError:  # no pinned memory to be had: a plain copy
            return source.cpu(), False
        host.copy_(source)
        return host, True
    return source.cpu(), False


def host_copy(obj: Any) -> tuple[Any, int]:
    """``obj`` with every tensor copied to the CPU (views and shared memory kept), and the bytes copied."""
    storages: dict[tuple, torch.UntypedStorage] = {}
    other_bytes = pinned_bytes = 0

    def tensor(value: torch.Tensor) -> torch.Tensor:
        nonlocal other_bytes, pinned_bytes
        value = value.detach()
        if not _plain(value):
            other_bytes += value.numel() * value.element_size()
            return value.clone().cpu() if value.device.type != "cpu" else value.clone()
        source = value.untyped_storage()
        key = (value.device, source.data_ptr(), source.nbytes())
        host = storages.get(key)
        if host is None:
            host, pinned = _to_host(source, pinned_bytes + source.nbytes() <= PINNED_LIMIT)
            storages[key] = host
            pinned_bytes += host.nbytes() if pinned else 0
        return torch.empty(0, dtype=value.dtype).set_(host, value.storage_offset(), value.size(), value.stride())

    def leaf(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return tensor(value)
        return value if isinstance(value, _IMMUTABLE) else copy.deepcopy(value)

    result = _map(obj, leaf)
    return result, other_bytes + sum(storage.nbytes() for storage in storages.values())


__all__ = ["host_copy"]
