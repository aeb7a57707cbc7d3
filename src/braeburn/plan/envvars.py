"""braeburn's own environment variables, and reading them (the plan itself does no I/O).

`braeburn launch` sets these in the child so that scripts using `Accelerator` or `Trainer` pick up
its choices with no code change; a plain `python script.py` leaves them unset and gets automatic
choices. An explicit argument in code wins over them, except BRAEBURN_DEVICE (and --cpu), which
override the device everywhere.

Accelerate's ``ACCELERATE_*`` variables are the Accelerate layer's to read (compat/accelerate/environment.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

DEVICE_VAR = "BRAEBURN_DEVICE"  # cpu | cuda | mps | gpu | auto: overrides the device everywhere
# Set by `braeburn launch` beside BRAEBURN_DEVICE: "<device>: <what the user asked of the launcher>", so the child
# names the user's request (--cpu, auto), not a variable the user never set, as the reason for its device.
DEVICE_REASON_VAR = "BRAEBURN_DEVICE_REASON"
MIXED_PRECISION_VAR = "BRAEBURN_MIXED_PRECISION"  # auto | no | fp16 | bf16
STRATEGY_VAR = "BRAEBURN_STRATEGY"  # auto | ddp | fsdp
COMPILE_VAR = "BRAEBURN_COMPILE"  # auto | true | false | regional
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


def env_value(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """Variable ``name`` of ``env`` (the process's environment by default), stripped; None when unset or empty."""
    value = (os.environ if env is None else env).get(name, "").strip()
    return value or None


def env_device(env: Mapping[str, str] | None = None) -> str | None:
    return env_value(DEVICE_VAR, env)


def env_device_reason(env: Mapping[str, str] | None = None) -> str | None:
    """Why BRAEBURN_DEVICE holds its value, when the launcher set it (its DEVICE_REASON_VAR names the same device);
    None when the user set BRAEBURN_DEVICE (or changed it after the launcher)."""
    device, _, reason = (env_value(DEVICE_REASON_VAR, env) or "").partition(": ")
    value = env_device(env)
    if value is None or device.strip().lower() != value.lower():
        return None
    return reason.strip() or None


def max_steps_cap(env: Mapping[str, str] | None = None) -> int | None:
    """The step cap BRAEBURN_MAX_STEPS asks for, or None; a value that is not a whole number >= 1 is an error."""
    value = env_value(MAX_STEPS_VAR, env)
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
    return env_value(name, env) or given
