"""Transformers-style callbacks on braeburn's Trainer.

A Transformers ``TrainerCallback`` (``on_train_begin(self, args, state, control, **kwargs)``) is
wrapped in :class:`HfCallbackAdapter`: it sees Transformers' view of the state (``state.epoch`` as
a float, ``best_model_checkpoint``, ``is_world_process_zero``), a :class:`TrainerControl` whose
flags the loop obeys (stop, save, evaluate, log), and the keyword arguments Transformers passes
(``model``, ``optimizer``, ``lr_scheduler``, ``train_dataloader``, ``processing_class``, ``logs``,
``metrics``). Both braeburn's :class:`TrainerCallback` and ``transformers.TrainerCallback``
subclasses are recognised. Hooks braeburn cannot call at Transformers' moment
(``on_pre_optimizer_step``, ``on_substep_end``, ``on_prediction_step``) are refused at registration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...trainer.callbacks import Callback, takes_transformers_hooks
from ...trainer.options_callback import OptionsCallback
from ...trainer.state import TrainerState

if TYPE_CHECKING:
    from ...trainer.loop import CoreTrainer as Trainer

HF_HOOKS = ("on_init_end", "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_step_begin",
            "on_optimizer_step", "on_step_end", "on_evaluate", "on_predict", "on_save", "on_log")
REFUSED_HOOKS = {"on_pre_optimizer_step": "runs before the optimizer step",
                 "on_substep_end": "runs after each accumulation micro-batch",
                 "on_prediction_step": "runs after each evaluation batch",
                 "on_push_begin": "runs before a Hub upload"}


@dataclass
class TrainerControl:
    """Transformers' control flags: set one in a hook and the Trainer acts on it."""

    should_training_stop: bool = False
    should_epoch_stop: bool = False
    should_save: bool = False
    should_evaluate: bool = False
    should_log: bool = False


class TrainerCallback:
    """Transformers' callback base class: hooks take ``(args, state, control, **kwargs)``; all are no-ops."""

    def on_init_end(self, args, state, control, **kwargs): ...
    def on_train_begin(self, args, state, control, **kwargs): ...
    def on_train_end(self, args, state, control, **kwargs): ...
    def on_epoch_begin(self, args, state, control, **kwargs): ...
    def on_epoch_end(self, args, state, control, **kwargs): ...
    def on_step_begin(self, args, state, control, **kwargs): ...
    def on_optimizer_step(self, args, state, control, **kwargs): ...
    def on_step_end(self, args, state, control, **kwargs): ...
    def on_evaluate(self, args, state, control, **kwargs): ...
    def on_predict(self, args, state, control, metrics, **kwargs): ...
    def on_save(self, args, state, control, **kwargs): ...
    def on_log(self, args, state, control, logs=None, **kwargs): ...


class HfStateView:
    """braeburn's TrainerState as Transformers' TrainerState reads (attributes not listed pass through)."""

    def __init__(self, trainer: "Trainer"):
        self._trainer = trainer
        self._overrides: dict[str, Any] = {}

    @property
    def _state(self) -> TrainerState:
        return self._overrides.get("state", self._trainer.state)

    @property
    def best_metric(self) -> float | None:
        # During on_evaluate Transformers' best_metric is still the best before this evaluation
        # (it is updated at the save that follows); braeburn updates it first, so the adapter keeps the old one.
        return self._overrides.get("best_metric", self._state.best_metric)


    @property
    def best_model_checkpoint(self) -> str | None:
        return self._state.best_checkpoint

    @property
    def is_world_process_zero(self) -> bool:
        return self._trainer.accelerator.is_main_process

    @property
    def is_local_process_zero(self) -> bool:
        return self._trainer.accelerator.is_local_main_process

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._state, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_trainer", "_overrides"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._state, name, value)


def is_hf_callback(callback: Any) -> bool:
    """True for Transformers-style callbacks: a (braeburn or transformers) TrainerCallback, or hooks taking args."""
    cls = callback if isinstance(callback, type) else type(callback)
    return not issubclass(cls, Callback) and takes_transformers_hooks(cls, HF_HOOKS)


