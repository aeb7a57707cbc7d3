"""Every option rule in one pure function: options + host facts -> a Plan, or every error at once.

No I/O happens here: the caller reads the environment and the host facts and passes them in,
so the whole rule table is tested on any machine with faked facts (tests/plan/test_rules.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .option_spelling import advice, chosen, given, option
from ..devices.base import PRECISIONS, DeviceKind
from ..devices.host import HostFacts
from ..devices.registry import ACCELERATOR_CHOICES, GPU_ALIAS, KINDS, accelerator_kinds, fallback_kind, get_kind

STRATEGIES = ("auto", "ddp", "fsdp")
COMPILE_CHOICES = ("auto", True, False, "regional")


@dataclass(frozen=True)
class RunOptions:
    """What the user asked for, from flags, environment, a config file or code."""

    accelerator: str = "auto"
    devices: int | str = "auto"
    cpu: bool = False
    env_device: str | None = None  # the value of BRAEBURN_DEVICE, read by the caller
    # Why BRAEBURN_DEVICE holds its value when a launcher set it (what the user asked of the launcher), read by
    # the caller; None when the user set BRAEBURN_DEVICE, which is then the reason.
    env_device_reason: str | None = None
    mixed_precision: str = "auto"
    num_processes: int = 1  # the world size
    strategy: str = "auto"
    compile: str | bool = "auto"
    mps_fallback: bool = True
    mps_high_watermark_ratio: float | None = None
    mps_low_watermark_ratio: float | None = None


@dataclass(frozen=True)
class OptionError:
    option: str
    value: object
    message: str  # why it cannot work, and the fix

    def __str__(self) -> str:
        if not self.option:  # a problem of the environment, not of one option: the message names it
            return self.message
        return f"{given(self.option, self.value)}: {self.message}"  # a huge value is shown cut short


class PlanError(ValueError):
    """One or more options cannot work here; ``errors`` lists them all."""

    def __init__(self, errors: list[OptionError]):
        self.errors = list(errors)
        lines = "\n".join(f"  - {error}" for error in self.errors)
        noun = "option" if len(self.errors) == 1 else "options"
        super().__init__(f"{len(self.errors)} {noun} cannot work on this machine:\n{lines}")


@dataclass(frozen=True)
class Plan:
    device: DeviceKind
    device_reason: str
    devices: int
    num_processes: int
    strategy: str  # "single", "ddp" or "fsdp"
    backend: str | None
    precision: str  # "no", "fp16" or "bf16"
    grad_scaler: bool
    precision_reason: str
    compile: bool
    compile_reason: str
    compile_auto: bool = False  # compile was left at "auto": the Accelerator may still skip it per model
    compile_regional: bool = False  # compile="regional": the repeated blocks and the loss, not the whole forward
    env: dict[str, str] = field(default_factory=dict)  # to set before torch loads
    notes: tuple[str, ...] = ()  # warnings the user should see (the Accelerator prints them once)
    # Options given that do nothing on the chosen device: (option, the hardware where it applies), for the
    # launcher to say so in one line each.
    ignored_options: tuple[tuple[str, str], ...] = ()
    # mixed_precision="auto" where the device kind has no rule: float32 until the Trainer measures these
    # against it on the user's own model (braeburn.plan.precision_trial); () when the precision is decided.
    precision_candidates: tuple[str, ...] = ()


def _requested_accelerator(options: RunOptions) -> tuple[str, str, object]:
    """(the request, the option that made it, its value): --cpu wins, then BRAEBURN_DEVICE."""
    if options.cpu:
        return "cpu", "cpu", True
    if options.env_device:
        return options.env_device.strip().lower(), "BRAEBURN_DEVICE", options.env_device
    return str(options.accelerator).lower(), "accelerator", options.accelerator


def _request_words(options: RunOptions, option: str, value: object) -> str:
    """The request as the user made it: a launcher's reason stands in for the BRAEBURN_DEVICE it set."""
    if option == "BRAEBURN_DEVICE" and options.env_device_reason:
        return options.env_device_reason
    return f"{option}={value!r}"


def _choose_device(options: RunOptions, host: HostFacts, errors: list[OptionError],
                   notes: list[str]) -> tuple[DeviceKind, str]:
    request, option, value = _requested_accelerator(options)
    if request not in ACCELERATOR_CHOICES:
        errors.append(OptionError(option, value, f"unknown accelerator; choose one of {', '.join(ACCELERATOR_CHOICES)}"))
        return fallback_kind(), "fallback after an unknown accelerator"
    if request == "auto":
        for kind in KINDS:
            availability = kind.availability(host)
            if availability.usable:
                return kind, f"auto: the best usable device here ({kind.describe(host)})"
            if availability.skipped_with_warning:
                notes.append(f"{kind.name} skipped: {availability.reason}. Training on the next usable device; "
                             f"{availability.fix}")
    candidates = accelerator_kinds() if request == GPU_ALIAS else (get_kind(request),)
    for kind in candidates:
        if kind.availability(host).usable:
            return kind, f"{_request_words(options, option, value)} ({kind.describe(host)})"
    errors.append(OptionError(option, value, _refusal(candidates, host)))
    return fallback_kind(), "fallback after a refused request"


