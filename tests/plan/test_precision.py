"""The Accelerator uses the plan's precision: autocast dtype, grad scaler, refusals on faked devices."""

from __future__ import annotations

import pytest
import torch

from braeburn.accelerator.core import Accelerator
from braeburn.plan.rules import PlanError
from braeburn.plan.precision import AutocastPolicy, PrecisionPolicy, ScaledFp16Policy, make_policy


pytestmark = pytest.mark.usefixtures("no_launcher_env")


def _autocast_dtype(accelerator: Accelerator) -> torch.dtype:
    with accelerator.autocast():
        return (torch.ones(2, 2) @ torch.ones(2, 2)).dtype


@pytest.mark.parametrize("asked, dtype, scaler", [
    ("no", torch.float32, False),
    ("bf16", torch.bfloat16, False),
    ("fp16", torch.float16, True),
    ("auto", torch.float32, False),  # the CPU kind keeps float32 under auto
])
def test_accelerator_autocast_follows_plan(fake_host, asked, dtype, scaler):
    fake_host("linux_cpu")
    accelerator = Accelerator(mixed_precision=asked)
    assert _autocast_dtype(accelerator) == dtype
    assert (accelerator.scaler is not None) == scaler
    if scaler:
        assert isinstance(accelerator.scaler, torch.amp.GradScaler)
    assert accelerator.precision == accelerator.plan.precision


def test_env_mixed_precision_fills_auto(fake_host, monkeypatch):
    fake_host("linux_cpu")
    monkeypatch.setenv("BRAEBURN_MIXED_PRECISION", "bf16")
    assert Accelerator().precision == "bf16"
    assert Accelerator(mixed_precision="no").precision == "no"  # an explicit argument wins


def test_fp16_on_old_mps_torch_is_refused_with_the_version(fake_host):
    fake_host("apple", torch_version=(2, 7, 0), torch_version_str="2.7.0")
    with pytest.raises(PlanError) as error:
        Accelerator(mixed_precision="fp16")
    assert "torch 2.8" in str(error.value) and "mixed_precision='fp16'" in str(error.value)


def test_bf16_on_old_macos_is_refused(fake_host):
    fake_host("apple", macos_version=(13, 6))
    with pytest.raises(PlanError, match="macOS 14"):
        Accelerator(mixed_precision="bf16")


def test_every_bad_option_is_listed(fake_host):
    fake_host("linux_cpu")
    with pytest.raises(PlanError) as error:
        Accelerator(mixed_precision="fp8", gradient_accumulation_steps=0, accelerator="tpu")
    options = {e.option for e in error.value.errors}
    assert options == {"mixed_precision", "gradient_accumulation_steps", "accelerator"}


def test_make_policy_classes():
    cpu = torch.device("cpu")
    assert type(make_policy("no", False, cpu)) is PrecisionPolicy
    assert type(make_policy("bf16", False, cpu)) is AutocastPolicy
    assert type(make_policy("fp16", True, cpu)) is ScaledFp16Policy
    with pytest.raises(ValueError, match="fp8"):
        make_policy("fp8", False, cpu)


def test_scaled_policy_reports_a_skipped_step():
    policy = make_policy("fp16", True, torch.device("cpu"))
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    policy.backward((weight * float("inf")).sum())
    assert policy.step(optimizer) is False
    assert torch.equal(weight.detach(), torch.ones(3))  # the inf gradients never reached the weights
    optimizer.zero_grad()
    policy.backward((weight * 2).sum())
    assert policy.step(optimizer) is True
    assert not torch.equal(weight.detach(), torch.ones(3))
    restored = make_policy("fp16", True, torch.device("cpu"))
    restored.load_state_dict(policy.state_dict())
    assert restored.scaler.get_scale() == policy.scaler.get_scale()
