"""The Trainer's checkpoints: when a step is saved, the snapshot taken on the training thread and written in the
background (or written now: several processes, FSDP, a snapshot too large to hold), rotation and on_save once
it is on disk, and the save at the end of the loop. A mixin of :class:`braeburn.trainer.loop.Trainer`; it uses
the Trainer's accelerator, checkpoint manager, background saver, callbacks, state and phase clock.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .background_save import BackgroundSaver, Snapshot
from .checkpoint import CheckpointError
from .phase_clock import CHECKPOINT, WRITE_WAIT
from .state import TrainerState

_KEEP = object()  # _after_save: leave state.last_checkpoint as it is


class SavingMixin:
    """_save() and what it needs; _save_at_stop() at the end of the loop."""

    def _save(self) -> None:
        state = self.state
        state.should_save = False
        if state.last_checkpoint and Path(state.last_checkpoint).name == f"checkpoint-{state.global_step}":
            self._name_best()
            return  # this step is saved already
        with self._phases.timed(CHECKPOINT):
            self._save_now()

    def _save_now(self) -> None:
        state = self.state
        self._check_finite()  # never save weights that a NaN step has spoiled
        self._name_best()  # before the write, so that the checkpoint's own state names it
        files = self._checkpoint_files()
        snapshot = self._snapshot_for_background(files)
        if snapshot is not None:  # a thread writes the snapshot while training goes on (background_save.py)
            previous, state.last_checkpoint = state.last_checkpoint, str(self.output_dir / f"checkpoint-{state.global_step}")
            saved = copy.deepcopy(state)  # on_save, when the write completes, sees the step that was saved
            self._saver.submit(snapshot, state, lambda folder, error: self._after_save(folder, error, previous, saved),
                               files)
            if self._save_is_watched:  # written before training goes on, so that on_save follows the save
                self._saver.wait()
            return
        try:
            folder = self.checkpoints.save(self.accelerator, state, files)
        except CheckpointError as error:  # keep training: the previous checkpoint is intact
            self._after_save(None, error)
            return
        self._after_save(folder, None)

    def _name_best(self) -> None:
        """This step's checkpoint becomes best_checkpoint when its evaluation was the best (evaluation.py)."""
        if self._best_step == self.state.global_step:
            self._best_before = self.state.best_checkpoint
            self.state.best_checkpoint = str(self.output_dir / f"checkpoint-{self.state.global_step}")

    def _checkpoint_files(self) -> dict[str, bytes]:
        """Files that every checkpoint holds beside the training state, by name: none here. A hook: the Transformers
        Trainer adds a Transformers model's config.json and the tokenizer's files, so the folder loads with
        ``from_pretrained``."""
        return {}

    @property
    def _save_is_watched(self) -> bool:
        """Whether user code runs at each checkpoint (an on_save, a save_model override), so that the write must
        complete before training goes on. A hook: never here (on_save follows a background write when it ends);
        the Transformers Trainer says when a user's callback or subclass watches."""
        return False

    def _checkpoint_written(self, folder: Path) -> None:
        """A checkpoint is on disk, before on_save. A hook: nothing here; the Transformers Trainer calls a subclass's
        save_model into the folder, as Transformers' checkpoint does."""

    def _final_model_names(self) -> list[str]:
        """The names a save of the final model writes into output_dir, which the run checks are free or braeburn's
        before it starts: none here (braeburn's own Trainer has no save_model()). A hook: the Transformers
        Trainer's save_model() writes model.safetensors, training_args.bin, config.json, the tokenizer's files."""
        return []

    def _snapshot_for_background(self, files: dict[str, bytes]) -> Snapshot | None:
        acc = self.accelerator
        if not self.config.save_in_background or acc.num_processes > 1 or acc.plan.strategy == "fsdp":
            return None
        self._saver.wait()  # one save in flight at a time
        snapshot = Snapshot(acc)
        if BackgroundSaver.fits(snapshot):
            return snapshot
        self._saver.submit(snapshot, self.state, lambda folder, error: self._after_save(folder, error), files)
        self._saver.wait()  # too large to hold while training: written now, from the snapshot taken
        return None

    def _after_save(self, folder: Path | None, error: BaseException | None, previous: Any = _KEEP,
                    saved: TrainerState | None = None) -> None:
        """A checkpoint is on disk (or failed): rotate the old ones and tell the callbacks, with the state
        ``saved`` (a background save completes steps later: its callbacks see the step it saved)."""
        if error is not None:
            if not isinstance(error, CheckpointError):
                raise error
            self._save_log.record(error)
            if previous is not _KEEP:  # a background save failed: the last checkpoint is the one before
                self.state.last_checkpoint = previous
            best = self.state.best_checkpoint
            if best is not None and not Path(best).is_dir():  # never name a folder that was not written
                self.state.best_checkpoint = self._best_before
            self.accelerator.print(f"braeburn: warning: {error}")
            return
        self._save_log.record(None)
        self._checkpoint_written(folder)
        if self.is_main_process:
            self.checkpoints.rotate(keep=self.state.best_checkpoint, run_id=self.state.run_id)
        self.callbacks.on_save(self, saved if saved is not None else self.state, folder)

    def _save_at_stop(self) -> None:
        """The end of the loop saves (unless save_strategy="no"); so does a stop asked with save=True (signals).
        A save still writing in the background is waited for first: if it failed, this step is written again
        (the last checkpoint matters most), every time, not only when its failure happened to be seen in time."""
        if self.state.should_save or self.config.save_strategy != "no":
            with self._phases.timed(WRITE_WAIT):
                self._saver.wait()
            self._save()
