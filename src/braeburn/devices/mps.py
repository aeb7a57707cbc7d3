"""Apple-silicon GPUs through torch's MPS backend.

Facts (see MPS_NOTES.md and docs/devices.md, "Mac: what braeburn does for you"): one device per Mac;
no process-group backend handles MPS tensors; no float64; fp16 autocast from torch 2.5, bf16 from 2.6
on macOS 14+; GradScaler("mps") from torch 2.8; MPS needs macOS 13.0 for torch 2.5-2.8 and 14.0 from
torch 2.9; no x86_64 macOS wheels after torch 2.2.2; the CPU fallback is read when libtorch loads and
the memory watermarks at the first MPS allocation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..plan.option_spelling import option
from .base import Availability, CompileSupport, DeviceKind, MemoryReading, PrecisionSupport
from .versions import version_text

if TYPE_CHECKING:
    from .host import HostFacts

FALLBACK_VAR = "PYTORCH_ENABLE_MPS_FALLBACK"
HIGH_WATERMARK_VAR = "PYTORCH_MPS_HIGH_WATERMARK_RATIO"
LOW_WATERMARK_VAR = "PYTORCH_MPS_LOW_WATERMARK_RATIO"
# torch's defaults on unified memory (MPSAllocator.h); setHighWatermarkRatio refuses a high ratio
# outside [0, 2.0], setLowWatermarkRatio a low one above the high (2.0 when the high is 0: no limit).
DEFAULT_HIGH_WATERMARK = 1.7
DEFAULT_LOW_WATERMARK = 1.4
WATERMARK_UPPER_BOUND = 2.0
# The last torch with macOS x86_64 wheels (pytorch#114602, #137281): an Intel Mac or a Rosetta
# Python cannot `pip install` a newer torch ("Could not find a version that satisfies the requirement").
LAST_X86_64_MAC_TORCH = "2.2.2"
# Inductor has no MPS code generation before torch 2.7 and a prototype in 2.7 (pytorch#125254,
# #150121); wrong results were reported up to 2.12 (#170360, #191976, LayerNorm fixed in 2.13).
MIN_TORCH_COMPILE = (2, 8)
TRUSTED_TORCH_COMPILE = (2, 13)
# Compiled training on MPS measured 4.5-9x slower than eager with torch 2.13 (pytorch#192551, a small conv net:
# Inductor's layout optimisation); no later release is known to have changed that.
SLOWER_COMPILED = ("torch.compile on MPS trained 4.5-9x slower than eager on torch 2.13 (pytorch#192551, a small conv "
                   "net; TORCHINDUCTOR_LAYOUT_OPTIMIZATION=0 is the known workaround): compiling as asked; the Trainer "
                   "times compiled steps against eager ones and trains eagerly again if they are slower, and "
                   "compile=False keeps eager from the start")
# libtorch parses PYTORCH_ENABLE_MPS_FALLBACK with std::stoi while it loads (MPSFallback.mm): a value
# that does not start with a whole number ("true", "yes") throws there and aborts `import torch`.
_STOI_PARSES = re.compile(r"\s*[+-]?\d")
# torch.mps.driver_allocated_memory() includes Metal's cached pools: a healthy fixed-shape run can hold several
# times its live tensors (one report: 11.3 GB against 1.5 GB), so the ratio says nothing. It also grows with
# each new input shape (the MPS graph cache keeps graphs and buffers per shape, pytorch#132596). Drift is the
# driver's memory beyond the tensors rising at each of the last DRIFT_READINGS - 1 logging intervals, by more
# than DRIFT_BYTES in all, while no new batch shape appeared.
DRIFT_READINGS = 4
DRIFT_BYTES = 2**30


def min_macos_for(torch_version: tuple[int, ...]) -> tuple[int, ...]:
    """The oldest macOS whose MPS this torch supports (pytorch#133141, #139425, #162921)."""
    if torch_version >= (2, 9):
        return (14, 0)
    if torch_version >= (2, 5):
        return (13, 0)
    return (12, 3)


def _old_macos(host: HostFacts, need: tuple[int, ...]) -> Availability:
    # torch 2.5-2.8 run MPS on macOS 13; braeburn needs torch 2.6+, so below 13 only a macOS update helps.
    older = (", or install torch<2.9 (torch 2.6-2.8 run MPS on macOS 13)" if host.macos_version >= (13,)
             else " (every torch braeburn supports, 2.6 and newer, needs macOS 13.0 or newer for MPS)")
    return Availability(False, f"macOS {version_text(host.macos_version)} is older than torch "
                        f"{host.torch_version_str} needs for MPS ({version_text(need)})",
                        f"update macOS to {version_text(need)} or newer{older}", fixable=True)


def probe_allocation() -> str | None:
    """Allocate one element on MPS: None when it works, else the error's first line.

    Macs in a virtual machine (macOS runners of CI services) report torch.backends.mps.is_available(), yet
    every allocation fails, e.g. 'MPS backend out of memory (MPS allocated: 0 bytes, other allocations: 0
    bytes, max allowed: 7.93 GB). Tried to allocate 256 bytes on private pool' (actions/runner-images#9918).
    This starts torch's MPS allocator, which reads the watermark variables now.
    """
    import torch

    try:
        torch.zeros(1, device="mps")
    except RuntimeError as error:
        text = str(error).strip()
        return text.splitlines()[0] if text else type(error).__name__
    return None


def _cannot_allocate(host: HostFacts) -> Availability:
    return Availability(False, "torch reports MPS as available, but allocating a one-element tensor on it failed "
                        f"({host.mps_allocation_error}). A Mac in a virtual machine (the macOS runners of CI "
                        "services) behaves so: Metal is visible but has no GPU memory to give, so every MPS "
                        "allocation fails, whatever the model or batch size",
                        f"run on a Mac with direct access to its GPU, or pass {option('cpu')}",
                        skipped_with_warning=True)


def _not_available_reason(host: HostFacts) -> Availability:
    if host.system != "Darwin":
        return Availability(False, f"MPS needs macOS on Apple silicon; this is {host.system}")
    if host.rosetta:
        return Availability(False, "this Python runs under Rosetta (x86_64) on an Apple-silicon Mac, "
                            "so torch cannot see the GPU; PyPI has no x86_64 macOS torch newer than "
                            f"{LAST_X86_64_MAC_TORCH}, so `pip install torch>=2.6` in this Python fails with "
                            "'Could not find a version that satisfies the requirement'",
                            "install an arm64 Python (python.org's universal2 installer, or an arm64 "
                            f"conda/Homebrew) and reinstall torch in it, or pass {option('cpu')}", fixable=True)
    if not host.apple_silicon:
        return Availability(False, f"this Mac has an Intel CPU ({host.machine}); MPS training needs Apple "
                            f"silicon, and torch {LAST_X86_64_MAC_TORCH} was the last release for Intel Macs")
    if not host.mps_built:
        return Availability(False, f"this torch ({host.torch_version_str}) was built without MPS",
                            "reinstall torch from PyPI in an arm64 Python: pip install --force-reinstall torch",
                            fixable=True)
    need = min_macos_for(host.torch_version)
    if host.macos_version and host.macos_version < need:
        return _old_macos(host, need)
    return Availability(False, "torch reports MPS as unavailable on this Apple-silicon Mac "
                        "(torch.backends.mps.is_available() is False)",
                        "update macOS and torch; run `python -c \"import torch; "
                        "torch.zeros(1, device='mps')\"` to see torch's own error", fixable=True)


def _watermark_problems(high: float | None, low: float | None) -> list[tuple[str, object, str]]:
    """torch's setHighWatermarkRatio / setLowWatermarkRatio rules, checked before torch sees them."""
    problems = []
    if high is not None and high > WATERMARK_UPPER_BOUND:
        problems.append(("mps_high_watermark_ratio", high, f"torch accepts 0.0 to {WATERMARK_UPPER_BOUND} "
                         "(a share of the recommended working set; 0.0 lifts the limit) and stops at the first "
                         f"MPS allocation with 'invalid high watermark ratio'. Pass {WATERMARK_UPPER_BOUND} or less, "
                         "or 0.0 for no limit"))
        return problems
    if low is None:
        return problems
    if high is None:
        ceiling, because = DEFAULT_HIGH_WATERMARK, f"torch's default high ratio ({DEFAULT_HIGH_WATERMARK})"
    elif high == 0:
        ceiling, because = WATERMARK_UPPER_BOUND, f"{WATERMARK_UPPER_BOUND} when the high ratio is 0.0 (no limit)"
    else:
        ceiling, because = high, f"mps_high_watermark_ratio ({high})"
    if low > ceiling:
        problems.append(("mps_low_watermark_ratio", low, f"must not exceed {because}; torch refuses to start the "
                         f"MPS allocator otherwise ('invalid low watermark ratio'). Pass {ceiling} or less"
                         + ("" if high is not None else ", or raise mps_high_watermark_ratio with it")))
    return problems


def _exported_ratio(env: Mapping[str, str], name: str, default: float) -> tuple[float, str]:
    """(the ratio torch's allocator will use, how to show it); ValueError when it is not a number."""
    raw = env.get(name)
    if raw is None:
        return default, f"unset (torch's default {default})"
    try:
        return float(raw), raw
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number: torch reads it with strtod, which takes it as 0.0 "
                         "(for the high ratio: no memory limit at all). Export a number, e.g. "
                         f"{HIGH_WATERMARK_VAR}=1.0 {LOW_WATERMARK_VAR}=0.8, or unset it") from None


