"""Hook points that `braeburn check` uses to watch a user's own training run.

The Accelerator calls these at three moments. They do nothing unless BRAEBURN_CHECK_DIR is set
(which only `braeburn check` does, in the runs it compares). The recording itself is implemented
with `braeburn check` (cli/check.py).
"""

from __future__ import annotations

import os

from .envvars import CHECK_DIR_VAR


def active() -> bool:
    return bool(os.environ.get(CHECK_DIR_VAR))


def after_prepare(accelerator, models) -> None:
    """Called once by Accelerator.prepare with the prepared models (unwrapped)."""


def after_backward(accelerator, loss) -> None:
    """Called by Accelerator.backward after the gradients of ``loss`` were computed."""


def before_optimizer_step(accelerator, optimizer) -> None:
    """Called by a prepared optimizer's step() before the parameters change."""
