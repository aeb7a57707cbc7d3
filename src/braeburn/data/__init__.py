"""Data: batches onto the device, sharding and the prepared DataLoader (``loader``), padding text batches to few
lengths (``collate``) and finding the batch size that fits (``batch_size``). Names load on first use."""

from __future__ import annotations

import importlib

_WHERE = {name: "loader" for name in ("DeviceDataLoader", "ShardSampler", "BatchTracker", "move_to_device",
                                       "apply_to_tensors", "truncate_padding", "first_dim", "cast_float64",
                                       "cast_float64_model")}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'braeburn.data' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
