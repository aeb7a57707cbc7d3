"""NVIDIA GPUs through torch's CUDA backend."""

from __future__ import annotations

from typing import Any, ClassVar

from .base import Availability, DeviceKind, PrecisionSupport
from .host import HostFacts

CUDA_WHEEL_HINT = "pip install torch --index-url https://download.pytorch.org/whl/cu128"


class CudaDevice(DeviceKind):
    name: ClassVar[str] = "cuda"
    hardware: ClassVar[str] = "NVIDIA GPUs"
    is_accelerator: ClassVar[bool] = True
    process_group_backend: ClassVar[str | None] = "nccl"
    pin_memory_helps: ClassVar[bool] = True
    channels_last_helps: ClassVar[bool] = True  # tensor-core convolutions in cuDNN are NHWC-native
    # MRPC on an H100: attention's first call at a new length took 0.2-2.4 s; 5 shapes cost more
    # than padding 64..103 tokens to 128 saves at batch 32.
    new_shapes_cost: ClassVar[bool] = True
    profiler_activity: ClassVar[str | None] = "CUDA"
    collective_kernel_marker: ClassVar[str | None] = "nccl"  # ncclDevKernel_AllReduce_..., ncclKernel_...
    fused_adamw: ClassVar[bool] = True
    visible_devices_var: ClassVar[str | None] = "CUDA_VISIBLE_DEVICES"
    oom_markers: ClassVar[tuple[str, ...]] = ("CUDA out of memory", "CUDA error: out of memory",
                                              "CUBLAS_STATUS_ALLOC_FAILED")
    environment_variables: ClassVar[tuple[tuple[str, str, bool], ...]] = (
        ("CUDA_VISIBLE_DEVICES", "which GPUs this process may see", True),
    )

    def availability(self, host: HostFacts) -> Availability:
        if host.cuda_available and host.cuda_device_count > 0:
            return Availability(True, ", ".join(host.cuda_names) or "CUDA GPU")
        if host.torch_cuda_version is None:
            if host.nvidia_driver_present:
                return Availability(False, f"this torch ({host.torch_version_str}) is a CPU-only build, "
                                    "but an NVIDIA driver is loaded", f"install a CUDA build: {CUDA_WHEEL_HINT}",
                                    fixable=True)
            return Availability(False, f"this torch ({host.torch_version_str}) is built without CUDA "
                                "and no NVIDIA driver was found")
        if host.nvidia_driver_present:
            return Availability(False, f"torch {host.torch_version_str} (CUDA {host.torch_cuda_version}) "
                                "sees no usable GPU although an NVIDIA driver is loaded",
                                "check CUDA_VISIBLE_DEVICES and that the driver supports CUDA "
                                f"{host.torch_cuda_version} (nvidia-smi)", fixable=True)
        return Availability(False, "no NVIDIA GPU or driver was found")

    def device_count(self, host: HostFacts) -> int:
        return host.cuda_device_count if host.cuda_available else 0

    def precision_support(self, dtype: str, host: HostFacts) -> PrecisionSupport:
        if dtype == "fp16":
            return PrecisionSupport("fp16", True, needs_grad_scaler=True)
        caps = host.cuda_capabilities or ((0, 0),)
        lowest = min(caps)
        if lowest >= (8, 0):
            return PrecisionSupport("bf16", True)
        return PrecisionSupport("bf16", False, reason=f"bf16 needs an NVIDIA GPU of compute capability 8.0 "
                                f"(Ampere) or newer; this one is {lowest[0]}.{lowest[1]}; use fp16")

    def deterministic_env(self) -> dict[str, str]:
        # cuBLAS picks a reduction split per call from its workspace; a fixed small workspace makes the
        # choice, and so the result, the same on every run. Read when cuBLAS first runs in a process.
        return {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}

    def compile_by_default(self, host: HostFacts) -> tuple[bool, str]:
        return True, ("auto: compiled where the run earns it back: the Trainer times its first eager steps and "
                      "compiles when the time it expects to save (from the model's family, or an earlier compile "
                      "here) pays the compile back (CNNs stay eager); a loop of your own compiles with compile=True")

    def describe(self, host: HostFacts) -> str:
        return ", ".join(host.cuda_names) or "cuda"

    def torch_device(self, index: int = 0):
        import torch

        return torch.device("cuda", index)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def manual_seed(self, seed: int) -> None:
        import torch

        torch.cuda.manual_seed_all(seed)

    def use_deterministic_libraries(self) -> None:
        import torch

        torch.backends.cudnn.deterministic = True  # no atomics-based convolution algorithms
        torch.backends.cudnn.benchmark = False  # no timing-based choice that can differ between runs

    def libraries_started(self) -> bool:
        import torch

        # GPU memory held (a tensor, or cuBLAS's workspace) means GPU work ran; reading the host facts
        # starts CUDA but allocates nothing, so a parsed config does not count as too late.
        return torch.cuda.is_initialized() and torch.cuda.memory_reserved() > 0

    def rng_state(self) -> Any:
        import torch

        return torch.cuda.get_rng_state_all()

    def set_rng_state(self, state: Any) -> None:
        import torch

        if state is not None:
            torch.cuda.set_rng_state_all(state)

    def empty_cache(self) -> None:
        import torch

        torch.cuda.empty_cache()

    def memory_stats(self) -> dict[str, int]:
        import torch

        free, total = torch.cuda.mem_get_info()
        return {"allocated_bytes": torch.cuda.memory_allocated(),
                "peak_bytes": torch.cuda.max_memory_allocated(),
                "total_bytes": total, "free_bytes": free}

    def reset_peak_memory(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats()