def watermark_env_problem(env: Mapping[str, str]) -> str | None:
    """The effective watermark pair in ``env`` checked by torch's rules (MPSAllocator.mm: the high ratio in
    [0, 2.0]; the low one from 0 to the high one, or to 2.0 when the high is 0.0). The low ratio's default
    is a fixed 1.4 on unified memory, not a share of the high one, so exporting a high ratio below 1.4
    alone stops torch at the first MPS allocation."""
    if HIGH_WATERMARK_VAR not in env and LOW_WATERMARK_VAR not in env:
        return None
    try:
        high, high_shown = _exported_ratio(env, HIGH_WATERMARK_VAR, DEFAULT_HIGH_WATERMARK)
        low, low_shown = _exported_ratio(env, LOW_WATERMARK_VAR, DEFAULT_LOW_WATERMARK)
    except ValueError as error:
        return str(error)
    pair = f"{HIGH_WATERMARK_VAR}={high_shown} and {LOW_WATERMARK_VAR}={low_shown}"
    if not 0 <= high <= WATERMARK_UPPER_BOUND:
        return (f"{pair}: torch accepts a high ratio from 0.0 (no limit) to {WATERMARK_UPPER_BOUND} and stops at "
                f"the first MPS allocation with 'invalid high watermark ratio {high}'. Export "
                f"{HIGH_WATERMARK_VAR}={WATERMARK_UPPER_BOUND} or less, or unset it")
    ceiling = high if high > 0 else WATERMARK_UPPER_BOUND
    if 0 <= low <= ceiling:
        return None
    fit = round(high * DEFAULT_LOW_WATERMARK / DEFAULT_HIGH_WATERMARK, 3) if high > 0 else DEFAULT_LOW_WATERMARK
    return (f"{pair}: torch needs the low ratio from 0.0 to the high one (to {WATERMARK_UPPER_BOUND} when the high "
            f"is 0.0) and stops at the first MPS allocation with 'invalid low watermark ratio {low}'. Export "
            f"{LOW_WATERMARK_VAR}={fit} as well (torch's proportion {DEFAULT_LOW_WATERMARK}/{DEFAULT_HIGH_WATERMARK}"
            f" of the high ratio), or unset {HIGH_WATERMARK_VAR}, or pass --mps-high-watermark-ratio {high} to "
            "`braeburn launch`, which sets the low ratio with it")


