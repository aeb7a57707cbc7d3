"""Python's garbage collector during training: what exists once the first step has run is frozen.

A full (oldest-generation) collection walks every object Python tracks, ~550,000 in a GPT-2 run with Transformers
and torch loaded, and took 200-260 ms on each of 4 FSDP ranks, each at its own step, so the other ranks waited at
their next collective. The model, the optimizer and the libraries exist for the whole run: ``gc.freeze()`` after
the first step moves them out of the collector's reach, and later collections walk only what the run made since.
On 4 H200s the slowest FSDP step went from 337 to 107 ms (docs/benchmarks.md). Freezing costs one young-generation
collection and no walk of the heap; nothing is collected differently after training, when the heap is unfrozen.
A process that froze or disabled the collector itself is left as it is.
"""

from __future__ import annotations

import gc


class FrozenSetup:
    """Freezes the heap once (``after_first_step``) and unfreezes it when training ends (``release``)."""

    def __init__(self) -> None:
        self.pending = True  # read every step: one attribute, no call once done
        self._froze = False

    def after_first_step(self) -> None:
        self.pending = False
        if gc.get_freeze_count() or not gc.isenabled():  # the user manages the collector: leave it
            return
        gc.collect(1)  # the setup's young garbage, so that it is not kept for the run
        gc.freeze()
        self._froze = True

    def release(self) -> None:
        if self._froze:
            gc.unfreeze()
            self._froze = False
        self.pending = True
