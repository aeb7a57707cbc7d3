"""The optimizer and scheduler that ``Accelerator.prepare`` returns: they step only on a gradient-accumulation
boundary, through the grad scaler when there is one, and only when the optimizers really stepped."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from . import probe

if TYPE_CHECKING:
    from .core import Accelerator


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Steps only on a gradient-accumulation boundary, through the grad scaler when there is one."""

    def __init__(self, optimizer: torch.optim.Optimizer, accelerator: "Accelerator"):
        # No super().__init__: the wrapped optimizer owns the parameter groups and state.
        self.optimizer, self.accelerator = optimizer, accelerator
        self.step_was_skipped = False
        self.clip_scale: torch.Tensor | None = None  # the next step's grad_scale: a clip folded into it (clip_fold.py)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self.optimizer.param_groups = value

    @property
    def state(self):
        return self.optimizer.state

    @state.setter
    def state(self, value):
        self.optimizer.state = value

    @property
    def defaults(self):
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value):
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.accelerator.sync_gradients:  # off-boundary the gradients are still accumulating
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        scale, self.clip_scale = self.clip_scale, None  # for this step only
        if not self.accelerator.sync_gradients:
            return None
        probe.before_optimizer_step(self.accelerator, self.optimizer)
        if scale is None:
            stepped = self.accelerator._policy.step(self.optimizer, closure)
        else:
            stepped = self._step_clipping(scale, closure)
        self.step_was_skipped = not stepped
        return None

    def _step_clipping(self, scale: torch.Tensor, closure=None) -> bool:
        """A fused Adam/AdamW step that divides each gradient by ``scale`` as it reads it, and writes the divided
        gradient back (as it does for GradScaler's scale): the clip, without a pass of its own."""
        self.optimizer.grad_scale = scale
        try:
            return self.accelerator._policy.step(self.optimizer, closure)
        finally:
            del self.optimizer.grad_scale

    def __getattr__(self, name: str):
        if name in ("optimizer", "accelerator"):
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"


# torch schedulers whose arguments (step_size, milestones, T_max, total_iters) are usually counted in epochs
USUALLY_PER_EPOCH = frozenset({"StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
                               "CosineAnnealingWarmRestarts", "PolynomialLR", "LinearLR", "ConstantLR"})


class AcceleratedScheduler:
    """Steps only when the optimizers really stepped (a boundary, and the grad scaler did not skip), and then
    ``steps_per_call`` times: Accelerate steps it once per process, since each step saw num_processes batches."""

    def __init__(self, scheduler, accelerator: "Accelerator", step_with_optimizer: bool = True,
                 steps_per_call: int = 1):
        self.scheduler, self.accelerator, self.step_with_optimizer = scheduler, accelerator, step_with_optimizer
        self.steps_per_call = steps_per_call
        self._first_step = True
        self.on_first_step: Callable[[], None] | None = None  # the Accelerator's look at how step() is used

    def step(self, *args, **kwargs) -> None:
        if self.on_first_step is not None:
            check, self.on_first_step = self.on_first_step, None
            check()
        if not self.step_with_optimizer:
            self._step_once(*args, **kwargs)
            return
        accelerator, scheduler = self.accelerator, self.scheduler
        if not accelerator.sync_gradients or accelerator.optimizer_step_was_skipped:
            return
        for _ in range(self.steps_per_call):
            total = getattr(scheduler, "total_steps", None)  # OneCycleLR raises past its end
            if total is None or scheduler.last_epoch < total:
                if self._first_step:
                    self._step_once(*args, **kwargs)
                else:
                    scheduler.step(*args, **kwargs)  # (_step_once's every later step, without its call)

    def _step_once(self, *args, **kwargs) -> None:
        if self._first_step:  # torch checks the optimizer's step counter on a scheduler's first step only
            self._first_step = False
            with warnings.catch_warnings():  # the wrapped optimizer's step counter is torch's business
                warnings.filterwarnings("ignore", message=".*lr_scheduler.step\\(\\)` before `optimizer.step\\(\\)`")
                self.scheduler.step(*args, **kwargs)
            return
        self.scheduler.step(*args, **kwargs)  # no warnings machinery on every step: it costs microseconds

    def state_dict(self) -> dict:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.scheduler.load_state_dict(state_dict)

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def __getattr__(self, name: str):
        if name in ("scheduler", "accelerator", "step_with_optimizer", "steps_per_call", "on_first_step"):
            raise AttributeError(name)
        return getattr(self.scheduler, name)
