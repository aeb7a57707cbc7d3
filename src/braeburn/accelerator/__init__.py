"""The Accelerator: your own loop on the best device (``core``), its compile decision (``compile``), the prepared
optimizer and scheduler (``prepared_optim``), experiment trackers (``trackers``) and the hooks `braeburn check`
watches a run through (``probe``). Names load on first use."""

from __future__ import annotations

import importlib

_WHERE = {"Accelerator": "core", "AcceleratedOptimizer": "prepared_optim", "AcceleratedScheduler": "prepared_optim"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'braeburn.accelerator' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
