"""The capability interface every device kind answers. No device is named here."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .host import HostFacts

PRECISIONS = ("no", "fp16", "bf16")


@dataclass(frozen=True)
class Availability:
    """Whether a kind is usable here; if not, why and what to do."""

    usable: bool
    reason: str
    fix: str = ""
    # True when the hardware is there but this setup cannot reach it (Rosetta,
    # an old OS, a torch build without support): the user has something to fix.
    fixable: bool = False
    # True when torch reports the device, yet it cannot work (an allocation failed): "auto" passes over it
    # with a warning that says why, rather than in silence.
    skipped_with_warning: bool = False


@dataclass(frozen=True)
class PrecisionSupport:
    """Whether autocast to ``dtype`` works on a kind for this torch and OS."""

    dtype: str
    supported: bool
    needs_grad_scaler: bool = False
    grad_scaler_supported: bool = True
    reason: str = ""  # when unsupported: what is missing, naming the version needed


@dataclass(frozen=True)
class CompileSupport:
    """What ``compile=True`` meets on a kind: refused (``refusal`` says why and the fix) or warned."""

    refusal: str = ""
    warning: str = ""


@dataclass(frozen=True)
class MemoryReading:
    """:meth:`DeviceKind.memory_stats` read at a logging step, with the distinct batch shapes seen by then."""

    step: int
    stats: Mapping[str, int]
    shapes: int


class DeviceKind(ABC):
    """One kind of device: every fact braeburn knows about it lives in a subclass."""

    name: ClassVar[str]
    hardware: ClassVar[str]  # what a user would call it: "NVIDIA GPUs"
    is_accelerator: ClassVar[bool]
    process_group_backend: ClassVar[str | None]
    pin_memory_helps: ClassVar[bool] = False
    # Convolutions run faster with channels-last (NHWC) weights and activations.
    channels_last_helps: ClassVar[bool] = False
    supports_float64: ClassVar[bool] = True
    # Each new input shape costs this kind a new kernel plan or graph (cuDNN attention plans, MPS graphs), so
    # text is padded to coarse lengths (multiples of 64); elsewhere a new length costs nothing and padding
    # would only add compute, so the collator's lengths stay.
    new_shapes_cost: ClassVar[bool] = False
    fused_adamw: ClassVar[bool] = False  # torch.optim.AdamW(fused=True) runs on this kind
    # torch.profiler's activity that records this kind's kernels (None: the profiler sees host ops only), and
    # the part of a collective kernel's name that tells communication from compute in that trace.
    profiler_activity: ClassVar[str | None] = None
    collective_kernel_marker: ClassVar[str | None] = None
    # Ops this kind lacks run on the CPU with a warning torch gives once per process (TORCH_WARN_ONCE),
    # so counting every op and call needs torch.set_warn_always(True) while recording.
    cpu_fallback_warns_once: ClassVar[bool] = False
    # Substrings of the error text this kind raises when memory runs out.
    oom_markers: ClassVar[tuple[str, ...]] = ()
    # (name, what it does, read only once when libtorch loads)
    environment_variables: ClassVar[tuple[tuple[str, str, bool], ...]] = ()
    # The variable that limits which devices of this kind a process sees (None: no such choice).
    visible_devices_var: ClassVar[str | None] = None

    # -- facts about the host (pure: read only the HostFacts) --------------
    @abstractmethod
    def availability(self, host: HostFacts) -> Availability: ...

    @abstractmethod
    def device_count(self, host: HostFacts) -> int: ...

    @abstractmethod
    def precision_support(self, dtype: str, host: HostFacts) -> PrecisionSupport: ...

    def auto_precision_order(self, host: HostFacts) -> tuple[str, ...]:
        """Mixed-precision dtypes that ``mixed_precision="auto"`` tries, best first."""
        return ("bf16", "fp16")

    def auto_precision_candidates(self, host: HostFacts) -> tuple[str, ...]:
        """Mixed precisions that ``mixed_precision="auto"`` measures against float32 on the user's own model at the
        start of training (braeburn.plan.precision_trial), where no rule knows the fastest; () decides by rule."""
        return ()

    def auto_float32_reason(self, host: HostFacts) -> str:
        """Why ``mixed_precision="auto"`` keeps float32 when :meth:`auto_precision_order` offers nothing usable."""
        return f"since {self.name} has no mixed precision worth using here"

    def shared_timing_caveat(self, host: HostFacts, load_average: float, threads: int) -> str | None:
        """Why this kind's timings may be far off on a machine other jobs keep busy (``load_average``: the system's
        over the last minute; ``threads``: torch's intra-op threads), or None where that does not hold."""
        return None

    def float64_cast_reason(self) -> str | None:
        """Why float64 models and batches become float32 on the way to this kind (one line says so, the first time),
        or None where this kind computes in float64: there a model the user made float64 trains in float64 as given
        (and its batches stay float64), and float64 batches become float32 only for a float32 model
        (braeburn.data.loader.float64_batch_reason). A script then runs on every device."""
        return None if self.supports_float64 else f"{self.name} has no float64"

    def env_before_torch(self, *, fallback: bool = True, high_watermark: float | None = None,
                         low_watermark: float | None = None) -> dict[str, str]:
        """Variables that must be in the environment before torch loads."""
        return {}

    def deterministic_env(self) -> dict[str, str]:
        """Variables this kind's libraries read, once, for bitwise-reproducible results (full_determinism)."""
        return {}

    def compile_by_default(self, host: HostFacts) -> tuple[bool, str]:
        return False, f"torch.compile is off by default on {self.name}"

    def explicit_compile(self, host: HostFacts) -> CompileSupport:
        """What ``compile=True`` (asked for, not "auto") meets here with this torch."""
        return CompileSupport()

    def checkpoint_replays_rng(self, host: HostFacts) -> bool:
        """torch.utils.checkpoint restores this kind's random state before it recomputes a forward, so dropout
        draws the same mask twice (True: nothing for braeburn to do)."""
        return True

    def fused_optimizers_honour_grad_scaler(self, host: HostFacts) -> bool:
        """The fused Adam/AdamW kernels skip an overflow step when GradScaler hands them ``found_inf``."""
        return True

    def env_at_import(self, host_system: str) -> dict[str, str]:
        """Defaults braeburn's import puts in the environment (never over a user's value) when torch has
        not loaded yet, so that a plain ``python train.py`` gets them."""
        return {}

    def env_problems(self, env: Mapping[str, str], host_system: str) -> list[str]:
        """Values in ``env`` that would make torch fail when it loads or first allocates: why and the fix."""
        return []

    def watermark_problems(self, high: float | None, low: float | None) -> list[tuple[str, object, str]]:
        """(option, value, why and fix) for memory-limit ratios torch would refuse on this kind."""
        return []

    def describe(self, host: HostFacts) -> str:
        return self.name

    # -- runtime (these import torch) ---------------------------------------
    def torch_device(self, index: int = 0):
        import torch

        return torch.device(self.name, index)

    def synchronize(self) -> None:
        """Wait for queued work; a host-device sync, so only for timing."""

    def manual_seed(self, seed: int) -> None:
        """Seed this kind's own generators (the CPU one is seeded by torch.manual_seed)."""

    def use_deterministic_libraries(self) -> None:
        """Make this kind's own libraries choose deterministic algorithms (beyond torch's switch)."""

    def libraries_started(self) -> bool:
        """Whether this kind already ran work in this process (then too late for :meth:`deterministic_env`)."""
        return False

    def rng_state(self) -> Any:
        return None

    def set_rng_state(self, state: Any) -> None:
        """Restore what :meth:`rng_state` returned."""

    def empty_cache(self) -> None:
        """Give cached, unused device memory back."""

    def memory_stats(self) -> dict[str, int]:
        """Bytes in use, the peak and the limit, where the kind can tell."""
        return {}

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory window."""

    def memory_drift(self, readings: Sequence[MemoryReading]) -> str | None:
        """What in the memory readings of a run so far (oldest first) points at a problem, and what to do; None
        when nothing does, or the kind cannot tell."""
        return None

    def memory_beyond_comfort(self) -> str | None:
        """Why the memory this process holds now would page (swap) although it fit; None when it is fine.

        Read right after a step, before cached memory is given back (the batch-size search asks it).
        """
        return None

    def is_out_of_memory(self, error: BaseException) -> bool:
        text = str(error)
        return any(marker in text for marker in self.oom_markers)
