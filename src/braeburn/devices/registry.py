"""The registered device kinds, best first. Adding a kind is adding its file and one line here."""

from __future__ import annotations

from .base import DeviceKind
from .cpu import CpuDevice
from .cuda import CudaDevice
from .mps import MpsDevice

# Order is the preference of accelerator="auto".
KINDS: tuple[DeviceKind, ...] = (CudaDevice(), MpsDevice(), CpuDevice())
KIND_NAMES: tuple[str, ...] = tuple(kind.name for kind in KINDS)
# Lightning's "gpu" means whichever GPU kind this machine has.
GPU_ALIAS = "gpu"
ACCELERATOR_CHOICES: tuple[str, ...] = ("auto", GPU_ALIAS, *KIND_NAMES)


def get_kind(name: str) -> DeviceKind:
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise KeyError(f"unknown device kind {name!r}; known: {', '.join(KIND_NAMES)}")


def accelerator_kinds() -> tuple[DeviceKind, ...]:
    return tuple(kind for kind in KINDS if kind.is_accelerator)


def fallback_kind() -> DeviceKind:
    return next(kind for kind in KINDS if not kind.is_accelerator)
