"""braeburn's own environment variables, and reading them (the plan itself does no I/O)."""

from __future__ import annotations

import os
from collections.abc import Mapping

DEVICE_VAR = "BRAEBURN_DEVICE"  # cpu | cuda | mps | gpu | auto: overrides the device everywhere

BRAEBURN_VARIABLES: tuple[tuple[str, str, bool], ...] = (
    (DEVICE_VAR, "overrides the device choice everywhere (cpu, cuda, mps, gpu, auto)", False),
)


def env_device(env: Mapping[str, str] | None = None) -> str | None:
    value = (os.environ if env is None else env).get(DEVICE_VAR, "").strip()
    return value or None
