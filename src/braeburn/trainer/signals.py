"""SIGINT (Ctrl-C) and SIGTERM (what schedulers send before a kill): save a checkpoint, then exit.

The handler only sets a flag; the loop sees it after the current optimizer step, saves a checkpoint
and ends with :class:`TrainingInterrupted`, whose message says how to resume. A second Ctrl-C while
that happens stops at once (the checkpoint being written is atomic, so nothing is half-saved).
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

from .callbacks import Callback
from .state import TrainerState

if TYPE_CHECKING:
    from .loop import Trainer

HANDLED = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(SystemExit):
    """Raised by ``Trainer.train`` after a signal: exit status 128 + the signal number."""

    def __init__(self, signum: int, message: str, checkpoint: str | None):
        self.signum, self.message, self.checkpoint = signum, message, checkpoint
        super().__init__(128 + signum)

    def __str__(self) -> str:
        return self.message


class SignalCallback(Callback):
    """Turns SIGINT/SIGTERM into 'save and stop' while ``train()`` runs; restores the old handlers after."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self.received = signum

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        self.received = None
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may install handlers
        for signum in HANDLED:
            self._previous[signum] = signal.signal(signum, self._handle)

    def on_step_end(self, trainer: "Trainer", state: TrainerState) -> None:
        if self.received is not None and not state.should_stop:
            state.request_stop(f"{signal.Signals(self.received).name} received", save=True)

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
