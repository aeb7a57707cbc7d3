"""SIGINT (Ctrl-C) and SIGTERM (what schedulers send before a kill): save a checkpoint, then exit.

The handler only sets a flag; the loop sees it after the current optimizer step, saves a checkpoint
and ends with :class:`TrainingInterrupted`, whose message says how to resume. A second Ctrl-C while
that happens stops at once (the checkpoint being written is atomic, so nothing is half-saved).

With several processes the ranks must stop at the same step: the stop checkpoint is written by all of
them together, and a rank that ran one step further would wait in that step's all-reduce for a peer
that is saving. So the ranks agree (:class:`StopAgreement`): every step each rank adds its flag to an
all-reduce on a small CPU (gloo) group, started without waiting and read one step later, when it is
done. A signal on any rank thus stops every rank at the same step, one step after it arrived, at the
cost of no device sync (and on the CPU no wait).
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..distributed import process_group as pg
from ..plan.option_spelling import option
from .callbacks import Callback
from .state import TrainerState

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer

HANDLED = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(SystemExit):
    """Raised by ``Trainer.train`` after a signal: exit status 128 + the signal number."""

    def __init__(self, signum: int, message: str, checkpoint: str | None):
        self.signum, self.message, self.checkpoint = signum, message, checkpoint
        super().__init__(128 + signum)

    def __str__(self) -> str:
        return self.message


def stop_message(signum: int, step: int, checkpoint: str | None) -> str:
    """What a run stopped by ``signum`` at ``step`` says: the checkpoint, and how the caller resumes it."""
    resume = (f"Checkpoint: {checkpoint}. Resume with {option('resume_from_checkpoint', checkpoint)} (or "
              f"{option('resume_from_checkpoint', 'latest')}), with the same script and options." if checkpoint
              else "No checkpoint was written: the save warnings above say why.")
    return f"braeburn: stopped by {signal.Signals(signum).name} at step {step}. {resume}"


class StopAgreement:
    """The largest signal number any rank received, agreed by all ranks at the same step.

    :meth:`exchange` at the end of step N starts an all-reduce (MAX) of this rank's signal number and
    returns the result of the one started at step N-1 (on a CPU run finished by then, as the ranks met
    in step N's gradient all-reduce since; on GPUs at most a wait for a peer's host to finish queueing
    step N). All ranks call it at every step, so they read the same value at the same step.
    :meth:`settle` at the end of the loop (reached by every rank at the same step) reads the last one
    and asks once more, blocking, for a signal that came during the last step.
    """

    def __init__(self, group: Any):
        self.group = group
        self._pending: tuple[Any, torch.Tensor] | None = None

    def exchange(self, signum: int | None) -> int | None:
        agreed = self._collect()
        flag = torch.tensor([signum or 0], dtype=torch.int32)  # a CPU tensor on a gloo group: no device sync
        self._pending = (dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True), flag)
        return agreed

    def settle(self, signum: int | None) -> int | None:
        agreed = self._collect()
        flag = torch.tensor([signum or 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return max(agreed or 0, int(flag)) or None

    def _collect(self) -> int | None:
        if self._pending is None:
            return None
        work, flag = self._pending
        self._pending = None
        work.wait()
        return int(flag) or None


class SignalCallback(Callback):
    """Turns SIGINT/SIGTERM into 'save and stop' while ``train()`` runs, and until its last checkpoint is on disk;
    :meth:`restore` puts the old handlers back after that."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}
        self._agreement: StopAgreement | None = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self.received = signum

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        self.received = None
        several = trainer.accelerator.num_processes > 1 and pg.is_initialized()
        self._agreement = StopAgreement(pg.host_group()) if several else None  # every rank calls it here
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may install handlers
        for signum in HANDLED:
            self._previous[signum] = signal.signal(signum, self._handle)

    def on_step_end(self, trainer: "Trainer", state: TrainerState) -> None:
        signum = self.received if self._agreement is None else self._agreement.exchange(self.received)
        if signum is not None:
            self._stop_for(signum, state)

    def settle(self, state: TrainerState) -> None:
        """After the loop ended normally (every rank at the same step): agree on a signal of the last step."""
        if self._agreement is not None:
            self._stop_for(self._agreement.settle(self.received), state)
            self._agreement = None

    def _stop_for(self, signum: int | None, state: TrainerState) -> None:
        if signum is None:
            return
        self.received = self.received or signum  # a rank the signal did not reach stops (and exits) as its peers
        if not state.should_stop:
            state.request_stop(f"{signal.Signals(signum).name} received", save=True)

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        self._agreement = None  # after an error a peer may be gone: never wait on it here
        # The handlers stay until restore(): the last checkpoint may still be written in the background, and a
        # scheduler's SIGTERM in that window must not kill the process before it is on disk.

    def restore(self) -> None:
        """Put back the handlers found at on_train_begin; the Trainer calls it once the last save is on disk."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
