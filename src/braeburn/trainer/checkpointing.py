"""Gradient checkpointing that recomputes with the random state of the original forward on every device.

torch.utils.checkpoint replays the CPU generator and the generators of the device kinds it knows. On a kind
it does not (``DeviceKind.checkpoint_replays_rng``), the recomputed forward draws new dropout masks and the
gradients belong to a different network sample, with no error. braeburn closes the gap through checkpoint's
public ``context_fn`` (non-reentrant checkpointing only): the forward context records the kind's generator
state, the recompute context puts it back and restores the surrounding state afterwards.
:func:`prepare_model_options` turns it on for the model before training (and TF32 matmuls, ``--tf32``).
"""

from __future__ import annotations

from typing import Any, Callable

from ..devices.base import DeviceKind
from ..devices.host import HostFacts


class _RecordState:
    """Entered around the original forward: remembers the kind's generator state at its start."""

    def __init__(self, kind: DeviceKind):
        self.kind, self.state = kind, None

    def __enter__(self) -> None:
        self.state = self.kind.rng_state()  # a copy of the generator state: costs a small host copy

    def __exit__(self, *exc: object) -> None:
        return None


class _ReplayState:
    """Entered around each recompute: the forward's state inside, the surrounding state after."""

    def __init__(self, kind: DeviceKind, recorded: _RecordState):
        self.kind, self.recorded, self.surrounding = kind, recorded, None

    def __enter__(self) -> None:
        self.surrounding = self.kind.rng_state()
        self.kind.set_rng_state(self.recorded.state)

    def __exit__(self, *exc: object) -> None:
        self.kind.set_rng_state(self.surrounding)


def replay_rng_context_fn(kind: DeviceKind) -> Callable[[], tuple[Any, Any]]:
    """A ``context_fn`` for torch.utils.checkpoint that replays ``kind``'s generator in the recompute."""

    def context_fn() -> tuple[_RecordState, _ReplayState]:
        recorded = _RecordState(kind)
        return recorded, _ReplayState(kind, recorded)

    context_fn.replays_rng = True  # type: ignore[attr-defined]  (braeburn.accelerator.checkpoint_replay does not wrap it again)
    return context_fn


def checkpointing_kwargs(given: dict | None, kind: DeviceKind, host: HostFacts) -> dict | None:
    """The keyword arguments for ``model.gradient_checkpointing_enable`` on ``kind``.

    Unchanged where torch replays the kind's random state; elsewhere non-reentrant checkpointing with
    braeburn's replay, or a ValueError (what was passed, why it cannot work, the fix) when the user asked for
    the reentrant variant, which takes no ``context_fn``.
    """
    if kind.checkpoint_replays_rng(host):
        return given
    kwargs = dict(given or {})
    if kwargs.get("use_reentrant", False):
        raise ValueError(
            f"gradient_checkpointing_kwargs={given!r} on {kind.name}: torch.utils.checkpoint does not replay the "
            f"{kind.name} random state, so the recomputed forward draws new dropout masks and the gradients are "
            "silently wrong; braeburn replays it only with non-reentrant checkpointing. Pass "
            'gradient_checkpointing_kwargs={"use_reentrant": false} (or leave it unset), or turn '
            "gradient_checkpointing off")
    if "context_fn" in kwargs:
        raise ValueError(f"gradient_checkpointing_kwargs has its own context_fn on {kind.name}, where braeburn needs "
                         f"context_fn to replay the {kind.name} random state in the recompute; remove it, or turn "
                         "gradient_checkpointing off")
    kwargs["use_reentrant"] = False
    kwargs["context_fn"] = replay_rng_context_fn(kind)
    return kwargs


def refuse_compile_with_replay(model: Any, gradient_checkpointing: bool, kind: DeviceKind, host: HostFacts,
                               compile_asked: bool) -> None:
    """ValueError (why, and the fix) for compile=True with checkpointing that braeburn must replay on ``kind``."""
    from ..accelerator.checkpoint_replay import checkpointed_layers, compile_conflict

    if not compile_asked or kind.checkpoint_replays_rng(host):
        return
    if gradient_checkpointing:
        raise ValueError(compile_conflict(kind, "gradient_checkpointing=True"))
    if checkpointed_layers(model):
        raise ValueError(compile_conflict(kind, f"turned on on {type(model).__name__}'s own layers"))


def enable_checkpointing(model: Any, kwargs: dict | None) -> None:
    """Turn checkpointing on as the Transformers Trainer does: ``activation_checkpointing_enable`` where the model has
    it (Transformers 5.23+, whose ``gradient_checkpointing_enable`` warns that it is deprecated), else
    ``gradient_checkpointing_enable`` (older Transformers, PEFT and other models that define only that name)."""
    if callable(getattr(model, "activation_checkpointing_enable", None)):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif callable(getattr(model, "gradient_checkpointing_enable", None)):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise ValueError(f"gradient_checkpointing=True, but {type(model).__name__} has no "
                         "gradient_checkpointing_enable(); wrap your blocks in torch.utils.checkpoint.checkpoint "
                         "instead, or pass --gradient_checkpointing false")


def prepare_model_options(model: Any, config: Any, kind: DeviceKind, host: HostFacts, compile_asked: bool = False) -> None:
    """gradient_checkpointing (with the random-state replay ``kind`` needs; ``compile_asked``: compile=True, refused
    where that replay is needed) and tf32, applied before training."""
    import torch

    refuse_compile_with_replay(model, config.gradient_checkpointing, kind, host, compile_asked)
    if config.gradient_checkpointing:
        enable_checkpointing(model, checkpointing_kwargs(config.gradient_checkpointing_kwargs, kind, host))
    if config.tf32 is not None:
        torch.set_float32_matmul_precision("high" if config.tf32 else "highest")
