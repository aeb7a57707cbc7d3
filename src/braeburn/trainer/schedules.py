"""The learning-rate schedules, step for step those of ``transformers.get_scheduler``.

Each function is the multiplier LambdaLR applies at optimizer step ``step`` (0 for the first step). The arithmetic
is written in Transformers' order, so that the learning rates are bitwise the same, not only close: the warm-up is
``step / warmup`` (the first step has a learning rate of 0), and ``constant`` has no warm-up at all.
"""

from __future__ import annotations

import math
from typing import Callable

import torch


def _warming(step: int, warmup: int) -> float:
    return float(step) / float(max(1, warmup))


def _progress(step: int, warmup: int, total: int) -> float:
    return float(step - warmup) / float(max(1, total - warmup))


def _linear(step: int, warmup: int, total: int, options: dict) -> float:
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


def _cosine(step: int, warmup: int, total: int, options: dict) -> float:
    cycles = options.get("num_cycles", 0.5)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * _progress(step, warmup, total))))


def _cosine_with_restarts(step: int, warmup: int, total: int, options: dict) -> float:
    progress = _progress(step, warmup, total)
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(options.get("num_cycles", 1)) * progress) % 1.0))))


def _cosine_with_min_lr(step: int, warmup: int, total: int, options: dict) -> float:
    floor, cycles = options.get("min_lr_rate", 0.0), options.get("num_cycles", 0.5)
    factor = 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * _progress(step, warmup, total)))
    return max(0, factor * (1 - floor) + floor)


def _polynomial(step: int, warmup: int, total: int, options: dict) -> float:
    """Decays from lr_init to lr_end (absolute, 1e-7 by default as in Transformers) along (1 - progress)**power."""
    lr_init, lr_end = options.get("lr_init", 1.0), options.get("lr_end", 1e-7)
    if step > total:
        return lr_end / lr_init
    remaining = 1 - (step - warmup) / max(1, total - warmup)
    return ((lr_init - lr_end) * remaining ** options.get("power", 1.0) + lr_end) / lr_init


def _constant(step: int, warmup: int, total: int, options: dict) -> float:
    return 1.0


def _inverse_sqrt(step: int, warmup: int, total: int, options: dict) -> float:
    timescale = options.get("timescale") or warmup or 10_000
    return 1.0 / math.sqrt((step + timescale - warmup) / timescale)


WSD_SHAPES = ("linear", "cosine", "1-sqrt")


def _wsd_shape(kind: str, progress: float, rising: bool, cycles: float) -> float:
    if kind == "linear":
        return progress if rising else 1.0 - progress
    if kind == "cosine":
        return 0.5 * (1.0 - math.cos(math.pi * progress)) if rising else \
            0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress))
    return 1.0 - math.sqrt(1.0 - progress) if rising else 1.0 - math.sqrt(progress)


def _warmup_stable_decay(step: int, warmup: int, total: int, options: dict) -> float:
    """Transformers' get_wsd_schedule: a warm-up from min_lr_ratio, a stable stretch, a decay of num_decay_steps."""
    floor, cycles, decay = options.get("min_lr_ratio", 0), options.get("num_cycles", 0.5), options["num_decay_steps"]
    stable = options.get("num_stable_steps")
    stable = total - warmup - decay if stable is None else stable
    if step < warmup:
        factor = _wsd_shape(options.get("warmup_type", "linear"), float(step) / float(max(1, warmup)), True, cycles)
        return max(0.0, factor * (1.0 - floor) + floor)
    if step < warmup + stable:
        return 1.0
    if step < warmup + stable + decay:
        progress = float(step - warmup - stable) / float(max(1, decay))
        factor = _wsd_shape(options.get("decay_type", "cosine"), progress, False, cycles)
        return max(0.0, factor * (1.0 - floor) + floor)
    return floor


SCHEDULES: dict[str, Callable[[int, int, int, dict], float]] = {
    "linear": _linear, "cosine": _cosine, "cosine_with_restarts": _cosine_with_restarts,
    "cosine_with_min_lr": _cosine_with_min_lr, "polynomial": _polynomial, "constant": _constant,
    "constant_with_warmup": _constant, "inverse_sqrt": _inverse_sqrt, "warmup_stable_decay": _warmup_stable_decay,
}
OWN_WARMUP = ("constant", "warmup_stable_decay")  # Transformers' constant has none; wsd warms up its own way


def schedule_factor(step: int, *, kind: str, warmup: int, total: int, options: dict | None = None) -> float:
    """The learning-rate multiplier at optimizer step ``step``: linear warm-up from 0, then ``kind``.

    ``options`` (lr_scheduler_kwargs): ``num_cycles`` for the cosines, ``min_lr_rate`` for cosine_with_min_lr,
    ``power``, ``lr_end`` and ``lr_init`` (absolute rates) for polynomial, ``timescale`` for inverse_sqrt.
    """
    return schedule_curve(kind, warmup, total, options or {})(step)


def schedule_curve(kind: str, warmup: int, total: int, options: dict) -> Callable[[int], float]:
    """:func:`schedule_factor` as a function of the step alone, its look-ups done once (a scheduler calls it at every
    optimizer step)."""
    curve, warms_up = SCHEDULES[kind], kind not in OWN_WARMUP
    if curve is _linear:  # the default: _linear's division, its divisor worked out once (the same float)
        span = float(max(1, total - warmup))

        def linear(step: int) -> float:
            return _warming(step, warmup) if step < warmup else max(0.0, float(total - step) / span)

        return linear

    def factor(step: int) -> float:
        return _warming(step, warmup) if warms_up and step < warmup else curve(step, warmup, total, options)

    return factor


def schedule_options(kind: str, kwargs: dict | None, base_lr: float) -> dict:
    """lr_scheduler_kwargs in the form schedule_factor takes (Transformers also takes min_lr as an absolute)."""
    options = dict(kwargs or {})
    if "min_lr" in options:
        options["min_lr_rate"] = options.pop("min_lr") / base_lr
    if "lr_end_rate" in options:
        options["lr_end"] = options.pop("lr_end_rate") * base_lr
    if kind != "polynomial":
        return options
    options["lr_init"] = base_lr
    if options.get("lr_end", 1e-7) >= base_lr:  # Transformers refuses it too
        raise ValueError(f"lr_scheduler_kwargs lr_end={options.get('lr_end', 1e-7)} must be smaller than the "
                         f"learning rate ({base_lr}) for the polynomial schedule; lower lr_end or raise "
                         "--learning_rate")
    return options


def lambda_schedule(optimizer: torch.optim.Optimizer, *, kind: str, warmup: int, total: int,
                    kwargs: dict | None = None) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR over ``optimizer`` with the schedule ``kind`` (base rate: the optimizer's default lr)."""
    options = schedule_options(kind, kwargs, optimizer.defaults["lr"])
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_curve(kind, warmup, total, options))
