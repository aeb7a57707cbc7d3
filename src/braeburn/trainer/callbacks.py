"""Typed callback hooks. Subclass :class:`Callback` and override the hooks you need.

Every hook receives the Trainer and its :class:`TrainerState`; a hook stops the run with
``state.request_stop(reason)``. Registering an object with an ``on_*`` method that is not a hook
(a typo such as ``on_epoch_ended``) is an error, so a misspelled hook never silently does nothing.
"""

from __future__ import annotations

import difflib
import inspect
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .state import TrainerState

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer


class Callback:
    """Base class: every hook is a no-op."""

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        """After setup (and resume), before the first step."""

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        """After the last step, the final save and the summary (also after a stop)."""

    def on_epoch_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        """Before an epoch's first batch (``state.epoch``, the epochs done, is a whole number here)."""

    def on_epoch_end(self, trainer: "Trainer", state: TrainerState) -> None:
        """After an epoch's last batch (``state.epoch`` counts it: 1.0 after the first epoch)."""

    def on_step_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        """Before the first micro-batch of each optimizer step. Runs every step: keep it cheap."""

    def on_optimizer_step(self, trainer: "Trainer", state: TrainerState) -> None:
        """Right after the optimizer stepped, before the schedule steps and ``global_step`` counts it."""

    def on_step_end(self, trainer: "Trainer", state: TrainerState) -> None:
        """After each optimizer step. Runs every step: keep it cheap and never read a device tensor."""

    def on_log(self, trainer: "Trainer", state: TrainerState, logs: dict[str, float]) -> None:
        """When the loss and learning rate were read (every logging_steps) or eval metrics arrived."""

    def on_evaluate(self, trainer: "Trainer", state: TrainerState, metrics: dict[str, float]) -> None:
        """After an evaluation, with its metrics (keys start with ``eval_``)."""

    def on_save(self, trainer: "Trainer", state: TrainerState, checkpoint_dir: Path) -> None:
        """After a checkpoint was written completely to ``checkpoint_dir``."""


HOOKS: tuple[str, ...] = tuple(name for name in vars(Callback) if name.startswith("on_"))
# The hooks called at every step. A callback may name those it has nothing to do in for the run that starts, in a
# method ``idle_hooks()`` asked after its on_train_begin (braeburn's own callbacks: the step breakdown when it does
# not sample, the options callback when no option acts between steps); the step does not call them in that run.
STEP_HOOKS: tuple[str, ...] = ("on_step_begin", "on_optimizer_step", "on_step_end")


def takes_transformers_hooks(cls: type, hooks: tuple[str, ...] | list[str]) -> bool:
    """Whether ``cls`` is a callback written for the Transformers Trainer: a TrainerCallback (Transformers' or
    braeburn.TrainerCallback), or its first of ``hooks`` takes ``(args, state, control)`` as Transformers' do."""
    if any(base.__name__ == "TrainerCallback" for base in cls.__mro__):
        return True
    for hook in hooks:
        method = getattr(cls, hook, None)
        if callable(method):
            try:
                return list(inspect.signature(method).parameters)[1:4] == ["args", "state", "control"]
            except (TypeError, ValueError):  # no signature to read (a builtin)
                return False
    return False


def check_callback(callback: Any) -> None:
    """Refuse a callback written for the Transformers Trainer (braeburn.Trainer runs those), classes instead of
    instances, and ``on_*`` methods that are not hooks."""
    cls = callback if isinstance(callback, type) else type(callback)
    if not issubclass(cls, Callback) and takes_transformers_hooks(cls, [n for n in dir(cls) if n.startswith("on_")]):
        raise TypeError(f"{cls.__name__} is a Transformers-style callback (a TrainerCallback, whose hooks take args, "
                        "state, control), which braeburn's core Trainer (braeburn.trainer.loop.CoreTrainer) does not "
                        "run: use braeburn.Trainer (from braeburn import Trainer), which runs it where Transformers "
                        "does, or write it as a braeburn.trainer.Callback.")
    if isinstance(callback, type):
        raise TypeError(f"callbacks takes instances; {callback.__name__} is a class. Pass {callback.__name__}().")
    for name in dir(callback):
        if name.startswith("on_") and name not in HOOKS and callable(getattr(callback, name, None)):
            close = difflib.get_close_matches(name, HOOKS, n=1)
            hint = f"did you mean {close[0]}?" if close else f"the hooks are {', '.join(HOOKS)}"
            raise TypeError(f"{type(callback).__name__}.{name} is not a Trainer hook, so it would never run; "
                            f"{hint} (rename it, or drop the on_ prefix if it is a helper)")


