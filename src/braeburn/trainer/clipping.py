"""The Trainer's gradient clipping before each optimizer step (``max_grad_norm``).

Clipping costs two passes over the gradients in ``torch.nn.utils.clip_grad_norm_``: the norm, then a
multiplication of every gradient by the clip coefficient. Where the optimizer is a fused torch Adam/AdamW, the
second pass can go into the optimizer's own kernel (braeburn.accelerator.clip_fold): the kernel divides each
gradient by the inverse coefficient as it reads it, and writes it back clipped. Off by default
(``CoreTrainer.folds_clip_into_step``: on an H200 it measured no gain, docs/benchmarks.md Part 3a); when it is on,
the rule for when it folds:

- it changes no number braeburn compares bit for bit with a peer: the model trains compiled (compile decided
  "whole" or "regional", or a model compiled by torch.compile; compiled graphs already round differently from
  the eager ones), or no step can clip (``max_grad_norm=0`` with the norm measured for the log, as the
  Transformers Trainer does: ``g / 1.0`` is ``g``). An eager run that clips keeps ``clip_grad_norm_``;
- and the kernel can do it: the optimizer is torch's own Adam or AdamW with ``fused=True``, no fp16 grad scaler
  (it hands the kernel its own scale), no FSDP, a device kind whose fused kernels apply ``grad_scale``, and no
  ``braeburn check`` reading the gradients before the step.

Either way the logged ``grad_norm`` is the same tensor (the same ops compute it), a callback's ``on_optimizer_step``
sees the clipped gradients (the kernel writes them back), and a step that does not clip is bitwise the same.
"""

from __future__ import annotations

import math
from operator import itemgetter
from typing import Any

import torch

from ..accelerator.clip_fold import clip_scale


_PARAMS = itemgetter("params")


class StepClipper:
    """Clips (or only measures) the gradients before each optimizer step, folding the clip into the step where
    the rule above allows it; :meth:`follow` after each change of the training model (the compile decision).
    ``parameters``: all the model's, frozen ones too; those with a gradient at a step are clipped (Transformers
    clips ``model.parameters()`` each step, so a layer a callback unfreezes mid-run is clipped from then on). With
    ``optimizer_parameters`` the parameters the optimizer holds at each step are clipped instead, as Lightning clips
    (its precision plugin's ``main_params(optimizer)``): for an optimizer over part of the model the norm is that
    part's, and a parameter group added mid-run is clipped from then on."""

    def __init__(self, config: Any, accelerator: Any, parameters: list[torch.Tensor], *, measure_unclipped: bool,
                 fold: bool, optimizer_parameters: bool = False):
        self.config, self.acc, self.parameters = config, accelerator, parameters
        self.optimizer_parameters = optimizer_parameters
        self.measure_unclipped = measure_unclipped  # max_grad_norm=0 still measures the norm, to log it
        self.fold = fold  # False: never fold (CoreTrainer.folds_clip_into_step, for an A/B of the fold)
        self.compiled = False
        self._checked: tuple[Any, Any, tuple] | None = None  # (optimizer, grad scaler, ids) the refusal was asked for
        self.refusal: str | None = "no optimizer step yet"
        self._unheld: tuple[Any, int, list[torch.Tensor]] | None = None  # (optimizer, its size, what it lacks)

    def follow(self, model: torch.nn.Module) -> None:
        """Whether the training forward runs compiled from now on (after the compile decision, and at the start)."""
        self.compiled = self.acc.trains_compiled(model)

    def before_step(self, optimizer: Any) -> torch.Tensor | None:
        """The gradients' total norm (None when max_grad_norm=0 asks for none); clipped here, or in the step."""
        max_norm = self.config.max_grad_norm
        limit = max_norm if max_norm > 0 else math.inf if self.measure_unclipped else None
        if limit is None:
            return None
        parameters = self.parameters if not self.optimizer_parameters else [
            p for group in optimizer.param_groups for p in group["params"]]
        if self.fold and (self.compiled or limit == math.inf):
            with_grads = [p for p in parameters if p.grad is not None]  # those clip_grad_norm_ would clip
            if self._foldable(optimizer, with_grads):
                # clip_grad_norm_'s own ops: the same norm, bit for bit
                norm = torch.nn.utils.get_total_norm([p.grad for p in with_grads])
                optimizer.clip_scale = clip_scale(norm, limit)  # the fused step divides by it: no pass of its own
                return norm
        return self.acc.clip_grad_norm_(parameters, limit)

    def _foldable(self, optimizer: Any, with_grads: list[torch.Tensor]) -> bool:
        # asked again when the optimizer, the precision or the parameters with a gradient change (a layer unfrozen)
        key = (optimizer, self.acc.scaler, tuple(map(id, with_grads)))
        checked = self._checked
        if checked is None or key[0] is not checked[0] or key[1] is not checked[1] or key[2] != checked[2]:
            self._checked, self.refusal = key, self.acc.clip_fold_refusal(optimizer, with_grads)
        return self.refusal is None

    def zero_grad(self, optimizer: Any, *, unheld: bool) -> None:
        """``optimizer.zero_grad()``; with ``unheld``, also drops the gradients of the trainable parameters the
        optimizer does not hold (Transformers' ``model.zero_grad()``): kept, they would add up step after step into
        every later norm, and clip the optimizer's own gradients ever harder."""
        optimizer.zero_grad(set_to_none=True)
        if not unheld:
            return
        size = sum(map(len, map(_PARAMS, optimizer.param_groups)))  # no Python frame per step
        if self._unheld is None or self._unheld[0] is not optimizer or self._unheld[1] != size:
            held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            self._unheld = (optimizer, size, [p for p in self.parameters if id(p) not in held])
        for parameter in self._unheld[2]:
            if parameter.grad is not None:
                parameter.grad = None
