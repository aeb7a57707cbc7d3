"""The default optimizer (AdamW, no decay on biases and norms) and the default schedule (see schedules.py)."""

from __future__ import annotations

from typing import Any

import torch

from ..devices.base import DeviceKind
from ..devices.host import HostFacts
from .config import CoreTrainingConfig
from .schedules import lambda_schedule, schedule_factor  # noqa: F401  (schedule_factor: re-exported)


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices and embeddings; leave 1-D parameters (biases, norm weights) undecayed.

    Without weight decay there is one group: a fused AdamW launches one kernel per group.
    """
    if weight_decay == 0:
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": 0.0}]
    decay, no_decay = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (decay if parameter.ndim >= 2 else no_decay).append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


def _optim_args(text: str | None) -> dict[str, float]:
    """``"momentum=0.9,nesterov=true"`` as keyword arguments (numbers and booleans)."""
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, _, value = item.partition("=")
        if not _:
            raise ValueError(f"optim_args={text!r}: write key=value pairs separated by commas, e.g. momentum=0.9")
        low = value.strip().lower()
        out[key.strip()] = low == "true" if low in ("true", "false") else float(value)
    return out


def use_fused_adamw(kind: DeviceKind, grad_scaler: bool, host: HostFacts | None = None) -> bool:
    """Fused where the kind has the kernel, with a grad scaler too: where the fused kernel ignores GradScaler's
    found_inf (``fused_optimizers_honour_grad_scaler`` False, MPS), ``ScaledFp16Policy`` unscales (GradScaler
    records found_inf as it does), lets ``update()`` read that found_inf, and skips the step itself when the scale
    went down (no sweep over the gradients of its own), so the kernel only ever sees true, finite gradients."""
    return kind.fused_adamw


def default_optimizer(model: torch.nn.Module, config: CoreTrainingConfig, kind: DeviceKind, *,
                      grad_scaler: bool = False, groups: list[dict] | None = None) -> torch.optim.Optimizer:
    """config.optim: AdamW with decoupled weight decay (fused into one kernel where the device kind has it,
    optim is adamw_torch_fused, the default, and ``grad_scaler`` does not rule the fused kernel out), or
    SGD, Adagrad, RMSprop. ``groups``: the parameter groups, :func:`parameter_groups`'s when not given."""
    groups = parameter_groups(model, config.weight_decay) if groups is None else groups
    if not any(group["params"] for group in groups):
        raise ValueError("the model has no parameter with requires_grad=True, so there is nothing to train; "
                         "unfreeze some parameters or pass your own optimizer=")
    extra = _optim_args(getattr(config, "optim_args", None))
    name = getattr(config, "optim", "adamw_torch_fused")
    if name in ("sgd", "adagrad", "rmsprop"):
        cls = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad, "rmsprop": torch.optim.RMSprop}[name]
        return cls(groups, lr=config.learning_rate, **extra)
    floating = all(p.is_floating_point() for group in groups for p in group["params"])
    fused = use_fused_adamw(kind, grad_scaler) and floating and name in ("adamw_torch_fused", "adamw")
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_epsilon, fused=True if fused else None, **extra)


def default_scheduler(optimizer: torch.optim.Optimizer, config: CoreTrainingConfig,
                      total_steps: int) -> Any:
    """config.lr_scheduler_type over ``total_steps`` optimizer steps, as ``transformers.get_scheduler`` makes it
    (reduce_lr_on_plateau: torch's ReduceLROnPlateau with lr_scheduler_kwargs, stepped after each evaluation)."""
    if config.lr_scheduler_type == "reduce_lr_on_plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **(config.lr_scheduler_kwargs or {}))
    return lambda_schedule(optimizer, kind=config.lr_scheduler_type, warmup=config.warmup_for(total_steps),
                           total=total_steps, kwargs=getattr(config, "lr_scheduler_kwargs", None))