class HfCallbackAdapter(Callback):
    """Calls a Transformers-style callback's hooks from braeburn's, then applies its TrainerControl."""

    peer_view = True  # on_log gets the keys Transformers logs (CallbackList.on_log)

    def __init__(self, inner: Any, trainer: "Trainer"):
        for hook, when in REFUSED_HOOKS.items():
            if _overrides(inner, hook):
                raise TypeError(f"{type(inner).__name__}.{hook} {when}, a moment braeburn's Trainer has no hook "
                                "for, so it would never run; move the code to on_step_end, on_evaluate or on_log")
        self.inner, self.trainer = inner, trainer
        self.control = TrainerControl()
        self.view = HfStateView(trainer)
        self._best_before: float | None = None
        self._in_step_end = False

    def call(self, hook: str, **extra: Any) -> None:
        method = getattr(self.inner, hook, None)
        if method is None:
            return
        trainer = self.trainer
        kwargs = {"model": trainer.model, "processing_class": trainer.processing_class,
                  "optimizer": trainer.optimizer, "lr_scheduler": trainer.lr_scheduler,
                  "train_dataloader": getattr(trainer, "_train_loader", None),
                  "eval_dataloader": None, **extra}
        result = method(trainer.config, self.view, self.control, **kwargs)
        if isinstance(result, TrainerControl) or type(result).__name__ == "TrainerControl":
            self.control = result
        self._obey()

    def _obey(self) -> None:
        control, trainer = self.control, self.trainer
        if control.should_training_stop:
            control.should_training_stop = False
            trainer.state.request_stop(f"{type(self.inner).__name__} set control.should_training_stop")
        if control.should_save:
            control.should_save = False
            trainer.state.should_save = True
        if control.should_log:
            control.should_log = False
            if self._in_step_end:  # the loop logs after every callback's on_step_end, as Transformers does
                trainer.state.should_log = True
            elif trainer.has_unlogged_losses:
                trainer.log_now()
        if control.should_evaluate:
            control.should_evaluate = False
            if trainer.eval_dataset is None:
                pass
            elif self._in_step_end:  # after every callback's on_step_end and the step's log, as Transformers does
                trainer.state.should_evaluate = True
            else:
                trainer.evaluate()

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        self.call("on_train_begin")

    def on_step_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        self.call("on_step_begin")

    def on_optimizer_step(self, trainer: "Trainer", state: TrainerState) -> None:
        self.call("on_optimizer_step")

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        self.call("on_train_end")

    def on_epoch_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        self.call("on_epoch_begin")

    def on_epoch_end(self, trainer: "Trainer", state: TrainerState) -> None:
        self.call("on_epoch_end")

    def on_step_end(self, trainer: "Trainer", state: TrainerState) -> None:
        self._in_step_end = True
        try:
            self.call("on_step_end")
        finally:
            self._in_step_end = False

    def on_log(self, trainer: "Trainer", state: TrainerState, logs: dict[str, float]) -> None:
        self.call("on_log", logs=logs)

    def on_evaluate(self, trainer: "Trainer", state: TrainerState, metrics: dict[str, float]) -> None:
        self.view._overrides["best_metric"] = self._best_before
        try:
            self.call("on_evaluate", metrics=metrics)
        finally:
            self.view._overrides.clear()
            self._best_before = state.best_metric

    def on_save(self, trainer: "Trainer", state: TrainerState, checkpoint_dir: Path) -> None:
        self.view._overrides["state"] = state  # a background save: the state of the step it saved
        try:
            self.call("on_save")
        finally:
            self.view._overrides.pop("state", None)


def _overrides(callback: Any, hook: str) -> bool:
    method = getattr(type(callback), hook, None)
    if method is None:
        return False
    owner = next((c for c in type(callback).__mro__ if hook in vars(c)), None)
    return owner is not None and owner.__name__ != "TrainerCallback"


def watches_saves(callback: Any) -> bool:
    """Whether a user's callback (a Transformers-style one wrapped, or braeburn's) has its own on_save."""
    if isinstance(callback, HfCallbackAdapter):
        return _overrides(callback.inner, "on_save")
    own = getattr(type(callback), "on_save", None)
    return own is not None and own is not Callback.on_save and not type(callback).__module__.startswith("braeburn.")


def adapt_callback(callback: Any, trainer: "Trainer") -> Any:
    """A Transformers-style callback (instance or class, as Transformers takes) wrapped; others as they are."""
    if not is_hf_callback(callback):
        return callback
    if isinstance(callback, type):
        callback = callback()
    return HfCallbackAdapter(callback, trainer)


# The built-in callback for the options that act between steps, under the name it had here before the package was
# laid out by concern (braeburn.trainer.hf_callbacks.HfOptionsCallback): trainer.remove_callback(HfOptionsCallback)
HfOptionsCallback = OptionsCallback

__all__ = ["HfCallbackAdapter", "HfOptionsCallback", "TrainerCallback", "TrainerControl", "adapt_callback",
           "is_hf_callback", "watches_saves"]
