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
- any call of ``torch.utils.checkpoint.checkpoint`` (or ``checkpoint_sequential``) while a prepared model's forward
  runs, however the function was reached (looked up at the call, or bound earlier by ``from torch.utils.checkpoint
  import checkpoint``), and the checkpoints a recompute calls in its turn (nested ones): :class:`CheckpointPatch`;
- a checkpoint that torch.compile traced into a compiled forward, which runs no Python of braeburn's at the
  recompute: :class:`RecomputeGuard` compares the kind's generator state before and after each backward of such a
  model, and stops with the reason (compile=False) when it moved, before the optimizer applies the gradients.

How :class:`CheckpointPatch` sees every call: ``checkpoint()`` looks up two module globals of torch.utils.checkpoint
when it is called, ``CheckpointFunction`` (reentrant; public, in its ``__all__``) and
``_checkpoint_without_reentrant_generator`` (non-reentrant; private), in torch 2.x through 2.13 at least. For the
length of each prepared forward the patch puts replaying versions in their place, so even a ``checkpoint`` bound
before braeburn looked goes through them. Since one of the two names is private (STYLE.md rule 2: public APIs),
braeburn checks that both are there (:func:`dispatch_found`). Where a torch lacks them, it falls back to replacing
the public ``torch.utils.checkpoint.checkpoint`` for the forward (a call looked up then is replayed, one bound
earlier is not), and the guard watches every backward but only warns, once: a generator that moved could be such an
unseen checkpoint, or random numbers the backward draws on purpose (gradient noise, stochastic rounding), which
would be a false alarm that stops a correct run.

