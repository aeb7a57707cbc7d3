"""Checkpoints written off the training loop's critical path (one process).

A checkpoint of a 22M-parameter model with its AdamW state is ~260 MB; writing it, hashing it for
the manifest and fsyncing it took about a second each time on an H100 machine, three seconds of a
30-second MRPC fine-tune. Here the loop only takes a snapshot: every tensor the
Accelerator would write is copied to host memory right at the save step (so the checkpoint holds
exactly the state a synchronous save would; ``braeburn.checkpoints.host_copy``), then a thread serialises,
writes, hashes and publishes it through the same :class:`CheckpointManager` while training goes on.
The snapshot costs a device-to-host copy (a memcpy on the CPU); serialising it there too, as an
earlier version did, cost the training thread about 2 s for GPT-2 small with its AdamW state. At
most one save is in flight: the next save, ``train()``'s end, a resume and an exception all wait
for it first, and a failed background save is reported like a failed foreground
one (a warning; the previous checkpoint stays). Several processes save in the foreground: their
collectives must stay on the main thread.
"""

from __future__ import annotations

import copy
import os
import threading
from pathlib import Path
from typing import Any, Callable

from ..checkpoints import state as state_io
from .checkpoint import CheckpointManager
from .state import TrainerState

MAX_SNAPSHOT_SHARE = 0.25  # of the machine's memory: larger snapshots are written in the foreground


class Snapshot:
    """The files ``accelerator.save_state`` would write, as host copies of one moment's state (serialised later)."""

    def __init__(self, accelerator: Any):
        with state_io.defer_writes() as files:
            accelerator._write_state(Path("."))
        self.files: dict[str, state_io.DeferredWrite] = files
        self.finish = accelerator._finish_save  # the Accelerator's manifest and publish, as in save_state

    @property
    def size(self) -> int:
        return sum(file.nbytes for file in self.files.values())


class _Replay:
    """Stands in for the Accelerator inside :meth:`CheckpointManager.save`: writes the captured bytes."""

    is_main_process = True

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot

    def save_state(self, output_dir: str) -> None:
        staging = state_io.prepare_staging(output_dir)
        for name, file in self.snapshot.files.items():
            file.write(staging / name)  # torch.save (its CRC-32), safetensors and the writes run here, off the loop
        self.snapshot.finish(output_dir)

    def wait_for_everyone(self) -> None:
        """One process: nobody to wait for."""


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not on this system
        return None


class BackgroundSaver:
    """One checkpoint save at a time in a thread; :meth:`wait` hands its outcome back to the main thread."""

    def __init__(self, checkpoints: CheckpointManager):
        self.checkpoints = checkpoints
        self._thread: threading.Thread | None = None
        self._outcome: tuple[Path | None, BaseException | None] = (None, None)
        self._on_done: Callable[[Path | None, BaseException | None], None] | None = None

    @staticmethod
    def fits(snapshot: "Snapshot") -> bool:
        memory = _memory_bytes()
        return memory is None or snapshot.size < MAX_SNAPSHOT_SHARE * memory

    def submit(self, snapshot: Snapshot, state: TrainerState,
               on_done: Callable[[Path | None, BaseException | None], None],
               files: dict[str, bytes] | None = None) -> None:
        self.wait()
        state_copy = copy.deepcopy(state)
        self._on_done = on_done

        def work() -> None:
            try:
                self._outcome = (self.checkpoints.save(_Replay(snapshot), state_copy, files), None)
            except BaseException as error:  # handed to the main thread by wait()
                self._outcome = (None, error)

        # Not a daemon: the interpreter finishes the write before it exits, even after an exception.
        self._thread = threading.Thread(target=work, name="braeburn-checkpoint", daemon=False)
        self._thread.start()

    def poll(self) -> None:
        """If the save in flight has finished, run its completion now (in this thread); never blocks."""
        if self._thread is not None and not self._thread.is_alive():
            self.wait()

    def wait(self) -> None:
        """Block until the save in flight (if any) is on disk, then run its completion in this thread."""
        if self._thread is None:
            return
        self._thread.join()
        self._thread = None
        folder, error = self._outcome
        on_done, self._on_done, self._outcome = self._on_done, None, (None, None)
        if on_done is not None:
            on_done(folder, error)


__all__ = ["BackgroundSaver", "Snapshot"]
