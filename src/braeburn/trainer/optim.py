"""The default optimizer (AdamW, no decay on biases and norms) and the warmup schedules."""

from __future__ import annotations

import math

import torch

from ..devices.base import DeviceKind
from ..devices.host import HostFacts, current_host
from .config import TrainingConfig


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


def use_fused_adamw(kind: DeviceKind, grad_scaler: bool, host: HostFacts | None = None) -> bool:
    """Fused where the kind has the kernel, unless a grad scaler is active and the kernel would apply
    an overflow step anyway (it must honour GradScaler's found_inf: see ``ScaledFp16Policy``)."""
    if not kind.fused_adamw:
        return False
    return not grad_scaler or kind.fused_optimizers_honour_grad_scaler(host or current_host())


def default_optimizer(model: torch.nn.Module, config: TrainingConfig, kind: DeviceKind, *,
                      grad_scaler: bool = False) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay, fused into one kernel where the device kind has it and
    ``grad_scaler`` (the plan's: fp16 with a GradScaler) does not rule the fused kernel out."""
    groups = parameter_groups(model, config.weight_decay)
    if not groups:
        raise ValueError("the model has no parameter with requires_grad=True, so there is nothing to train; "
                         "unfreeze some parameters or pass your own optimizer=")
    floating = all(p.is_floating_point() for group in groups for p in group["params"])
    fused = use_fused_adamw(kind, grad_scaler) and floating
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_epsilon, fused=True if fused else None)


def schedule_factor(step: int, *, kind: str, warmup: int, total: int) -> float:
    """The learning-rate multiplier at optimizer step ``step``: linear warmup, then ``kind``."""
    if step < warmup:
        return (step + 1) / (warmup + 1)  # never exactly 0, so the first step moves the weights
    if kind == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if kind == "linear":
        return max(0.0, 1.0 - progress)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))  # cosine


def default_scheduler(optimizer: torch.optim.Optimizer, config: TrainingConfig,
                      total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    warmup, kind = config.warmup_for(total_steps), config.lr_scheduler_type

    def factor(step: int) -> float:
        return schedule_factor(step, kind=kind, warmup=warmup, total=total_steps)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