class MpsDevice(DeviceKind):
    name: ClassVar[str] = "mps"
    hardware: ClassVar[str] = "Apple-silicon GPUs"
    is_accelerator: ClassVar[bool] = True
    process_group_backend: ClassVar[str | None] = None  # neither gloo nor nccl takes MPS tensors
    supports_float64: ClassVar[bool] = False
    new_shapes_cost: ClassVar[bool] = True  # the MPS graph cache compiles and keeps one graph per shape (#132596)
    fused_adamw: ClassVar[bool] = True  # MPS kernel since torch 2.5
    cpu_fallback_warns_once: ClassVar[bool] = True  # MPSFallback.mm: TORCH_WARN_ONCE, one call site for all ops
    # MPSAllocator.mm: the watermark limit, and before it Metal's per-buffer limit (pytorch#141909).
    oom_markers: ClassVar[tuple[str, ...]] = ("MPS backend out of memory", "Invalid buffer size: ")
    environment_variables: ClassVar[tuple[tuple[str, str, bool], ...]] = (
        (FALLBACK_VAR, "run ops MPS lacks on the CPU instead of failing", True),
        (HIGH_WATERMARK_VAR, "MPS memory limit as a share of recommended memory (0.0: none)", True),
        (LOW_WATERMARK_VAR, "MPS memory level at which cached memory is given back", True),
        # PyTorch's "MPS Environment Variables" page; each is read once per process, at its first use.
        ("PYTORCH_MPS_PREFER_METAL", "1: Metal kernels instead of MPS Graph (for now only matmul)", True),
        ("PYTORCH_MPS_FAST_MATH", "1: fast math in MPS Metal kernels (faster, less exact)", True),
        ("PYTORCH_MPS_LOG_PROFILE_INFO", "MPS profiler log bitmask (LogOptions in MPSProfiler.h; logs CPU fallbacks)",
         True),
    )

    def availability(self, host: HostFacts) -> Availability:
        if host.mps_available and host.mps_allocation_error:
            return _cannot_allocate(host)
        if host.mps_available:
            return Availability(True, f"Apple-silicon GPU, macOS {version_text(host.macos_version)}")
        return _not_available_reason(host)

    def device_count(self, host: HostFacts) -> int:
        return 1 if host.mps_available and not host.mps_allocation_error else 0

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

    def auto_precision_order(self, host: HostFacts) -> tuple[str, ...]:
        # No rule picks a mixed precision on MPS: bf16 is emulated on M1/M2 (Transformers PR #40458, "no
        # performance benefit") and was measured slower than float32 on an M4 too (nanochat #685); fp16 needs
        # GradScaler("mps"). The Trainer measures the candidates below instead; until it has, float32.
        return ()

    def auto_precision_candidates(self, host: HostFacts) -> tuple[str, ...]:
        return ("bf16", "fp16")

    def auto_float32_reason(self, host: HostFacts) -> str:
        return ("since no measurement backs a faster mixed precision on Apple silicon: bf16 is emulated on M1/M2 "
                "and was measured slower than float32 on newer chips too. Pass mixed_precision='bf16' (macOS 14+) "
                "or 'fp16' to try one, and compare the step times")

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

    def explicit_compile(self, host: HostFacts) -> CompileSupport:
        tv = host.torch_version_str
        if host.torch_version < MIN_TORCH_COMPILE:
            return CompileSupport(refusal=f"torch {tv} cannot compile for MPS (Inductor has no MPS code generation "
                                  "before torch 2.7 and only a prototype in 2.7): the first step fails with "
                                  "BackendCompilerFailed. Pass compile=False (eager), or upgrade to torch 2.13 or newer")
        if host.torch_version < TRUSTED_TORCH_COMPILE:
            return CompileSupport(warning=f"torch.compile on MPS with torch {tv} can give wrong results "
                                  "(pytorch#170360, #191976, fixed in 2.13); run `braeburn check script.py` to "
                                  "compare a few steps with the CPU, or upgrade to torch 2.13 or newer")
        return CompileSupport(warning=SLOWER_COMPILED)

    def checkpoint_replays_rng(self, host: HostFacts) -> bool:
        # torch/utils/checkpoint.py stashes a device's RNG state only when its module has `_initialized`
        # (both the reentrant and the non-reentrant path); torch.mps has none in 2.6-2.13, so the recomputed
        # forward draws a new dropout mask and the gradients are silently wrong (upstream fix pytorch#194478,
        # open). No torch version is trusted yet.
        return False

    def fused_optimizers_honour_grad_scaler(self, host: HostFacts) -> bool:
        # FusedAdamWKernelImpl.mm / FusedAdamKernelImpl.mm take grad_scale and found_inf and ignore both,
        # and GradScaler.step leaves the overflow skip to a fused optimizer, so an fp16 overflow step
        # would be applied. Fixed by pytorch PR #186360; the release it landed in is not verified, so no
        # torch version is trusted yet.
        return False

    def env_at_import(self, host_system: str) -> dict[str, str]:
        return {FALLBACK_VAR: "1"} if host_system == "Darwin" else {}

    def env_problems(self, env: Mapping[str, str], host_system: str) -> list[str]:
        if host_system != "Darwin":
            return []
        value, problems = env.get(FALLBACK_VAR), []
        if value is not None and not _STOI_PARSES.match(value):
            problems.append(f"{FALLBACK_VAR}={value!r} is not a whole number: libtorch reads it with std::stoi when "
                            "it loads and throws, so `import torch` aborts. Use 1 (ops MPS lacks run on the CPU) or "
                            "0 (they fail)")
        watermarks = watermark_env_problem(env)
        return problems + ([watermarks] if watermarks else [])

    def watermark_problems(self, high: float | None, low: float | None) -> list[tuple[str, object, str]]:
        return _watermark_problems(high, low)

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
        """In use now, the recommended working set and the out-of-memory limit; torch.mps has no peak counter."""
        import torch

        stats = {"allocated_bytes": torch.mps.current_allocated_memory(),
                 "driver_bytes": torch.mps.driver_allocated_memory()}
        if hasattr(torch.mps, "recommended_max_memory"):
            recommended = torch.mps.recommended_max_memory()
            stats["recommended_bytes"] = recommended
            ratio = high_watermark_in_effect(os.environ)
            if ratio > 0:  # 0.0: no limit at all
                stats["limit_bytes"] = int(ratio * recommended)
        return stats

    def memory_drift(self, readings: Sequence[MemoryReading]) -> str | None:
        growth = _growth_at_fixed_shapes(readings)
        if growth is not None:
            first, last = growth
            grown, stats = _beyond_tensors(last) - _beyond_tensors(first), last.stats
            return (f"the MPS driver's memory beyond live tensors grew at each of the last {DRIFT_READINGS - 1} logs "
                    f"(steps {first.step}-{last.step}), by {grown / 2**30:.1f} GiB, to {_gib(stats['driver_bytes'])} "
                    f"against {_gib(stats['allocated_bytes'])} of tensors, while no new batch shape appeared: memory "
                    "is kept per step, and past the recommended working set macOS pages and steps slow down many "
                    "times over. torch.mps.empty_cache() gives cached buffers back; if the growth survives it, look "
                    "for tensors or graphs kept from each step")
        return _beyond_working_set(readings)

    def memory_beyond_comfort(self) -> str | None:
        # Past the recommended working set (~75% of RAM) macOS starts to page, although torch's limit
        # (1.7 x that by default) lets the allocation succeed. Cached buffers still count here: read
        # right after a step, the driver's figure is the step's high-water mark.
        import torch

        if not hasattr(torch.mps, "recommended_max_memory"):
            return None
        held, recommended = torch.mps.driver_allocated_memory(), torch.mps.recommended_max_memory()
        if held <= recommended:
            return None
        return (f"the step held {held / 2**30:.1f} GiB of MPS memory, above the recommended working set "
                f"({recommended / 2**30:.1f} GiB), so macOS would page")


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def _beyond_tensors(reading: MemoryReading) -> int:
    return reading.stats["driver_bytes"] - reading.stats["allocated_bytes"]


