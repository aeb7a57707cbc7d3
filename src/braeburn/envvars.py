"""braeburn's own environment variables, and reading them (the plan itself does no I/O).

`braeburn launch` sets these in the child so that scripts using `Accelerator` or `Trainer` pick up
its choices with no code change; a plain `python script.py` leaves them unset and gets automatic
choices. An explicit argument in code wins over them, except BRAEBURN_DEVICE (and --cpu), which
override the device everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

DEVICE_VAR = "BRAEBURN_DEVICE"  # cpu | cuda | mps | gpu | auto: overrides the device everywhere
MIXED_PRECISION_VAR = "BRAEBURN_MIXED_PRECISION"  # auto | no | fp16 | bf16
STRATEGY_VAR = "BRAEBURN_STRATEGY"  # auto | ddp | fsdp
COMPILE_VAR = "BRAEBURN_COMPILE"  # auto | true | false
CHECK_DIR_VAR = "BRAEBURN_CHECK_DIR"  # set by `braeburn check` in the runs it compares (see probe.py)
CHECK_STEPS_VAR = "BRAEBURN_CHECK_STEPS"  # optimizer steps a checked run records before it stops
CHECK_SIDE_VAR = "BRAEBURN_CHECK_SIDE"  # reference | accelerator | bench: which run this is
CHECK_REFERENCE_VAR = "BRAEBURN_CHECK_REFERENCE_DIR"  # accelerator side: the reference run's records
CHECK_TARGET_VAR = "BRAEBURN_CHECK_TARGET"  # the device kind the accelerator side uses (float64 checks)
SEED_VAR = "BRAEBURN_SEED"  # a seed scripts and the Accelerator may honour; `check` sets it on both sides

BRAEBURN_VARIABLES: tuple[tuple[str, str, bool], ...] = (
    (DEVICE_VAR, "overrides the device choice everywhere (cpu, cuda, mps, gpu, auto)", False),
    (MIXED_PRECISION_VAR, "mixed precision when the script does not set one (auto, no, fp16, bf16)", False),
    (STRATEGY_VAR, "distributed strategy when the script does not set one (auto, ddp, fsdp)", False),
    (COMPILE_VAR, "torch.compile when the script does not set it (auto, true, false)", False),
)


def _get(name: str, env: Mapping[str, str] | None) -> str | None:
    value = (os.environ if env is None else env).get(name, "").strip()
    return value or None


def env_device(env: Mapping[str, str] | None = None) -> str | None:
    return _get(DEVICE_VAR, env)


def env_default(name: str, given: str, env: Mapping[str, str] | None = None) -> str:
    """``given`` unless it is "auto" and the launcher put a value for ``name`` in the environment."""
    if given != "auto":
        return given
    return _get(name, env) or given
