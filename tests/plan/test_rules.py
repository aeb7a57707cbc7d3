"""The option rules, from a table, on faked host facts."""

from __future__ import annotations

import pytest

from braeburn.plan.rules import PlanError, RunOptions, make_plan
from tests.conftest import APPLE_M, CUDA_BOX, LINUX_CPU

ROSETTA = APPLE_M.replace(machine="x86_64", rosetta=True, mps_available=False)
OLD_TORCH_MAC = APPLE_M.replace(torch_version=(2, 6, 0), torch_version_str="2.6.0", macos_version=(13, 6))
TURING = CUDA_BOX.replace(cuda_capabilities=((7, 5), (7, 5)))

# (host, options, device, precision, grad_scaler, strategy)
CHOICES = [
    (LINUX_CPU, {}, "cpu", "no", False, "single"),
    (APPLE_M, {}, "mps", "no", False, "single"),  # no measurement backs bf16 on M1/M2 (float32)
    (CUDA_BOX, {}, "cuda", "bf16", False, "single"),
    (TURING, {}, "cuda", "fp16", True, "single"),
    (OLD_TORCH_MAC, {}, "mps", "no", False, "single"),  # bf16 needs macOS 14, fp16 needs GradScaler (2.8)
    (APPLE_M.replace(macos_version=(13, 6)), {}, "mps", "no", False, "single"),  # fp16 is not measured either
    (APPLE_M, {"cpu": True}, "cpu", "no", False, "single"),
    (APPLE_M, {"env_device": "cpu"}, "cpu", "no", False, "single"),
    (CUDA_BOX, {"accelerator": "mps", "env_device": "cpu"}, "cpu", "no", False, "single"),
    (APPLE_M, {"accelerator": "gpu"}, "mps", "no", False, "single"),
    (CUDA_BOX, {"accelerator": "gpu", "devices": 2}, "cuda", "bf16", False, "single"),
    (APPLE_M, {"accelerator": "mps", "devices": 1}, "mps", "no", False, "single"),
    (ROSETTA, {}, "cpu", "no", False, "single"),
    (CUDA_BOX, {"num_processes": 2}, "cuda", "bf16", False, "ddp"),
    (CUDA_BOX, {"num_processes": 2, "strategy": "fsdp"}, "cuda", "bf16", False, "fsdp"),
    (LINUX_CPU, {"num_processes": 4}, "cpu", "no", False, "ddp"),
    (LINUX_CPU, {"mixed_precision": "bf16"}, "cpu", "bf16", False, "single"),
    (CUDA_BOX, {"mixed_precision": "no"}, "cuda", "no", False, "single"),
    (CUDA_BOX, {"mixed_precision": "fp16"}, "cuda", "fp16", True, "single"),
]


@pytest.mark.parametrize("host, options, device, precision, scaler, strategy", CHOICES)
def test_choices(host, options, device, precision, scaler, strategy):
    plan = make_plan(RunOptions(**options), host)
    assert (plan.device.name, plan.precision, plan.grad_scaler, plan.strategy) == (device, precision, scaler, strategy)
    assert plan.device_reason and plan.precision_reason


# (host, options, [(option, words in the message), ...])
REFUSALS = [
    (ROSETTA, {"accelerator": "mps"}, [("accelerator", "Rosetta")]),
    (LINUX_CPU, {"accelerator": "cuda"}, [("accelerator", "CUDA is not available")]),
    (LINUX_CPU, {"accelerator": "gpu"}, [("accelerator", "MPS is not available")]),
    (LINUX_CPU, {"accelerator": "tpu"}, [("accelerator", "choose one of")]),
    (LINUX_CPU, {"env_device": "mps"}, [("BRAEBURN_DEVICE", "MPS is not available")]),
    (APPLE_M, {"devices": 2}, [("devices", "has 1 usable mps device;")]),
    (CUDA_BOX, {"devices": 3}, [("devices", "pass devices=2 or fewer")]),
    (CUDA_BOX, {"devices": 0}, [("devices", ">= 1")]),
    (APPLE_M, {"num_processes": 2}, [("num_processes", "no process-group backend")]),
    (APPLE_M, {"strategy": "ddp"}, [("strategy", "pass --cpu")]),
    (LINUX_CPU, {"strategy": "zero3"}, [("strategy", "choose one of")]),
    (LINUX_CPU, {"num_processes": 0}, [("num_processes", ">= 1")]),
    (TURING, {"mixed_precision": "bf16"}, [("mixed_precision", "compute capability 8.0")]),
    (OLD_TORCH_MAC, {"mixed_precision": "bf16"}, [("mixed_precision", "macOS 14")]),
    (OLD_TORCH_MAC, {"mixed_precision": "fp16"}, [("mixed_precision", "torch 2.8")]),
    (LINUX_CPU, {"mixed_precision": "fp8"}, [("mixed_precision", "choose one of")]),
    (LINUX_CPU, {"compile": "maybe"}, [("compile", "auto, true, false or regional")]),
    (APPLE_M, {"mps_high_watermark_ratio": 1.0, "mps_low_watermark_ratio": 1.4}, [("mps_low_watermark_ratio", "must not exceed")]),
    (APPLE_M, {"mps_high_watermark_ratio": -1.0}, [("mps_high_watermark_ratio", ">= 0")]),
    # every error at once:
    (APPLE_M, {"num_processes": 2, "devices": 4, "mixed_precision": "fp8", "compile": "x"},
     [("devices", "usable mps"), ("num_processes", "backend"), ("mixed_precision", "choose"), ("compile", "auto")]),
]


