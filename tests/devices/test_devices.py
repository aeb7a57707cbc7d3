"""Every device branch, on faked host facts."""

from __future__ import annotations

import pytest

from braeburn.devices import KINDS, get_kind
from braeburn.devices.host import parse_version
from tests.conftest import APPLE_M, CUDA_BOX, LINUX_CPU

mps, cuda, cpu = get_kind("mps"), get_kind("cuda"), get_kind("cpu")


@pytest.mark.parametrize("facts, usable, fixable, words", [
    (APPLE_M, True, False, "Apple-silicon GPU"),
    (LINUX_CPU, False, False, "MPS needs macOS on Apple silicon; this is Linux"),
    (APPLE_M.replace(machine="x86_64", rosetta=True, mps_available=False), False, True, "Rosetta"),
    (APPLE_M.replace(machine="x86_64", apple_silicon=False, mps_available=False), False, False, "Intel CPU"),
    (APPLE_M.replace(mps_built=False, mps_available=False), False, True, "built without MPS"),
    (APPLE_M.replace(macos_version=(13, 6), mps_available=False), False, True, "macOS 13.6 is older than torch"),
    (APPLE_M.replace(macos_version=(12, 5), torch_version=(2, 7, 1), torch_version_str="2.7.1",
                     mps_available=False), False, True, "older than torch 2.7.1 needs for MPS (13.0)"),
    (APPLE_M.replace(macos_version=(13, 6), torch_version=(2, 7, 1), torch_version_str="2.7.1",
                     mps_available=False), False, True, "reports MPS as unavailable"),
])
def test_mps_diagnosis(facts, usable, fixable, words):
    availability = mps.availability(facts)
    assert availability.usable is usable
    assert availability.fixable is fixable
    assert words in availability.reason
    if fixable:
        assert availability.fix


def test_rosetta_fix_names_arm64_python_and_cpu():
    availability = mps.availability(APPLE_M.replace(machine="x86_64", rosetta=True, mps_available=False))
    assert "arm64 Python" in availability.fix and "--cpu" in availability.fix


@pytest.mark.parametrize("torch_version, macos, dtype, supported, scaler_ok, words", [
    ((2, 4, 0), (15, 0), "fp16", False, True, "torch 2.5"),
    ((2, 6, 0), (15, 0), "fp16", True, False, "GradScaler('mps') needs torch 2.8"),
    ((2, 8, 0), (15, 0), "fp16", True, True, ""),
    ((2, 5, 1), (15, 0), "bf16", False, True, "torch 2.6"),
    ((2, 6, 0), (13, 5), "bf16", False, True, "macOS 14"),
    ((2, 6, 0), (14, 0), "bf16", True, True, ""),
])
def test_mps_precision_table(torch_version, macos, dtype, supported, scaler_ok, words):
    facts = APPLE_M.replace(torch_version=torch_version, torch_version_str=".".join(map(str, torch_version)),
                            macos_version=macos)
    support = mps.precision_support(dtype, facts)
    assert support.supported is supported
    assert support.grad_scaler_supported is scaler_ok
    assert words in support.reason


def test_cuda_bf16_needs_ampere():
    old = CUDA_BOX.replace(cuda_capabilities=((7, 5),))
    assert not cuda.precision_support("bf16", old).supported
    assert "compute capability 8.0" in cuda.precision_support("bf16", old).reason
    assert cuda.precision_support("bf16", CUDA_BOX).supported
    assert cuda.precision_support("fp16", old).needs_grad_scaler


@pytest.mark.parametrize("facts, usable, fixable, words", [
    (CUDA_BOX, True, False, "H200"),
    (LINUX_CPU, False, False, "no NVIDIA driver"),
    (LINUX_CPU.replace(nvidia_driver_present=True), False, True, "CPU-only build"),
    (CUDA_BOX.replace(cuda_available=False, cuda_device_count=0), False, True, "sees no usable GPU"),
    (CUDA_BOX.replace(cuda_available=False, nvidia_driver_present=False), False, False, "no NVIDIA GPU"),
])
def test_cuda_diagnosis(facts, usable, fixable, words):
    availability = cuda.availability(facts)
    assert (availability.usable, availability.fixable) == (usable, fixable)
    assert words in availability.reason


def test_counts_backends_and_env():
    assert cuda.device_count(CUDA_BOX) == 2 and mps.device_count(APPLE_M) == 1 and cpu.device_count(LINUX_CPU) == 1
    assert mps.process_group_backend is None and cuda.process_group_backend == "nccl"
    assert cpu.process_group_backend == "gloo"
    assert mps.env_before_torch() == {"PYTORCH_ENABLE_MPS_FALLBACK": "1"}
    assert mps.env_before_torch(fallback=False, high_watermark=0.0)["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] == "0.0"
    assert cpu.env_before_torch() == {} and not mps.supports_float64
    assert cuda.pin_memory_helps and not mps.pin_memory_helps and not cpu.pin_memory_helps


def test_oom_recognition_per_device():
    assert mps.is_out_of_memory(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB, ...)"))
    assert cuda.is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert cpu.is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: "
                                             "can't allocate memory: you tried to allocate 1000 bytes"))
    assert not cuda.is_out_of_memory(RuntimeError("shape mismatch"))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_contract_every_kind(kind):
    """Every registered kind answers every question without raising, on every faked host."""
    for facts in (LINUX_CPU, APPLE_M, CUDA_BOX):
        availability = kind.availability(facts)
        assert availability.reason
        assert kind.device_count(facts) >= 0
        for dtype in ("fp16", "bf16"):
            support = kind.precision_support(dtype, facts)
            assert support.supported or support.reason
        assert isinstance(kind.env_before_torch(), dict)
        assert isinstance(kind.compile_by_default(facts)[1], str)
    # a kind without float64 says why it casts; a kind with float64 keeps a float64 model as given
    assert bool(kind.float64_cast_reason()) is not kind.supports_float64


def test_cpu_runtime_calls_work_here():
    assert str(cpu.torch_device()) == "cpu"
    assert cpu.memory_stats()["peak_bytes"] > 0


def test_parse_version():
    assert parse_version("2.13.0+cpu") == (2, 13, 0)
    assert parse_version("2.10.0a0+git123") == (2, 10, 0)
    assert parse_version("14.6.1") == (14, 6, 1)
    assert parse_version("") == ()


def test_no_code_outside_devices_names_a_device():
    """STYLE.md practice 1: only devices/ may say 'mps' or 'cuda' in code."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2] / "src" / "braeburn"
    offenders = []
    for path in root.rglob("*.py"):
        if "devices" in path.relative_to(root).parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"""==\s*["'](mps|cuda)["']|["'](mps|cuda)["']\s*==""", code):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert not offenders, offenders