def _refusal(candidates: tuple[DeviceKind, ...], host: HostFacts) -> str:
    parts = []
    for kind in candidates:
        availability = kind.availability(host)
        fix = f" Fix: {availability.fix}." if availability.fix else ""
        parts.append(f"{kind.name.upper()} is not available: {availability.reason}.{fix}")
    return " ".join(parts) + f" Or pass {option('cpu')} to train on the CPU."


def _check_devices(options: RunOptions, kind: DeviceKind, host: HostFacts, errors: list[OptionError]) -> int:
    count = kind.device_count(host)
    if options.devices in ("auto", -1, None):
        return count
    if isinstance(options.devices, bool) or not isinstance(options.devices, int) or options.devices < 1:
        errors.append(OptionError("devices", options.devices, "must be a whole number >= 1, or 'auto'"))
        return count
    if options.devices > count:
        errors.append(OptionError("devices", options.devices, f"this machine has {count} usable {kind.name} "
                                  f"device{'s' if count != 1 else ''}; pass devices={count} or fewer"))
    return min(options.devices, count)


def _check_processes(options: RunOptions, kind: DeviceKind, host: HostFacts, errors: list[OptionError]) -> str:
    world = options.num_processes
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        errors.append(OptionError("num_processes", world, "must be a whole number >= 1"))
        return "single"
    if options.strategy not in STRATEGIES:
        errors.append(OptionError("strategy", options.strategy, f"choose one of {', '.join(STRATEGIES)}"))
    wants_distributed = world > 1 or options.strategy in ("ddp", "fsdp")
    if wants_distributed and kind.process_group_backend is None:
        name, value = ("num_processes", world) if world > 1 else ("strategy", options.strategy)
        errors.append(OptionError(name, value, f"distributed training cannot run on {kind.name}: no "
                                  f"process-group backend (gloo, nccl) handles {kind.name} tensors. Run one "
                                  f"{kind.name} process, or pass {option('cpu')} to run {world} CPU processes "
                                  "with gloo"))
    if world == 1:
        return options.strategy if options.strategy in ("ddp", "fsdp") else "single"
    return options.strategy if options.strategy in ("ddp", "fsdp") else "ddp"


def _usable(kind: DeviceKind, dtype: str, host: HostFacts) -> bool:
    support = kind.precision_support(dtype, host)
    return support.supported and (not support.needs_grad_scaler or support.grad_scaler_supported)


def _auto_precision(kind: DeviceKind, host: HostFacts) -> tuple[str, bool, str, tuple[str, ...]]:
    for dtype in kind.auto_precision_order(host):
        if _usable(kind, dtype, host):
            support = kind.precision_support(dtype, host)
            scaler = " with a grad scaler" if support.needs_grad_scaler else ""
            return (dtype, support.needs_grad_scaler,
                    f"auto: {dtype}{scaler}, the best mixed precision {kind.name} supports here", ())
    candidates = tuple(dtype for dtype in kind.auto_precision_candidates(host) if _usable(kind, dtype, host))
    if candidates:
        return "no", False, (f"auto: float32 until measured ({kind.auto_float32_reason(host)}); the Trainer times "
                             f"float32, {' and '.join(candidates)} on your model at the start of a run long enough to "
                             "earn the trial back, and keeps a mixed precision only where it wins beyond the timing "
                             "spread with a matching loss"), candidates
    try_bf16 = advice("; pass {} to try it and compare the step times", "mixed_precision", "bf16") \
        if _usable(kind, "bf16", host) else ""
    return "no", False, f"auto: float32, {kind.auto_float32_reason(host)}{try_bf16}", ()


def _choose_precision(options: RunOptions, kind: DeviceKind, host: HostFacts,
                      errors: list[OptionError]) -> tuple[str, bool, str, tuple[str, ...]]:
    """(precision, grad scaler, reason, the candidates "auto" still measures)."""
    asked = options.mixed_precision
    if asked not in (*PRECISIONS, "auto"):
        errors.append(OptionError("mixed_precision", asked, f"choose one of auto, {', '.join(PRECISIONS)}"))
        return "no", False, "float32 after an unknown mixed_precision", ()
    if asked == "no":
        return "no", False, f"float32, {chosen('mixed_precision', 'no')}", ()
    if asked == "auto":
        return _auto_precision(kind, host)
    support = kind.precision_support(asked, host)
    if not support.supported or (support.needs_grad_scaler and not support.grad_scaler_supported):
        errors.append(OptionError("mixed_precision", asked, f"{support.reason}. Upgrade, or pass "
                                  f"{option('mixed_precision', 'no')} (float32)"
                                  + advice(" or {}", "mixed_precision", "auto")))
        return "no", False, "refused", ()
    scaler = " with a grad scaler" if support.needs_grad_scaler else ""
    return asked, support.needs_grad_scaler, f"{asked}{scaler}, as asked", ()


