"""braeburn's own environment variables, and reading them (the plan itself does no I/O).

`braeburn launch` sets these in the child so that scripts using `Accelerator` or `Trainer` pick up
its choices with no code change; a plain `python script.py` leaves them unset and gets automatic
choices. An explicit argument in code wins over them, except BRAEBURN_DEVICE (and --cpu), which
override the device everywhere.

Accelerate's ``ACCELERATE_*`` variables (set by ``accelerate launch`` and ``accelerate config``) are read by
:func:`accelerate_env` with Accelerate 1.15's meaning and precedence; the ones braeburn cannot honour come back
as notes naming the variable and the fix, which the Accelerator says once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

DEVICE_VAR = "BRAEBURN_DEVICE"  # cpu | cuda | mps | gpu | auto: overrides the device everywhere
# Set by `braeburn launch` beside BRAEBURN_DEVICE: "<device>: <what the user asked of the launcher>", so the child
# names the user's request (--cpu, auto), not a variable the user never set, as the reason for its device.
DEVICE_REASON_VAR = "BRAEBURN_DEVICE_REASON"
MIXED_PRECISION_VAR = "BRAEBURN_MIXED_PRECISION"  # auto | no | fp16 | bf16
STRATEGY_VAR = "BRAEBURN_STRATEGY"  # auto | ddp | fsdp
COMPILE_VAR = "BRAEBURN_COMPILE"  # auto | true | false
CHECK_DIR_VAR = "BRAEBURN_CHECK_DIR"  # set by `braeburn check` in the runs it compares (see probe.py)
CHECK_STEPS_VAR = "BRAEBURN_CHECK_STEPS"  # optimizer steps a checked run records before it stops
CHECK_SIDE_VAR = "BRAEBURN_CHECK_SIDE"  # reference | accelerator | bench: which run this is
CHECK_REFERENCE_VAR = "BRAEBURN_CHECK_REFERENCE_DIR"  # accelerator side: the reference run's records
CHECK_TARGET_VAR = "BRAEBURN_CHECK_TARGET"  # the device kind the accelerator side uses (float64 checks)
SEED_VAR = "BRAEBURN_SEED"  # a seed scripts and the Accelerator may honour; `check` sets it on both sides
MAX_STEPS_VAR = "BRAEBURN_MAX_STEPS"  # a quick run: every Trainer stops after N optimizer steps (see BRAEBURN_VARIABLES)

BRAEBURN_VARIABLES: tuple[tuple[str, str, bool], ...] = (
    (DEVICE_VAR, "overrides the device choice everywhere (cpu, cuda, mps, gpu, auto)", False),
    (DEVICE_REASON_VAR, "set by braeburn launch beside BRAEBURN_DEVICE: why that device, in the words of what the "
                        "launcher was asked (--cpu, auto)", False),
    (MIXED_PRECISION_VAR, "mixed precision when the script does not set one (auto, no, fp16, bf16)", False),
    (STRATEGY_VAR, "distributed strategy when the script does not set one (auto, ddp, fsdp)", False),
    (COMPILE_VAR, "torch.compile when the script does not set it (auto, true, false)", False),
    (MAX_STEPS_VAR, "cuts every Trainer run to at most N optimizer steps, and `braeburn bench` to N steps of its "
                    "tiny models: a quick check that a command runs (the doc tests set it)", False),
)


def _get(name: str, env: Mapping[str, str] | None) -> str | None:
    value = (os.environ if env is None else env).get(name, "").strip()
    return value or None


def env_device(env: Mapping[str, str] | None = None) -> str | None:
    return _get(DEVICE_VAR, env)


def env_device_reason(env: Mapping[str, str] | None = None) -> str | None:
    """Why BRAEBURN_DEVICE holds its value, when the launcher set it (its DEVICE_REASON_VAR names the same device);
    None when the user set BRAEBURN_DEVICE (or changed it after the launcher)."""
    device, _, reason = (_get(DEVICE_REASON_VAR, env) or "").partition(": ")
    value = env_device(env)
    if value is None or device.strip().lower() != value.lower():
        return None
    return reason.strip() or None


def max_steps_cap(env: Mapping[str, str] | None = None) -> int | None:
    """The step cap BRAEBURN_MAX_STEPS asks for, or None; a value that is not a whole number >= 1 is an error."""
    value = _get(MAX_STEPS_VAR, env)
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{MAX_STEPS_VAR}={value!r}: must be a whole number >= 1 (the most optimizer steps a "
                         f"run may take). Set it to a number such as 3, or unset it to train in full.")
    return int(value)


def env_default(name: str, given: str, env: Mapping[str, str] | None = None) -> str:
    """``given`` unless it is "auto" and the launcher put a value for ``name`` in the environment."""
    if given != "auto":
        return given
    return _get(name, env) or given


# Accelerate 1.15's Accelerator reads these, and braeburn cannot do what they ask (read only when they ask it).
ACCELERATE_UNSUPPORTED: dict[str, str] = {
    "ACCELERATE_USE_DEEPSPEED": "braeburn has no DeepSpeed; unset it, and pass Accelerator(strategy='fsdp') "
                                "(braeburn launch --strategy fsdp) to shard the model",
    "ACCELERATE_USE_FSDP": "braeburn reads no FSDP_* settings; unset it, and pass Accelerator(strategy='fsdp') "
                           "(braeburn launch --strategy fsdp)",
    "ACCELERATE_USE_MEGATRON_LM": "braeburn has no Megatron-LM; unset it, and pass Accelerator(strategy='fsdp')",
    "ACCELERATE_USE_PARALLELISM_CONFIG": "braeburn has no tensor/context parallelism; unset it, and pass "
                                         "Accelerator(strategy='ddp' or 'fsdp')",
    "ACCELERATE_USE_SAGEMAKER": "braeburn does not launch on SageMaker; unset it and use braeburn launch",
    "ACCELERATE_CPU_AFFINITY": "braeburn does not pin processes to CPU cores; unset it, and use taskset or numactl",
    "ACCELERATE_DEBUG_MODE": "braeburn does not check collective shapes across processes; unset it",
    "ACCELERATE_DYNAMO_USE_FULLGRAPH": "braeburn compiles without fullgraph; unset it",
    "ACCELERATE_DYNAMO_USE_DYNAMIC": "braeburn lets torch.compile choose dynamic shapes; unset it",
}
_VALUED_UNSUPPORTED = {  # these ask for something by being set at all
    "ACCELERATE_TORCH_DEVICE": "braeburn chooses the device itself; unset it, and pass Accelerator(accelerator=...) "
                               "or set BRAEBURN_DEVICE",
}
_PRECISIONS = ("no", "fp16", "bf16")


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "y", "t", "on")  # Accelerate's str_to_bool


@dataclass
class AccelerateEnv:
    """What the ACCELERATE_* variables ask of an Accelerator, in braeburn's option names (None: not asked)."""

    cpu: bool = False
    mixed_precision: str | None = None
    gradient_accumulation_steps: int | None = None
    compile: bool | None = None
    compile_mode: str | None = None
    notes: list[str] = field(default_factory=list)