def _growth_at_fixed_shapes(readings: Sequence[MemoryReading]) -> tuple[MemoryReading, MemoryReading] | None:
    """(first, last) of the last DRIFT_READINGS readings when they show drift; None otherwise."""
    recent = list(readings)[-DRIFT_READINGS:]
    if len(recent) < DRIFT_READINGS or any(not {"driver_bytes", "allocated_bytes"} <= set(r.stats) for r in recent):
        return None
    if len({r.shapes for r in recent}) > 1:  # a new shape keeps its own graph and buffers: growth is expected
        return None
    beyond = [_beyond_tensors(r) for r in recent]
    if all(b > a for a, b in zip(beyond, beyond[1:])) and beyond[-1] - beyond[0] > DRIFT_BYTES:
        return recent[0], recent[-1]
    return None


def _beyond_working_set(readings: Sequence[MemoryReading]) -> str | None:
    """The driver holds more than the recommended working set: macOS pages, whatever the shapes."""
    if not readings:
        return None
    last = list(readings)[-1]
    held, recommended = last.stats.get("driver_bytes"), last.stats.get("recommended_bytes")
    if held is None or not recommended or held <= recommended:
        return None
    shapes = (f"; {last.shapes} distinct batch shapes so far, and each keeps its own MPS graph and buffers "
              "(pytorch#132596): keep them few (leave pad_to_buckets on for text, pad or crop images to one size, "
              "drop_last=True)" if last.shapes > 1 else "")
    return (f"the MPS driver holds {_gib(held)}, above the recommended working set ({_gib(recommended)}), so macOS "
            f"pages and steps slow down many times over{shapes}. A smaller batch, or torch.mps.empty_cache() "
            "between phases, brings it back under")


def high_watermark_in_effect(environ: Mapping[str, str]) -> float:
    """The high watermark ratio torch's allocator uses (read at the first MPS allocation)."""
    try:
        return float(environ.get(HIGH_WATERMARK_VAR, DEFAULT_HIGH_WATERMARK))
    except ValueError:
        return DEFAULT_HIGH_WATERMARK