# torch.compile's modes, as torch_compile_mode, compile_mode and ACCELERATE_DYNAMO_MODE take them (None: unset)
COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile_value(value: Any) -> Any:
    """``compile`` as the rules read it: a string in any case and spacing ("Regional", " TRUE"), True/False for the
    strings true/false; anything else as given (refused by the rules below if not a choice)."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    return {"true": True, "false": False}.get(text, text if text in ("auto", "regional") else value)


def _choose_compile(options: RunOptions, kind: DeviceKind, host: HostFacts, errors: list[OptionError],
                    notes: list[str]) -> tuple[bool, str]:
    value = compile_value(options.compile)
    if value == "auto":
        return kind.compile_by_default(host)
    if value is True or value == "regional":
        support = kind.explicit_compile(host)
        if support.refusal:
            errors.append(OptionError("compile", options.compile, support.refusal))
            return False, "refused"
        if support.warning:
            notes.append(support.warning)
        return True, "compile=True, as asked" if value is True else "compile=regional, as asked"
    if value is False:
        return False, "compile=False, as asked"
    errors.append(OptionError("compile", options.compile, "choose auto, true, false or regional (the repeated "
                                                          "blocks and the loss compiled, the rest eager)"))
    return False, "refused"


def _mps_env(options: RunOptions, kind: DeviceKind, errors: list[OptionError]) -> dict[str, str]:
    high, low = options.mps_high_watermark_ratio, options.mps_low_watermark_ratio
    found = False
    for name, ratio in (("mps_high_watermark_ratio", high), ("mps_low_watermark_ratio", low)):
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio < 0):
            errors.append(OptionError(name, ratio, "must be a number >= 0 (0.0 lifts the limit)"))
            found = True
    if found:
        return {}
    # Every kind's rules, whichever device this host picks: the same options travel to other machines.
    problems = [OptionError(*problem) for each in KINDS for problem in each.watermark_problems(high, low)]
    errors.extend(problems)
    if problems:
        return {}
    return kind.env_before_torch(fallback=options.mps_fallback, high_watermark=high, low_watermark=low)


def _ignored_options(options: RunOptions, kind: DeviceKind) -> tuple[tuple[str, str], ...]:
    """The pre-torch options given (a fallback turned off, a watermark ratio) that the chosen kind's environment
    does not use, each with the hardware of the kinds that do."""
    given = {"fallback": ("mps_fallback", False if options.mps_fallback is False else None),
             "high_watermark": ("mps_high_watermark_ratio", options.mps_high_watermark_ratio),
             "low_watermark": ("mps_low_watermark_ratio", options.mps_low_watermark_ratio)}
    ignored = []
    for parameter, (name, value) in given.items():
        if value is None or kind.env_before_torch(**{parameter: value}) != kind.env_before_torch():
            continue
        users = [f"{each.hardware} ({each.name})" for each in KINDS
                 if each.env_before_torch(**{parameter: value}) != each.env_before_torch()]
        ignored.append((name, " and ".join(users)))
    return tuple(ignored)


def make_plan(options: RunOptions, host: HostFacts) -> Plan:
    """Resolve ``options`` against ``host``; raise :class:`PlanError` listing every problem."""
    errors: list[OptionError] = []
    notes: list[str] = []
    kind, device_reason = _choose_device(options, host, errors, notes)
    devices = _check_devices(options, kind, host, errors)
    strategy = _check_processes(options, kind, host, errors)
    precision, scaler, precision_reason, candidates = _choose_precision(options, kind, host, errors)
    use_compile, compile_reason = _choose_compile(options, kind, host, errors, notes)
    env = _mps_env(options, kind, errors)
    if errors:
        raise PlanError(errors)
    return Plan(device=kind, device_reason=device_reason, devices=devices, num_processes=options.num_processes,
                strategy=strategy, backend=kind.process_group_backend if strategy != "single" else None,
                precision=precision, grad_scaler=scaler, precision_reason=precision_reason,
                compile=use_compile, compile_reason=compile_reason, env=env, notes=tuple(notes),
                compile_auto=compile_value(options.compile) == "auto", precision_candidates=candidates,
                compile_regional=use_compile and compile_value(options.compile) == "regional",
                ignored_options=_ignored_options(options, kind))
