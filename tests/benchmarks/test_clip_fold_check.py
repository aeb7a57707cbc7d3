"""benchmarks/clip_fold_check.py, the device check of the folded clip: its claims hold on the CPU's fused kernel,
and it says so; a kernel that clipped nothing would fail it."""

from __future__ import annotations

from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_the_check_passes_on_the_cpus_fused_kernel_and_fails_a_kernel_that_ignores_grad_scale(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import clip_fold_check

    result = clip_fold_check.check(torch.device("cpu"))
    assert result["ok"] and result["unclipped_bitwise"] and result["clipped_norm_bitwise"]
    assert 0 < result["clipped_grad_max_ulps"] <= 1 and result["clipped_params_fraction_of_bound"] <= 1
    monkeypatch.setattr(clip_fold_check, "clip_scale", lambda norm, limit: torch.tensor(1.0))  # as MPS's kernel
    assert not clip_fold_check.check(torch.device("cpu"))["ok"]
