"""The schedules' numbers, written down from Transformers' formulas (no Transformers needed)."""

from __future__ import annotations

import pytest
import torch

from braeburn.trainer.config import TrainingConfig
from braeburn.trainer.schedules import lambda_schedule, schedule_factor


def _factors(kind: str, warmup: int, total: int, **options) -> list[float]:
    return [schedule_factor(s, kind=kind, warmup=warmup, total=total, options=options) for s in range(total + 1)]


def test_warmup_starts_at_zero():
    assert _factors("linear", 4, 8)[:5] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert _factors("constant_with_warmup", 4, 8)[:5] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_constant_ignores_warmup():
    assert _factors("constant", 4, 8) == [1.0] * 9


def test_inverse_sqrt_without_warmup_uses_a_timescale_of_10000():
    assert schedule_factor(10_000 * 3, kind="inverse_sqrt", warmup=0, total=5) == pytest.approx(0.5)
    assert schedule_factor(12, kind="inverse_sqrt", warmup=4, total=20) == pytest.approx(1 / 3 ** 0.5)


def test_polynomial_ends_at_1e_7():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    scheduler = lambda_schedule(optimizer, kind="polynomial", warmup=0, total=4)
    for _ in range(6):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(1e-7)
    with pytest.raises(ValueError, match="lr_end=0.01 must be smaller"):
        lambda_schedule(optimizer, kind="polynomial", warmup=0, total=4, kwargs={"lr_end": 1e-2})


def test_cosine_with_restarts():
    assert _factors("cosine_with_restarts", 0, 4, num_cycles=2) == pytest.approx([1.0, 0.5, 1.0, 0.5, 0.0])


def test_warmup_ratio_rounds_up():
    assert TrainingConfig(output_dir="unused", warmup_ratio=0.1).warmup_for(15) == 2
