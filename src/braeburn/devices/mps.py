"""Apple-silicon GPUs through torch's MPS backend.

Facts (see MPS_NOTES.md): one device per Mac; no process-group backend handles
MPS tensors; no float64; fp16 autocast from torch 2.5, bf16 from 2.6 on macOS 14+;
GradScaler("mps") from torch 2.8; torch 2.9+ needs macOS 14; the CPU fallback and
the memory watermarks are read only when libtorch loads.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .base import Availability, DeviceKind, PrecisionSupport
from .host import HostFacts, version_text

FALLBACK_VAR = "PYTORCH_ENABLE_MPS_FALLBACK"
HIGH_WATERMARK_VAR = "PYTORCH_MPS_HIGH_WATERMARK_RATIO"
LOW_WATERMARK_VAR = "PYTORCH_MPS_LOW_WATERMARK_RATIO"
# torch's defaults on unified memory; the allocator refuses to start when low > high.
DEFAULT_HIGH_WATERMARK = 1.7
DEFAULT_LOW_WATERMARK = 1.4


def min_macos_for(torch_version: tuple[int, ...]) -> tuple[int, ...]:
    return (14, 0) if torch_version >= (2, 9) else (12, 3)


def _not_available_reason(host: HostFacts) -> Availability:
    if host.system != "Darwin":
        return Availability(False, f"MPS needs macOS on Apple silicon; this is {host.system}")
    if host.rosetta:
        return Availability(False, "this Python runs under Rosetta (x86_64) on an Apple-silicon Mac, "
                            "so torch cannot see the GPU",
                            "install an arm64 Python (python.org's universal2 installer, or an arm64 "
                            "conda/Homebrew) and reinstall torch in it, or pass --cpu", fixable=True)
    if not host.apple_silicon:
        return Availability(False, f"this Mac has an Intel CPU ({host.machine}); MPS training needs Apple silicon")
    if not host.mps_built:
        return Availability(False, f"this torch ({host.torch_version_str}) was built without MPS",
                            "reinstall torch from PyPI in an arm64 Python: pip install --force-reinstall torch",
                            fixable=True)
    need = min_macos_for(host.torch_version)
    if host.macos_version and host.macos_version < need:
        return Availability(False, f"macOS {version_text(host.macos_version)} is older than torch "
                            f"{host.torch_version_str} needs for MPS ({version_text(need)})",
                            f"update macOS to {version_text(need)} or newer, or install torch<2.9",
                            fixable=True)
    return Availability(False, "torch reports MPS as unavailable on this Apple-silicon Mac "
                        "(torch.backends.mps.is_available() is False)",
                        "update macOS and torch; run `python -c \"import torch; "
                        "torch.zeros(1, device='mps')\"` to see torch's own error", fixable=True)


class MpsDevice(DeviceKind):
    name: ClassVar[str] = "mps"
    is_accelerator: ClassVar[bool] = True
    process_group_backend: ClassVar[str | None] = None  # neither gloo nor nccl takes MPS tensors
    supports_float64: ClassVar[bool] = False
    fused_adamw: ClassVar[bool] = True  # MPS kernel since torch 2.5
    oom_markers: ClassVar[tuple[str, ...]] = ("MPS backend out of memory",)
    environment_variables: ClassVar[tuple[tuple[str, str, bool], ...]] = (
        (FALLBACK_VAR, "run ops MPS lacks on the CPU instead of failing", True),
        (HIGH_WATERMARK_VAR, "MPS memory limit as a share of recommended memory (0.0: none)", True),
        (LOW_WATERMARK_VAR, "MPS memory level at which cached memory is given back", True),
    )

    def availability(self, host: HostFacts) -> Availability:
        if host.mps_available:
            return Availability(True, f"Apple-silicon GPU, macOS {version_text(host.macos_version)}")
        return _not_available_reason(host)

    def device_count(self, host: HostFacts) -> int:
        return 1 if host.mps_available else 0

    def precision_support(self, dtype: str, host: HostFacts) -> PrecisionSupport:
        tv, scaler = host.torch_version, host.torch_version >= (2, 8)
        if dtype == "fp16":
            if tv < (2, 5):
                return PrecisionSupport("fp16", False, reason="fp16 autocast on MPS needs torch 2.5 or newer; "
                                        f"this is {host.torch_version_str}")
            return PrecisionSupport("fp16", True, needs_grad_scaler=True, grad_scaler_supported=scaler,
                                    reason="" if scaler else "fp16 training needs a grad scaler, and "
                                    f"GradScaler('mps') needs torch 2.8 or newer; this is {host.torch_version_str}")
        if tv < (2, 6):
            return PrecisionSupport("bf16", False, reason="bf16 autocast on MPS needs torch 2.6 or newer; "
                                    f"this is {host.torch_version_str}")
        if host.macos_version and host.macos_version < (14,):
            return PrecisionSupport("bf16", False, reason="bf16 on MPS needs macOS 14 or newer; this is "
                                    f"macOS {version_text(host.macos_version)}")
        return PrecisionSupport("bf16", True)

    def env_before_torch(self, *, fallback: bool = True, high_watermark: float | None = None,
                         low_watermark: float | None = None) -> dict[str, str]:
        env = {FALLBACK_VAR: "1" if fallback else "0"}
        if high_watermark is not None and low_watermark is None and 0 < high_watermark < DEFAULT_LOW_WATERMARK:
            # A lower limit alone would sit under torch's default low ratio (1.4) and stop the
            # allocator; keep torch's proportion between the two instead.
            low_watermark = round(high_watermark * DEFAULT_LOW_WATERMARK / DEFAULT_HIGH_WATERMARK, 3)
        if high_watermark is not None:
            env[HIGH_WATERMARK_VAR] = repr(float(high_watermark))
        if low_watermark is not None:
            env[LOW_WATERMARK_VAR] = repr(float(low_watermark))
        return env

    def compile_by_default(self, host: HostFacts) -> tuple[bool, str]:
        return False, "torch.compile on MPS is a prototype with known backward bugs; eager is the safe default"

    def describe(self, host: HostFacts) -> str:
        return "Apple-silicon GPU (mps)"

    def torch_device(self, index: int = 0):
        import torch

        return torch.device("mps")

    def synchronize(self) -> None:
        import torch

        torch.mps.synchronize()

    def manual_seed(self, seed: int) -> None:
        import torch

        torch.mps.manual_seed(seed)

    def rng_state(self) -> Any:
        import torch

        return torch.mps.get_rng_state()

    def set_rng_state(self, state: Any) -> None:
        import torch

        if state is not None:
            torch.mps.set_rng_state(state)

    def empty_cache(self) -> None:
        import torch

        torch.mps.empty_cache()

    def memory_stats(self) -> dict[str, int]:
        import torch

        stats = {"allocated_bytes": torch.mps.current_allocated_memory(),
                 "driver_bytes": torch.mps.driver_allocated_memory()}
        if hasattr(torch.mps, "recommended_max_memory"):
            stats["total_bytes"] = torch.mps.recommended_max_memory()
        return stats
