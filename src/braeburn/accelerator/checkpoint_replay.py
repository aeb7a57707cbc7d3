"""Gradient checkpointing that recomputes with the random state of the original forward, however it was turned on.

torch.utils.checkpoint replays the CPU generator and the generators of the device kinds it knows. On a kind it
does not (``DeviceKind.checkpoint_replays_rng``), the recomputed forward draws new dropout masks and the
gradients belong to a different network sample, with no error. Checkpointing reaches a model in four ways:

- the Trainer's ``gradient_checkpointing=True``: non-reentrant checkpointing with a ``context_fn`` that replays
  the kind's generator (``trainer/checkpointing.py``);
- turned on on the model itself (Transformers' ``gradient_checkpointing_enable()`` or
  ``activation_checkpointing_enable()``, PEFT's ``prepare_model_for_kbit_training``): each checkpointed layer
  keeps its checkpoint function in ``_gradient_checkpointing_func``, which :func:`prepare_model` wraps when the
  model is prepared (reentrant or not);
- ``torch.utils.checkpoint.checkpoint(...)`` (or ``checkpoint_sequential``) called by the model's own forward:
  :class:`CheckpointPatch` puts the replaying version in its place for the length of each prepared forward;
- anything braeburn cannot see (a checkpoint function bound before it looked, ``from torch.utils.checkpoint
  import checkpoint``): :class:`RecomputeGuard` compares the kind's generator state before and after each
  backward. A recompute that drew random numbers without a replay moves it, and the backward stops with the
  reason before the optimizer applies those gradients. A recompute that draws nothing (no dropout) is right,
  and passes.

Each replay wraps the function handed to checkpoint: its first call (the forward) records the kind's state, each
later call (the recompute) runs from that state and puts the surrounding one back. None of this can be traced by
torch.compile, so compiling a model that checkpoints on such a kind is refused before training
(:func:`compile_conflict`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.utils.checkpoint

from ..devices.base import DeviceKind

_UNSET = object()


class CheckpointReplayError(RuntimeError):
    """A backward recomputed a checkpointed forward that drew random numbers, with nothing to replay them."""


class ReplayingFunction:
    """The function handed to checkpoint, recording the kind's random state at its first call and replaying it at
    each later one (the recompute, from reentrant and non-reentrant checkpointing alike)."""

    def __init__(self, function: Callable, kind: DeviceKind):
        self.function, self.kind, self.recorded = function, kind, _UNSET

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.recorded is _UNSET:
            self.recorded = self.kind.rng_state()  # a small host copy of the generator state, no device sync
            return self.function(*args, **kwargs)
        surrounding = self.kind.rng_state()
        self.kind.set_rng_state(self.recorded)
        try:
            return self.function(*args, **kwargs)
        finally:  # also when non-reentrant checkpointing stops the recompute early
            self.kind.set_rng_state(surrounding)


def replaying(checkpoint: Callable, kind: DeviceKind) -> Callable:
    """``checkpoint`` (torch's, or a partial of it) with the function it is handed replaying ``kind``'s state."""

    def replaying_checkpoint(function: Callable, *args: Any, **kwargs: Any) -> Any:
        return checkpoint(ReplayingFunction(function, kind), *args, **kwargs)

    replaying_checkpoint.replays_rng = True  # type: ignore[attr-defined]
    replaying_checkpoint.wrapped = checkpoint  # type: ignore[attr-defined]
    return replaying_checkpoint


def replays_already(checkpoint: Callable) -> bool:
    """braeburn replays through ``checkpoint`` already: its wrapper, or a partial carrying braeburn's context_fn."""
    context_fn = (getattr(checkpoint, "keywords", None) or {}).get("context_fn")
    return bool(getattr(checkpoint, "replays_rng", False) or getattr(context_fn, "replays_rng", False))


def checkpointed_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Layers that checkpoint through a function kept on them, as Transformers (and PEFT through it) turn it on."""
    return [module for module in model.modules() if getattr(module, "gradient_checkpointing", False) is True
            and callable(getattr(module, "_gradient_checkpointing_func", None))]


def compile_conflict(kind: DeviceKind, what: str) -> str:
    """Why compile=True cannot go with gradient checkpointing (``what``: how it was turned on) on ``kind``."""
    return (f"compile=True with gradient checkpointing ({what}) on {kind.name}: torch.utils.checkpoint does not "
            f"replay the {kind.name} random state, and braeburn's replay runs Python around the checkpointed "
            "function that torch.compile cannot trace (the first compiled step fails with BackendCompilerFailed). "
            "Pass compile=False (eager), or turn gradient checkpointing off")


def prepare_model(model: torch.nn.Module, kind: DeviceKind, compile_asked: bool) -> bool:
    """Replay ``kind``'s random state in the layers that checkpoint on their own; True when there are any.

    Raises ValueError (the reason and the fix) when ``compile_asked`` (compile=True) and layers checkpoint."""
    layers = checkpointed_layers(model)
    if layers and compile_asked:
        raise ValueError(compile_conflict(kind, f"turned on on {type(model).__name__}'s own layers"))
    for layer in layers:
        if not replays_already(layer._gradient_checkpointing_func):
            layer._gradient_checkpointing_func = replaying(layer._gradient_checkpointing_func, kind)
    return bool(layers)


class CheckpointPatch:
    """Entered around a prepared model's eager forward: ``torch.utils.checkpoint.checkpoint`` replays ``kind``'s
    state meanwhile (checkpoint_sequential calls it too). Reusable, and a no-op when nested."""

    def __init__(self, kind: DeviceKind):
        self.kind = kind
        self._saved: list[Callable] = []

    def __enter__(self) -> None:
        current = torch.utils.checkpoint.checkpoint
        self._saved.append(current)
        if not getattr(current, "replays_rng", False):
            torch.utils.checkpoint.checkpoint = replaying(current, self.kind)

    def __exit__(self, *exc: object) -> None:
        torch.utils.checkpoint.checkpoint = self._saved.pop()


def _same_state(before: Any, after: Any) -> bool:
    """Generator states are small host tensors: compared as bytes, with no torch op (none reads the device)."""
    on_host = [isinstance(state, torch.Tensor) and state.device.type == "cpu" for state in (before, after)]
    if all(on_host):
        return before.numpy().tobytes() == after.numpy().tobytes()
    return bool(torch.equal(before, after))


class RecomputeGuard:
    """Entered around each backward: the kind's generator must end where it started, since a backward draws no
    random numbers of its own and every replay puts the surrounding state back."""

    def __init__(self, kind: DeviceKind):
        self.kind = kind
        self._before: Any = None

    def __enter__(self) -> None:
        self._before = self.kind.rng_state()

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        before, self._before = self._before, None
        if exc_type is not None or before is None or _same_state(before, self.kind.rng_state()):
            return
        name = self.kind.name
        raise CheckpointReplayError(
            f"this backward recomputed a checkpointed forward that drew random numbers (dropout) on {name}, and "
            f"torch.utils.checkpoint does not replay the {name} random state: the recompute drew new masks, so these "
            "gradients belong to a different network, and braeburn stops before the optimizer applies them. braeburn "
            "replays it for gradient_checkpointing=True (Trainer), for model.gradient_checkpointing_enable() called "
            "before accelerator.prepare(model), and for torch.utils.checkpoint.checkpoint(...) looked up inside the "
            "forward; a checkpoint function bound earlier (`from torch.utils.checkpoint import checkpoint`) escapes "
            "it. Call it one of those ways, set dropout to 0 in the checkpointed blocks, or turn checkpointing off")


__all__ = ["CheckpointPatch", "CheckpointReplayError", "RecomputeGuard", "ReplayingFunction", "checkpointed_layers",
           "compile_conflict", "prepare_model", "replaying", "replays_already"]
