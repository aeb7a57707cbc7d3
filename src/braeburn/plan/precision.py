"""Mixed-precision policies: one small class per mode, chosen from the resolved plan.

A policy owns the autocast context and, for fp16, the grad scaler. It names no device: the
autocast device type comes from the torch device the plan resolved to, and whether a grad scaler
is needed comes from the plan (which asked the device kind).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class Fp16OverflowError(RuntimeError):
    """fp16's grad scaler can apply no step any more: its scale fell to 0 (or is not finite)."""


class PrecisionPolicy:
    """float32: no autocast, no scaler. The base of the mixed modes."""

    name = "no"
    dtype: torch.dtype | None = None
    scaler: torch.amp.GradScaler | None = None

    def __init__(self, device: torch.device):
        self.device = device

    def autocast(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        loss.backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true scale before clipping (nothing to do without a scaler)."""

    def step(self, optimizer: torch.optim.Optimizer, closure=None) -> bool:
        """Step ``optimizer``; return False when the step was skipped (inf/nan gradients)."""
        optimizer.step(closure) if closure is not None else optimizer.step()
        return True

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device})"


class AutocastPolicy(PrecisionPolicy):
    """bf16 (or fp16 where no scaler is wanted): autocast only; bf16 keeps float32's range."""

    def __init__(self, device: torch.device, name: str):
        super().__init__(device)
        self.name, self.dtype = name, _DTYPES[name]

    def autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)


class ScaledFp16Policy(AutocastPolicy):
    """fp16 autocast plus a grad scaler, which keeps small fp16 gradients from flushing to zero.

    ``GradScaler.step`` does not skip an overflow step itself for a fused optimizer
    (``_step_supports_amp_scaling``): it hands the optimizer ``grad_scale`` and ``found_inf`` and trusts
    the fused kernel to skip. Where the device kind says its fused kernels ignore them
    (``fused_honours_scaler=False``), this policy unscales, lets ``update()`` read the scaler's own ``found_inf``
    and skips the step when the scale went down.

    Either way a step counts as applied only when ``update()`` left the scale where it was or raised it. A scale of
    0 (or not finite) can apply no step ever again, and ``0 * 0.5 == 0`` would pass that comparison: it stops the
    run with :class:`Fp16OverflowError`, which names the fix (bf16 or float32), before the optimizer steps.
    """

    def __init__(self, device: torch.device, fused_honours_scaler: bool = True):
        super().__init__(device, "fp16")
        self.scaler = torch.amp.GradScaler(device.type)
        self.fused_honours_scaler = fused_honours_scaler
        self._scale = self.scaler.get_scale()  # the scale after the last update (no sync before the first scale())

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.scaler.scale(loss).backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, closure=None) -> bool:
        before = self._live_scale()  # the scale the last update left (no sync: read back then)
        if not self.fused_honours_scaler and getattr(optimizer, "_step_supports_amp_scaling", False):
            return self._step_skipping_overflow(optimizer, before, closure)
        self.scaler.step(optimizer, closure) if closure is not None else self.scaler.step(optimizer)
        return self._update(before)

    def _step_skipping_overflow(self, optimizer: torch.optim.Optimizer, before: float, closure=None) -> bool:
        try:
            self.scaler.unscale_(optimizer)  # the fused kernel then gets true gradients; found_inf is recorded
        except RuntimeError as error:  # already unscaled (gradient clipping) since the last update
            if "unscale_() has already been called" not in str(error):
                raise
        # update() reads the found_inf that unscale_ recorded and lowers the scale exactly when it found inf/NaN,
        # so the scale read back (one sync, as on the other path) says whether to step: no sweep of the gradients.
        applied = self._update(before)
        if applied:  # the gradients are unscaled: a plain step, with no grad_scale or found_inf to hand over
            optimizer.step(closure) if closure is not None else optimizer.step()
        return applied

    def _update(self, before: float) -> bool:
        """``update()``, then whether the step was applied: one sync per optimizer step (the scale read back).
        update() lowers the scale exactly when this step found inf/NaN, and the step was skipped then."""
        self.scaler.update()
        self._scale = self.scaler.get_scale()
        _refuse_dead_scale(self._scale)
        return self._scale >= before

    def _live_scale(self) -> float:
        """The scale the last update left, refused where no step can be applied with it."""
        scale = self._scale if self._scale is not None else self.scaler.get_scale()
        _refuse_dead_scale(scale)
        return scale

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
            self._scale = self.scaler.get_scale()


def _refuse_dead_scale(scale: float) -> None:
    """A scale of 0 (halved below float32's smallest number after about 165 overflowing steps in a row) or one that
    is not finite never recovers: the scaled loss is 0 (or inf), every gradient unscales to inf/NaN, every update
    halves it again. Comparing scales would read 0 >= 0 as an applied step, so the run stops here, before an
    optimizer sees such gradients."""
    if scale > 0 and math.isfinite(scale):
        return
    raise Fp16OverflowError(
        f"mixed_precision='fp16': the grad scaler's scale is {scale}, with which no step can be applied (the scaled "
        "loss is 0 or inf, every gradient unscales to inf/NaN, every step is skipped). A scale of 0 means the steps "
        "found inf/NaN gradients about 165 times in a row: the loss or its gradients overflow float16 on every step. "
        "Train with mixed_precision='bf16' (float32's range) or 'no' (float32); if float32's gradients are inf/NaN "
        "too, the model or the data makes them")


def make_policy(precision: str, grad_scaler: bool, device: torch.device,
                fused_honours_scaler: bool = True) -> PrecisionPolicy:
    """The policy for a plan's ``precision`` ("no" | "fp16" | "bf16") and ``grad_scaler`` choice.

    ``fused_honours_scaler``: the device kind's ``fused_optimizers_honour_grad_scaler(host)``.
    """
    if precision == "no":
        return PrecisionPolicy(device)
    if precision not in _DTYPES:
        raise ValueError(f"precision={precision!r} is not a mixed-precision mode; expected one of no, fp16, bf16")
    if grad_scaler:
        return ScaledFp16Policy(device, fused_honours_scaler)
    return AutocastPolicy(device, precision)


__all__ = ["Fp16OverflowError", "PrecisionPolicy", "AutocastPolicy", "ScaledFp16Policy", "make_policy"]