def _idle(handler: Any, hook: str) -> bool:
    """Whether the callback of ``handler`` says ``hook`` has nothing to do in this run (its ``idle_hooks()``). A
    subclass that overrides ``hook`` below the class whose ``idle_hooks`` answers (a user's subclass of a built-in
    callback) may have work there that answer does not know of: its hook is called."""
    callback = getattr(handler, "__self__", None)
    idle_hooks = getattr(callback, "idle_hooks", None)
    if not callable(idle_hooks) or hook not in idle_hooks():
        return False
    mro = type(callback).__mro__
    answers = mro[0] if "idle_hooks" in getattr(callback, "__dict__", ()) else next(  # (one set on the instance)
        (k for k in mro if "idle_hooks" in vars(k)), None)
    defines = next((k for k in mro if hook in vars(k)), None)
    return answers is not None and defines is not None and issubclass(answers, defines)


class CallbackList:
    """The registered callbacks, called in order. Hooks a callback leaves as no-ops cost nothing."""

    def __init__(self, callbacks: list[Any] | tuple[Any, ...] = ()):
        self.callbacks: list[Any] = []
        self._handlers: dict[str, list[Any]] = {hook: [] for hook in HOOKS}  # called: less a run's idle step hooks
        self._registered: dict[str, list[Any]] = {hook: [] for hook in HOOKS}  # every real hook of every callback
        for callback in callbacks:
            self.add(callback)

    def add(self, callback: Any) -> None:
        check_callback(callback)
        self.callbacks.append(callback)
        for hook in HOOKS:
            method = getattr(callback, hook, None)
            # Skip inherited no-ops so that the per-step dispatch loops over real work only.
            if method is not None and getattr(type(callback), hook, None) is not getattr(Callback, hook):
                self._registered[hook].append(method)
                self._handlers[hook].append(method)  # added mid-run: called from the next step on

    def find(self, kind: type) -> Any | None:
        return next((c for c in self.callbacks if isinstance(c, kind)), None)

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        for handler in self._handlers["on_train_begin"]:
            handler(trainer, state)
        for hook in STEP_HOOKS:  # each run starts from every registered hook, less those idle in it
            self._handlers[hook] = [handler for handler in self._registered[hook] if not _idle(handler, hook)]

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        """Every hook runs, even after one failed (they close files and restore signal handlers); the first
        failure is raised after the last hook, the others are printed."""
        failures: list[BaseException] = []
        for handler in self._handlers["on_train_end"]:
            try:
                handler(trainer, state)
            except Exception as error:
                failures.append(error)
        for error in failures[1:]:
            print(f"braeburn: warning: another on_train_end hook failed too: {type(error).__name__}: {error}",
                  file=sys.stderr)
        if failures:
            raise failures[0]

    def on_epoch_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        for handler in self._handlers["on_epoch_begin"]:
            handler(trainer, state)

    def on_epoch_end(self, trainer: "Trainer", state: TrainerState) -> None:
        for handler in self._handlers["on_epoch_end"]:
            handler(trainer, state)

    def on_step_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        for handler in self._handlers["on_step_begin"]:
            handler(trainer, state)

    def on_optimizer_step(self, trainer: "Trainer", state: TrainerState) -> None:
        for handler in self._handlers["on_optimizer_step"]:
            handler(trainer, state)

    def on_step_end(self, trainer: "Trainer", state: TrainerState) -> None:
        for handler in self._handlers["on_step_end"]:
            handler(trainer, state)

    def on_log(self, trainer: "Trainer", state: TrainerState, logs: dict[str, float],
               peer_logs: dict[str, float] | None = None) -> None:
        """``peer_logs``, when given, go to the callbacks written for a peer's Trainer (``peer_view``): the keys that
        peer logs, where braeburn's own callbacks get ``logs`` (with braeburn's extra keys)."""
        for handler in self._handlers["on_log"]:
            peer = peer_logs is not None and getattr(getattr(handler, "__self__", None), "peer_view", False)
            handler(trainer, state, peer_logs if peer else logs)

    def on_evaluate(self, trainer: "Trainer", state: TrainerState, metrics: dict[str, float]) -> None:
        for handler in self._handlers["on_evaluate"]:
            handler(trainer, state, metrics)

    def on_save(self, trainer: "Trainer", state: TrainerState, checkpoint_dir: Path) -> None:
        for handler in self._handlers["on_save"]:
            handler(trainer, state, checkpoint_dir)