@pytest.mark.parametrize("host, options, expected", REFUSALS)
def test_refusals_name_option_value_and_fix(host, options, expected):
    with pytest.raises(PlanError) as caught:
        make_plan(RunOptions(**options), host)
    errors = caught.value.errors
    assert [e.option for e in errors] == [option for option, _ in expected]
    for error, (_, words) in zip(errors, expected):
        assert words in error.message
    assert str(len(errors)) in str(caught.value)


def test_rosetta_refusal_reads_like_the_style_guide():
    with pytest.raises(PlanError) as caught:
        make_plan(RunOptions(accelerator="mps"), ROSETTA)
    text = str(caught.value)
    assert "accelerator='mps'" in text and "Rosetta (x86_64)" in text
    assert "install an arm64 Python" in text and "--cpu" in text


def test_auto_on_the_cpu_says_what_it_decided_without_claiming_this_cpu_has_no_fast_bf16():
    # braeburn knows nothing of a CPU's bf16 instructions (a CPU with AMX runs bf16 faster), so the reason may only
    # say what was decided and why in terms true on every CPU, and how to try bf16.
    reason = make_plan(RunOptions(), LINUX_CPU).precision_reason
    assert reason.startswith("auto: float32, since auto neither checks this CPU's instructions nor times a "
                             "mixed-precision trial on a CPU")
    assert "worth" not in reason and "AMX" in reason and "changes the numbers" in reason
    assert reason.endswith("; pass --mixed_precision bf16 to try it and compare the step times")


def test_env_for_mps_child_and_compile_defaults():
    plan = make_plan(RunOptions(mps_high_watermark_ratio=0.0), APPLE_M)
    assert plan.env == {"PYTORCH_ENABLE_MPS_FALLBACK": "1", "PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0"}
    assert not plan.compile and "MPS" in plan.compile_reason
    assert make_plan(RunOptions(), CUDA_BOX).compile
    assert make_plan(RunOptions(compile="false"), CUDA_BOX).compile is False
    assert make_plan(RunOptions(), LINUX_CPU).env == {}
    assert make_plan(RunOptions(num_processes=2), CUDA_BOX).backend == "nccl"
    assert make_plan(RunOptions(), CUDA_BOX).backend is None


def test_a_high_watermark_alone_below_torchs_low_default_gets_a_matching_low():
    env = make_plan(RunOptions(mps_high_watermark_ratio=1.0), APPLE_M).env
    assert env["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] == "1.0"
    assert float(env["PYTORCH_MPS_LOW_WATERMARK_RATIO"]) < 1.0
    assert "PYTORCH_MPS_LOW_WATERMARK_RATIO" not in make_plan(RunOptions(mps_high_watermark_ratio=1.5), APPLE_M).env


def test_compile_regional_is_an_explicit_compile_by_regions():
    plan = make_plan(RunOptions(compile="regional"), CUDA_BOX)
    assert plan.compile and plan.compile_regional and not plan.compile_auto
    assert plan.compile_reason == "compile=regional, as asked"
    assert not make_plan(RunOptions(compile="true"), CUDA_BOX).compile_regional
    assert not make_plan(RunOptions(), CUDA_BOX).compile_regional


@pytest.mark.parametrize("spelled", ["Regional", "REGIONAL", " regional "])
def test_compile_choices_are_read_in_any_case_and_spacing(spelled):
    """"TRUE" was read as True, while "Regional" and "Auto" were refused as not a choice."""
    plan = make_plan(RunOptions(compile=spelled), CUDA_BOX)
    assert plan.compile and plan.compile_regional and plan.compile_reason == "compile=regional, as asked"
    assert make_plan(RunOptions(compile="Auto"), CUDA_BOX).compile_auto
    assert not make_plan(RunOptions(compile=" FALSE"), CUDA_BOX).compile