Each replay wraps the function handed to checkpoint (:class:`ReplayingFunction`): the forward records the kind's
state, each recompute runs from that state, inside the patch, and puts the surrounding one back. None of this can be
traced by torch.compile, so compiling a model whose layers checkpoint, or with the Trainer's
``gradient_checkpointing=True``, is refused before training (:func:`compile_conflict`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
import torch.utils.checkpoint

from ..devices.base import DeviceKind
from ..warn import warn

_UNSET = object()


class CheckpointReplayError(RuntimeError):
    """A backward recomputed a checkpointed forward that drew random numbers, with nothing to replay them."""


class ReplayingFunction:
    """The function handed to checkpoint, recording the kind's random state at its first call and replaying it at
    each later one (the recompute, from reentrant and non-reentrant checkpointing alike). With ``recorded`` given,
    every call replays it (non-reentrant checkpointing calls its function only to recompute)."""

    def __init__(self, function: Callable, kind: DeviceKind, recorded: Any = _UNSET,
                 patch: "CheckpointPatch | None" = None):
        self.function, self.kind, self.recorded = function, kind, recorded
        self.patch = patch if patch is not None else CheckpointPatch(kind)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.recorded is _UNSET:
            self.recorded = self.kind.rng_state()  # a small host copy of the generator state, no device sync
            return self.function(*args, **kwargs)
        surrounding = self.kind.rng_state()
        self.kind.set_rng_state(self.recorded)
        try:
            with self.patch:  # a checkpoint the recompute calls (a nested one) replays too
                return self.function(*args, **kwargs)
        finally:  # also when non-reentrant checkpointing stops the recompute early
            self.kind.set_rng_state(surrounding)


def replaying(checkpoint: Callable, kind: DeviceKind, patch: "CheckpointPatch | None" = None) -> Callable:
    """``checkpoint`` (torch's, or a partial of it) with the function it is handed replaying ``kind``'s state."""
    patch = patch if patch is not None else CheckpointPatch(kind)

    def replaying_checkpoint(function: Callable, *args: Any, **kwargs: Any) -> Any:
        return checkpoint(ReplayingFunction(function, kind, patch=patch), *args, **kwargs)

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


_REENTRANT = "CheckpointFunction"  # public (torch.utils.checkpoint.__all__)
_NON_REENTRANT = "_checkpoint_without_reentrant_generator"  # private: looked for, never assumed


def dispatch_found() -> bool:
    """torch.utils.checkpoint dispatches through the two module globals braeburn replays through (torch 2.13)."""
    reentrant = getattr(torch.utils.checkpoint, _REENTRANT, None)
    return callable(getattr(reentrant, "apply", None)) and callable(getattr(torch.utils.checkpoint, _NON_REENTRANT,
                                                                            None))


def _compiling() -> bool:
    return torch.compiler.is_compiling()


class _ReplayingCheckpointFunction:
    """Stands in for ``CheckpointFunction`` while a patch is in: ``checkpoint()`` calls
    ``CheckpointFunction.apply(function, preserve_rng_state, *args)``, whose forward calls ``function`` once and
    whose backward calls it again to recompute."""

    replays_rng = True

    def __init__(self, original: Any, patch: "CheckpointPatch"):
        self.original, self.patch = original, patch

    def apply(self, function: Callable, preserve_rng_state: bool, *args: Any) -> Any:
        if preserve_rng_state:  # preserve_rng_state=False: the caller asked for no replay
            function = self.patch.replaying_function(function)
        return self.original.apply(function, preserve_rng_state, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


def _replaying_generator(original: Callable, patch: "CheckpointPatch") -> Callable:
    """Stands in for ``_checkpoint_without_reentrant_generator(function, preserve_rng_state, context_fn, ...)``,
    which ``checkpoint()`` creates right before it calls ``function`` for the forward; the generator calls the
    function it is given only to recompute, so that one replays the state recorded now."""

    def generator(function: Callable, *args: Any, **kwargs: Any) -> Any:
        preserve = args[0] if args else kwargs.get("preserve_rng_state", True)
        context_fn = args[1] if len(args) > 1 else kwargs.get("context_fn")
        # preserve_rng_state=False: the caller asked for no replay; the Trainer's own context_fn replays already
        if preserve and not getattr(context_fn, "replays_rng", False):
            function = patch.replaying_function(function, record_now=True)
        return original(function, *args, **kwargs)

    generator.replays_rng = True  # type: ignore[attr-defined]
    return generator


class CheckpointPatch:
    """Entered around a prepared model's forward (eager or compiled) and around each recompute it replays: every
    torch.utils.checkpoint call meanwhile replays ``kind``'s state (see the module's docstring). Reusable, and a
    no-op when nested. ``traced``: a checkpoint went into a graph torch.compile built, where nothing replays it."""

    def __init__(self, kind: DeviceKind):
        self.kind, self.dispatch = kind, dispatch_found()
        self.traced = False
        self._saved: list[tuple[Any, ...]] = []

    def replaying_function(self, function: Callable, record_now: bool = False) -> Callable:
        if _compiling():  # torch.compile is tracing: its graph runs no Python at the recompute
            self.traced = True
            return function
        if isinstance(function, ReplayingFunction):  # a layer's checkpoint function braeburn wrapped at prepare
            return function
        return ReplayingFunction(function, self.kind, self.kind.rng_state() if record_now else _UNSET, self)

    def __enter__(self) -> None:
        module = torch.utils.checkpoint
        if not self.dispatch:  # the fallback: only a checkpoint looked up during the forward is replayed
            self._saved.append((module.checkpoint,))
            if not getattr(module.checkpoint, "replays_rng", False):
                module.checkpoint = replaying(module.checkpoint, self.kind, self)
            return
        reentrant, non_reentrant = getattr(module, _REENTRANT), getattr(module, _NON_REENTRANT)
        self._saved.append((reentrant, non_reentrant))
        if not getattr(reentrant, "replays_rng", False):
            setattr(module, _REENTRANT, _ReplayingCheckpointFunction(reentrant, self))
        if not getattr(non_reentrant, "replays_rng", False):
            setattr(module, _NON_REENTRANT, _replaying_generator(non_reentrant, self))

    def __exit__(self, *exc: object) -> None:
        saved = self._saved.pop()
        if len(saved) == 1:
            torch.utils.checkpoint.checkpoint = saved[0]
        else:
            setattr(torch.utils.checkpoint, _REENTRANT, saved[0])
            setattr(torch.utils.checkpoint, _NON_REENTRANT, saved[1])

    @property
    def compiled_forward(self) -> Any:
        """The context for a compiled forward: the patch where it only records what torch.compile traces; nothing in
        the fallback, whose replacement ``checkpoint`` torch.compile would have to trace."""
        return self if self.dispatch else contextlib.nullcontext()


def _same_state(before: Any, after: Any) -> bool:
    """Generator states are small host tensors: compared as bytes, with no torch op (none reads the device)."""
    on_host = [isinstance(state, torch.Tensor) and state.device.type == "cpu" for state in (before, after)]
    if all(on_host):
        return before.numpy().tobytes() == after.numpy().tobytes()
    return bool(torch.equal(before, after))


class RecomputeGuard:
    """Entered around each backward where a recompute may have run unreplayed: the kind's generator must end where
    it started, since every replay puts the surrounding state back. Watched only where that can happen: a checkpoint
    traced into a compiled forward (then it stops the backward), or a torch whose checkpoint braeburn cannot see
    fully (then it warns, once: the backward may draw random numbers on purpose)."""

    def __init__(self, kind: DeviceKind, patch: CheckpointPatch):
        self.kind, self.patch = kind, patch
        self._before: Any = None
        self._warned = False

    def __enter__(self) -> None:
        self._before = self.kind.rng_state() if (self.patch.traced or not self.patch.dispatch) else None

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        before, self._before = self._before, None
        if exc_type is not None or before is None or _same_state(before, self.kind.rng_state()):
            return
        if self.patch.dispatch:
            raise CheckpointReplayError(_compiled_message(self.kind.name))
        if not self._warned:
            self._warned = True
            warn(_unseen_message(self.kind.name))


def _compiled_message(name: str) -> str:
    return (f"this backward drew random numbers on {name}, and the model's compiled forward (compile=True, or a "
            "model you compiled) calls torch.utils.checkpoint: torch.compile traced that checkpoint into its own "
            f"graph, where braeburn's replay of the {name} random state cannot run, so a recomputed dropout drew new "
            "masks and these gradients may belong to a different network. braeburn stops before the optimizer applies "
            "them. Pass compile=False (braeburn then replays every checkpoint in the forward, and a backward that "
            "draws random numbers on purpose, such as gradient noise, needs no such check), or set dropout to 0 in "
            "the checkpointed blocks")


def _unseen_message(name: str) -> str:
    return (f"the {name} random state moved during a backward. This torch's torch.utils.checkpoint has no "
            f"{_REENTRANT} and {_NON_REENTRANT}, through which braeburn replays every checkpoint, so it replays only "
            "torch.utils.checkpoint.checkpoint(...) looked up inside a prepared forward: if a checkpoint function "
            "bound earlier (`from torch.utils.checkpoint import checkpoint`) recomputed dropout, these gradients "
            "belong to a different network; call it as torch.utils.checkpoint.checkpoint(...) inside the forward, "
            "set dropout to 0 in the checkpointed blocks, or turn checkpointing off. If your backward draws random "
            "numbers on purpose (gradient noise, stochastic rounding), nothing is wrong. Said once")


__all__ = ["CheckpointPatch", "CheckpointReplayError", "RecomputeGuard", "ReplayingFunction", "checkpointed_layers",
           "compile_conflict", "dispatch_found", "prepare_model", "replaying", "replays_already"]
