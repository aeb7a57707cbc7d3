"""Python's garbage collector during training: what exists once the first step has run is frozen.

A full (oldest-generation) collection walks every object Python tracks, ~550,000 in a GPT-2 run with Transformers
and torch loaded, and took 200-280 ms on each of 4 FSDP ranks, each at its own step, so the other ranks waited at
their next collective. The model, the optimizer and the libraries exist for the whole run: ``gc.freeze()`` after
the first step moves them out of the collector's reach, and later collections walk only what the run made since.
On 4 H200s the slowest FSDP step went from 337 to 107 ms (docs/benchmarks.md). Freezing costs one young-generation
collection and no walk of the heap; nothing is collected differently after training, when the heap is unfrozen.
A process that froze or disabled the collector itself is left as it is; ``freeze_heap=False`` turns it off.

What it costs: an object alive when the first step ends that later becomes garbage in a reference cycle (or cyclic
garbage that had already aged into the oldest generation) is not collected, not even by an explicit
``gc.collect()``, until training ends.
"""

from __future__ import annotations

import gc
import sys

# CPython 3.12 moves the interpreter's GC-tracked immortal objects into the permanent generation at a full
# collection (375 of them in 3.12.1 and 3.12.3, whatever is imported), so gc.get_freeze_count() is not 0 there though
# nobody froze anything. A freeze of a real heap holds over 10,000 objects even in a bare interpreter.
IMMORTAL_SLACK = 1000 if sys.version_info[:2] == (3, 12) else 0


def frozen_by_someone() -> bool:
    """Whether something in this process froze the heap (the user, a library): braeburn then leaves it alone."""
    return gc.get_freeze_count() > IMMORTAL_SLACK


class FrozenSetup:
    """Freezes the heap once (``after_first_step``) and unfreezes it when training ends (``release``)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled  # the config's freeze_heap
        self.pending = enabled  # read every step: one attribute, no call once done
        self._froze = False

    def after_first_step(self) -> None:
        self.pending = False
        if frozen_by_someone() or not gc.isenabled():  # the user manages the collector: leave it
            return
        gc.collect(1)  # the setup's young garbage, so that it is not kept for the run
        gc.freeze()
        self._froze = True

    def release(self) -> None:
        if self._froze:
            gc.unfreeze()
            self._froze = False
        self.pending = self.enabled