def accelerate_env(env: Mapping[str, str] | None = None) -> AccelerateEnv:
    """Read the ACCELERATE_* variables that Accelerate 1.15's Accelerator reads. Their precedence is the
    caller's, as Accelerate's: ACCELERATE_USE_CPU forces the CPU, ACCELERATE_MIXED_PRECISION fills an unset
    mixed_precision, ACCELERATE_GRADIENT_ACCUMULATION_STEPS replaces the argument (unless a plugin is given)."""
    env = os.environ if env is None else env
    found = AccelerateEnv(cpu=_flag(env.get("ACCELERATE_USE_CPU", "")))
    precision = _get("ACCELERATE_MIXED_PRECISION", env)
    if precision is not None and precision.lower() in _PRECISIONS:
        found.mixed_precision = precision.lower()
    elif precision is not None:
        found.notes.append(f"ACCELERATE_MIXED_PRECISION={precision} is not supported by braeburn and is ignored; set "
                           f"it to one of {', '.join(_PRECISIONS)}, or unset it and pass Accelerator(mixed_precision=...)")
    steps = _get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", env)
    if steps is not None:
        try:
            found.gradient_accumulation_steps = int(steps)
        except ValueError:
            found.notes.append(f"ACCELERATE_GRADIENT_ACCUMULATION_STEPS={steps} is not a whole number and is ignored; "
                               "set it to one (e.g. 4), or unset it")
    _read_dynamo(env, found)
    for name, fix in ACCELERATE_UNSUPPORTED.items():
        if _flag(env.get(name, "")):
            found.notes.append(f"{name}={env[name]} is not supported by braeburn and is ignored: {fix}")
    for name, fix in _VALUED_UNSUPPORTED.items():
        if _get(name, env) is not None:
            found.notes.append(f"{name}={env[name]} is not supported by braeburn and is ignored: {fix}")
    return found


def _read_dynamo(env: Mapping[str, str], found: AccelerateEnv) -> None:
    """ACCELERATE_DYNAMO_BACKEND/MODE (TorchDynamoPlugin's): inductor is braeburn's compile=True."""
    backend = (_get("ACCELERATE_DYNAMO_BACKEND", env) or "no").lower()
    if backend == "inductor":
        found.compile = True
        mode = _get("ACCELERATE_DYNAMO_MODE", env)
        found.compile_mode = None if mode in (None, "default") else mode
    elif backend != "no":
        found.notes.append(f"ACCELERATE_DYNAMO_BACKEND={env['ACCELERATE_DYNAMO_BACKEND']} is not supported by "
                           "braeburn and is ignored: braeburn compiles with inductor only; set it to inductor or no")
