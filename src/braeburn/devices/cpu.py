"""The CPU: always there, the fallback of every choice."""

from __future__ import annotations

import resource
import sys
from typing import ClassVar

from .base import Availability, DeviceKind, PrecisionSupport
from .host import HostFacts


class CpuDevice(DeviceKind):
    name: ClassVar[str] = "cpu"
    hardware: ClassVar[str] = "CPUs"
    is_accelerator: ClassVar[bool] = False
    process_group_backend: ClassVar[str | None] = "gloo"
    fused_adamw: ClassVar[bool] = True  # CPU kernel since torch 2.4
    oom_markers: ClassVar[tuple[str, ...]] = ("DefaultCPUAllocator: can't allocate memory",
                                              "DefaultCPUAllocator: not enough memory")
    environment_variables: ClassVar[tuple[tuple[str, str, bool], ...]] = (
        ("OMP_NUM_THREADS", "CPU threads torch uses for one op", True),
    )

    def availability(self, host: HostFacts) -> Availability:
        return Availability(True, f"{host.cpu_count} cores")

    def device_count(self, host: HostFacts) -> int:
        return 1

    def precision_support(self, dtype: str, host: HostFacts) -> PrecisionSupport:
        # torch.autocast("cpu") handles bf16 and fp16; GradScaler("cpu") exists from 2.3.
        return PrecisionSupport(dtype, True, needs_grad_scaler=dtype == "fp16")

    def auto_precision_order(self, host: HostFacts) -> tuple[str, ...]:
        # braeburn does not look at the CPU's instructions (AMX, AVX512-BF16) nor time a trial here, so no rule
        # knows whether bf16 is faster on this CPU; "auto" keeps float32 and bf16 stays one option away.
        return ()

    def auto_float32_reason(self, host: HostFacts) -> str:
        # Only what holds on every CPU: the plan knows nothing of this CPU's instructions (HostFacts has none).
        return ("since auto neither checks this CPU's instructions nor times a mixed-precision trial on a CPU: bf16 "
                "autocast changes the numbers, and whether it is faster than float32 depends on the CPU (AMX or "
                "AVX512-BF16 instructions) and the model")

    def shared_timing_caveat(self, host: HostFacts, load_average: float, threads: int) -> str | None:
        # OpenMP threads spin while they wait for each other; with other jobs holding the cores they wait for, a
        # step or a matmul on 2 threads measured 30 to 130 times slower than on one (a 2-core machine, load 2-3).
        if threads < 2 or load_average < host.cpu_count:
            return None
        return (f"the load average is {load_average:.1f} on {host.cpu_count} cores: other jobs share this CPU, and "
                f"torch's {threads} threads then spend steps waiting for each other, so the CPU's figures below can be "
                "many times too low; OMP_NUM_THREADS=1 before the command times one thread, or run it on an idle "
                "machine")

    def torch_device(self, index: int = 0):
        import torch

        return torch.device("cpu")

    def memory_stats(self) -> dict[str, int]:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is KiB on Linux and bytes on macOS.
        stats = {"peak_bytes": peak if sys.platform == "darwin" else peak * 1024,
                 "peak_is_process_lifetime": 1}  # the process's peak since it started: ru_maxrss cannot be reset
        total = _physical_memory()
        if total:
            stats["total_bytes"] = total  # the CPU device's memory is the machine's
        return stats


def _physical_memory() -> int | None:
    """The machine's physical memory in bytes, where the system says (Linux, macOS)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
