"""The batch-size finder: OOM recognition per device, growth and halving, real runs on the CPU."""

from __future__ import annotations

import pytest
import torch

from braeburn.data.batch_size import BatchSizeError, find_batch_size, is_out_of_memory
from braeburn.devices.registry import get_kind

# The texts PyTorch raises when memory runs out, per device.
CUDA_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which "
            "1.06 GiB is free. Of the allocated memory 75.21 GiB is allocated by PyTorch")
MPS_OOM = ("MPS backend out of memory (MPS allocated: 17.50 GB, other allocations: 1.20 GB, max allowed: 18.13 GB). "
           "Tried to allocate 1.00 GB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper "
           "limit for memory allocations (may cause system failure).")
CPU_OOM = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
           "allocate 1152921504606846976 bytes. Error code 12 (Cannot allocate memory)")


@pytest.mark.parametrize("text, kind_name", [(CUDA_OOM, "cuda"), (MPS_OOM, "mps"), (CPU_OOM, "cpu")])
def test_each_device_out_of_memory_text_is_recognised(text, kind_name):
    error = RuntimeError(text)
    assert is_out_of_memory(error)
    assert is_out_of_memory(error, get_kind(kind_name))
    assert get_kind(kind_name).is_out_of_memory(error)


def test_memory_error_and_torch_oom_type_are_recognised():
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(torch.OutOfMemoryError("out of memory"))


@pytest.mark.parametrize("text", ["mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)",
                                  "The operator 'aten::foo' is not currently implemented for the MPS device"])
def test_other_errors_are_not_out_of_memory(text):
    assert not is_out_of_memory(RuntimeError(text))


def _fake_step(limit: int, text: str, tries: list[int]):
    def step(batch: int) -> None:
        tries.append(batch)
        if batch > limit:
            raise RuntimeError(text)
    return step


@pytest.mark.slow  # trains text models at growing batch sizes (10-13 s each)
@pytest.mark.parametrize("text", [CUDA_OOM, MPS_OOM, CPU_OOM])
def test_grows_until_out_of_memory_then_keeps_the_last_fit(text):
    tries: list[int] = []
    assert find_batch_size(_fake_step(100, text, tries), start=8, max_batch=4096) == 64
    assert tries == [8, 16, 32, 64, 128]


def test_halves_when_the_start_does_not_fit_and_does_not_retry_a_known_failure():
    tries: list[int] = []
    assert find_batch_size(_fake_step(20, MPS_OOM, tries), start=128) == 16
    assert tries == [128, 64, 32, 16]


def test_stops_at_max_batch_even_off_the_power_of_two_ladder():
    tries: list[int] = []
    assert find_batch_size(_fake_step(10_000, CUDA_OOM, tries), start=8, max_batch=100) == 100
    assert tries == [8, 16, 32, 64, 100]


def test_even_batch_one_out_of_memory_raises_with_the_fix():
    with pytest.raises(BatchSizeError, match="even a batch of 1.*mixed precision"):
        find_batch_size(_fake_step(0, CUDA_OOM, []), start=4)


def test_other_errors_propagate_unchanged():
    def step(batch: int) -> None:
        raise ValueError("my data loader broke")

    with pytest.raises(ValueError, match="my data loader broke"):
        find_batch_size(step, start=8)


@pytest.mark.parametrize("kwargs, words", [({"start": 0}, "start=0"), ({"max_batch": 4, "start": 8}, "max_batch is below"),
                                           ({"start": 2.5}, "whole number")])
def test_bad_arguments_say_what_was_passed(kwargs, words):
    with pytest.raises(ValueError, match=words):
        find_batch_size(lambda b: None, **kwargs)


def test_frees_memory_between_tries_through_the_device_kind():
    class CountingCpu(type(get_kind("cpu"))):
        emptied = 0

        def empty_cache(self) -> None:
            CountingCpu.emptied += 1

    reports: list[tuple[int, bool]] = []
    best = find_batch_size(_fake_step(40, CPU_OOM, []), start=10, device_kind=CountingCpu(),
                           on_try=lambda b, ok: reports.append((b, ok)))
    assert best == 40 and CountingCpu.emptied == 4
    assert reports == [(10, True), (20, True), (40, True), (80, False)]


@pytest.mark.slow  # real training steps at each batch size tried (16 s on a loaded machine)
def test_real_training_steps_on_the_cpu():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen: list[int] = []

    def step(batch: int) -> None:
        x = torch.randn(batch, 16)
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seen.append(batch)
        if batch > 32:  # past here the step needs 2**60 bytes: the real CPU allocator refuses
            torch.empty(2**60, dtype=torch.uint8)

    assert find_batch_size(step, start=4, max_batch=1024, device_kind=get_kind("cpu")) == 32
    assert seen == [4, 8, 16, 32, 64]
