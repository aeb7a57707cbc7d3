"""Gradient clipping folded into a fused Adam/AdamW step.

``torch.nn.utils.clip_grad_norm_`` goes over the gradients twice before the optimizer reads them: once for the
norm, once more to multiply every gradient by the clip coefficient (``_foreach_mul_``, a read and a write of
every gradient). torch's fused Adam and AdamW kernels (CPU and CUDA) take a ``grad_scale``, the tensor GradScaler
hands them as ``optimizer.grad_scale``: they divide each gradient by it as they read it, and write the divided
gradient back. Handing them the inverse of the clip coefficient clips inside the step; the multiplying pass goes
(it saves one read of the gradients, as the kernel's write-back replaces the pass's write). The norm is computed
as ``clip_grad_norm_`` computes it (``torch.nn.utils.get_total_norm``), so the logged ``grad_norm`` is the same
tensor, bit for bit, and the gradients a callback reads after the step are the clipped ones.

The numbers: on a step that does not clip, the coefficient is exactly 1.0 and so is its inverse, and ``g / 1.0``
is ``g``: the step is bitwise the one ``clip_grad_norm_`` and the optimizer make. On a step that clips,
``g / (1/c)`` is not ``g * c``: each clipped gradient may differ from ``clip_grad_norm_``'s in its last bit (a
relative 2**-23 in float32), and the parameters by the rounding that follows. So the Trainer, when folding is on,
folds only where braeburn compares no number bit for bit with a peer: a model that trains compiled (compiled graphs
round differently from eager ones already), or a limit that never clips (``max_grad_norm=0`` with the norm still
measured for the log, the Transformers Trainer's way). See :class:`braeburn.trainer.clipping.StepClipper`.

Folding is off by default (``CoreTrainer.folds_clip_into_step``): on an H200 it measured no gain (docs/benchmarks.md,
Part 3a). It stays for experiments, with its tests.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

FUSED_CLASSES = (torch.optim.Adam, torch.optim.AdamW)  # their fused kernels divide by grad_scale


def fold_refusal(optimizer: torch.optim.Optimizer, *, grad_scaler: bool, kernel_applies_grad_scale: bool,
                 sharded: bool, watched: bool, clipped: Sequence[torch.Tensor] | None = None) -> str | None:
    """Why the clip cannot go into ``optimizer``'s step (None: it can). ``optimizer`` is the torch optimizer
    itself (not the Accelerator's wrapper); ``clipped``: the parameters whose gradients the clip must scale, and
    no others: of those the optimizer holds, every one with a gradient now (None: not checked)."""
    if grad_scaler:
        return "fp16's grad scaler hands the fused kernel its own grad_scale"
    if sharded:
        return "FSDP's gradients are DTensor shards (not tried with the fused kernel's grad_scale)"
    if watched:
        return "braeburn check reads (and replaces) the gradients before the step: they must be clipped by then"
    if not kernel_applies_grad_scale:
        return "this device kind's fused Adam/AdamW kernels ignore grad_scale"
    if type(optimizer) not in FUSED_CLASSES:  # exactly: a subclass's own step() may never read grad_scale
        return f"{type(optimizer).__name__} is not torch.optim.Adam or AdamW"
    if not all(group.get("fused") for group in optimizer.param_groups):
        return "the optimizer is not fused (fused=True)"
    if hasattr(optimizer, "grad_scale"):
        return "the optimizer has a grad_scale of its own"
    return _parameters_refusal(optimizer, clipped)


def _parameters_refusal(optimizer: torch.optim.Optimizer, clipped: Sequence[torch.Tensor] | None) -> str | None:
    held = [p for group in optimizer.param_groups for p in group["params"]]
    if any(p.dtype in (torch.float64, torch.complex128) for p in held):
        # the kernels read grad_scale as a float32: g / (1/c) would carry float32's rounding into float64 gradients
        return "the optimizer holds float64 parameters (the fused kernel's grad_scale is a float32)"
    if clipped is None:
        return None
    held_ids, clipped_ids = {id(p) for p in held}, {id(p) for p in clipped}
    if not clipped_ids <= held_ids:
        # the kernel scales only its own parameters' gradients: the others would stay unclipped (and a callback,
        # or the next window's accumulation, would read them so)
        return "the optimizer does not hold every parameter whose gradient is clipped"
    if any(p.grad is not None and id(p) not in clipped_ids for p in held):
        # ... and all of them: a parameter outside the model (a loss's temperature) would be clipped too
        return "the optimizer holds parameters whose gradients are not clipped (outside the model)"
    return None


def clip_scale(total_norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """The ``grad_scale`` that clips to ``max_norm``: the inverse of ``clip_grad_norm_``'s coefficient
    ``min(max_norm / (total_norm + 1e-6), 1)``, computed with its ops. Exactly 1.0 where it does not clip; as
    ``clip_grad_norm_`` does, a non-finite norm makes every gradient 0 or NaN. float32: the kernels read a float;
    the inverse is taken in float32 (a bfloat16/float16 coefficient is exact there), so a half-precision gradient
    stays within an ulp of ``g * c`` (the inverse rounded to float16 first put it up to ~3 ulps away)."""
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    return torch.reciprocal(coefficient.float())
