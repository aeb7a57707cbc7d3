"""The Accelerator: your own loop on the best device (``core``), its compile decision (``compile``), the prepared
optimizer and scheduler (``prepared_optim``), experiment trackers (``trackers``) and the hooks `braeburn check`
watches a run through (``probe``). Names load on first use. ``braeburn.accelerator.Accelerator`` is the public
``braeburn.Accelerator``, as it was before the package was laid out by concern; braeburn's own is
``core.Accelerator``."""

from __future__ import annotations

import importlib
from typing import Any, Callable

# As braeburn.trainer's: names here that give braeburn's public classes; braeburn/__init__.py sets resolve_public.
PUBLIC_NAMES = {"Accelerator": "Accelerator"}
resolve_public: Callable[[str], Any] | None = None

_WHERE = {"AcceleratedOptimizer": "prepared_optim", "AcceleratedScheduler": "prepared_optim"}

__all__ = sorted([*_WHERE, *PUBLIC_NAMES])


def __getattr__(name: str):
    if name in PUBLIC_NAMES and resolve_public is not None:
        return resolve_public(PUBLIC_NAMES[name])
    if name not in _WHERE:
        raise AttributeError(f"module 'braeburn.accelerator' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
