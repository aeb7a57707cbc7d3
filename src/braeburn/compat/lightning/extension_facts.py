"""What the extension (``extension.py``) says: the device Lightning trains on and why (``braeburn doctor``'s facts),
whether the CPU fallback took effect, and the summary block at the end of ``fit`` (where the time went, the driver's
memory, the ops that fell back to the CPU). No device is named here: each fact is the device kind's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ...devices.base import DeviceKind
from ...devices.host import HostFacts
from ...devices.registry import KIND_NAMES, KINDS, fallback_kind, get_kind
from ...trainer.progress import memory_line


def device_kind(trainer: Any, package: ModuleType) -> DeviceKind:
    """braeburn's device kind for the accelerator Lightning chose: by the name Lightning registered its class under
    (so a test can fake Lightning's own accelerator), else by the type of its root device."""
    registry = getattr(package.accelerators, "AcceleratorRegistry", {})
    for name, entry in registry.items():
        if entry.get("accelerator") is type(trainer.accelerator) and name in KIND_NAMES:
            return get_kind(name)
    device_type = trainer.strategy.root_device.type
    return get_kind(device_type) if device_type in KIND_NAMES else fallback_kind()


def device_words(kind: DeviceKind, host: HostFacts) -> str:
    """``Apple-silicon GPU (mps), the best usable device here``, or on the fallback kind why no accelerator is used
    (each accelerator that is here but cannot be reached, with its fix)."""
    first_usable = next((k for k in KINDS if k.availability(host).usable), None)
    if kind is not fallback_kind():
        best = "the best usable device here" if first_usable is kind else \
            f"Lightning's accelerator choice; {first_usable.name} is usable here too"
        return f"{kind.describe(host)}, {best}"
    missed = []
    for other in KINDS:
        availability = other.availability(host)
        if other.is_accelerator and not availability.usable and availability.fixable:
            missed.append(f"{other.name} is here but not usable: {availability.reason}"
                          + (f" (fix: {availability.fix})" if availability.fix else ""))
        elif other.is_accelerator and availability.usable:
            missed.append(f"{other.name} is usable: pass Trainer(accelerator={other.name!r})")
    return f"{kind.describe(host)}, " + ("; ".join(missed) if missed else "no accelerator here")


def early_env(kind: DeviceKind, host: HostFacts, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """(what the fit-start line says of the variables the kind needs before torch loads, a warning or None)."""
    wanted = kind.env_before_torch()
    if not wanted:
        return "", None
    seen = host.env if host.torch_loaded_before_braeburn else environ
    missing = {name: value for name, value in wanted.items() if name not in seen}
    if not missing:
        return "; " + ", ".join(f"{name}={seen[name]}" for name in wanted) + " set before torch loaded", None
    names = ", ".join(f"{name}={value}" for name, value in missing.items())
    when = "torch was imported before braeburn (by `import lightning` or `import torch`)" \
        if host.torch_loaded_before_braeburn else "torch loaded without it"
    return "", (f"braeburn: {names} must be set before torch loads, but {when}, so setting it now does nothing (an "
                "op the device lacks fails instead of running on the CPU). Put `import braeburn` first in the script, "
                f"above `import lightning`, or start it with `braeburn launch script.py` (or export {names}).")


@dataclass
class StepClock:
    """Where fit's time went, from Lightning's hooks: each training batch (on_train_batch_start to _end: the step,
    its backward and optimizer step), each validation, and the rest (data loading, logging, checkpoints). No
    device sync is added: work still queued when a hook runs counts in the next interval."""

    started: float = 0.0
    seconds: dict[str, float] = field(default_factory=lambda: {"steps": 0.0, "validation": 0.0})
    counts: dict[str, int] = field(default_factory=lambda: {"steps": 0, "validation": 0})
    _open: dict[str, float] = field(default_factory=dict)

    def start(self) -> None:
        self.started = time.perf_counter()

    def begin(self, phase: str) -> None:
        self._open[phase] = time.perf_counter()

    def end(self, phase: str) -> None:
        began = self._open.pop(phase, None)
        if began is not None:
            self.seconds[phase] += time.perf_counter() - began
            self.counts[phase] += 1

    def line(self, optimizer_steps: int) -> str:
        """``time       3.1 s = 2.0 s in 96 batches (32 optimizer steps; 20.8 ms/batch: ...) + 0.9 s between batches
        (...) + 0.2 s validation (3x)``: a batch is one training_step; with accumulate_grad_batches=N the optimizer
        steps (Lightning's global_step) are one in N of them."""
        total = time.perf_counter() - self.started
        steps, validation = self.seconds["steps"], self.seconds["validation"]
        count = self.counts["steps"]
        per_batch = f"; {steps / count * 1000:.1f} ms/batch: forward, backward, optimizer step when due" if count else ""
        between = max(0.0, total - steps - validation)
        parts = [f"{steps:.1f} s in {count} batches ({optimizer_steps} optimizer steps{per_batch})",
                 f"{between:.1f} s between batches (data loading, logging, checkpoints)"]
        if self.counts["validation"]:
            parts.append(f"{validation:.1f} s validation ({self.counts['validation']}x)")
        return f"  time       {total:.1f} s = " + " + ".join(parts)


def summary_block(kind: DeviceKind, host: HostFacts, precision: str, clock: StepClock,
                  fallbacks: list[tuple[str, int]], optimizer_steps: int) -> str:
    """The one block printed at the end of fit (``optimizer_steps``: Lightning's global_step)."""
    lines = ["braeburn: fit summary (braeburn.lightning.Braeburn)",
             f"  device     {kind.describe(host)}",
             f"  precision  {precision}",
             clock.line(optimizer_steps),
             f"  {memory_line(kind.memory_stats())}"]
    if fallbacks:
        ops = ", ".join(f"{op} ({count}x)" for op, count in fallbacks)
        lines.append(f"  on the CPU {ops}: ops the device lacks ran on the CPU")
    return "\n".join(lines)


__all__ = ["StepClock", "device_kind", "device_words", "early_env", "summary_block"]
