"""Find the largest batch size that fits: grow while it fits, halve on out-of-memory.

Usable alone::

    from braeburn.data.batch_size import find_batch_size

    def try_step(batch_size: int) -> None:   # one full training step at this size
        x = torch.randn(batch_size, 512, device=device)
        model(x).sum().backward()
        model.zero_grad(set_to_none=True)

    best = find_batch_size(try_step, start=32, max_batch=4096, device_kind=plan.device)

and by the Trainer (``TrainingConfig.auto_find_batch_size``): pass a ``try_step`` that runs one
forward, backward and optimizer step at the given batch size (on throwaway copies of the weights
and optimizer state if the real ones must not move), the configured batch size as ``start`` and the
plan's device kind. Out-of-memory errors of every registered device kind are recognised (CUDA's
"CUDA out of memory", MPS's "MPS backend out of memory" and Metal's per-buffer "Invalid buffer size",
the CPU allocator's "can't allocate memory", Python's MemoryError); any other error propagates
unchanged.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from ..devices.base import DeviceKind
from ..devices.registry import KINDS

__all__ = ["BatchSizeError", "find_batch_size", "is_out_of_memory"]


class BatchSizeError(RuntimeError):
    """Not even the smallest batch fits."""


def is_out_of_memory(error: BaseException, device_kind: DeviceKind | None = None) -> bool:
    """True when ``error`` says some memory ran out: asks ``device_kind`` and every registered kind.

    All kinds are asked because a step on an accelerator can also exhaust host memory (pinned
    buffers, a CPU-side copy), and the error text is what tells them apart.
    """
    if isinstance(error, MemoryError):
        return True
    try:
        import torch

        if isinstance(error, getattr(torch, "OutOfMemoryError", ())):
            return True
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass
    kinds = ((device_kind,) if device_kind is not None else ()) + KINDS
    return any(kind.is_out_of_memory(error) for kind in kinds)


def free_memory(device_kind: DeviceKind | None = None) -> None:
    """Drop unreachable tensors (the failed try's activations) and return cached device memory."""
    gc.collect()
    if device_kind is not None:
        device_kind.empty_cache()


FITS, OUT_OF_MEMORY, PAGES = "fits", "out of memory", "pages"


def _try(try_step: Callable[[int], None], batch: int, device_kind: DeviceKind | None) -> str:
    """FITS, OUT_OF_MEMORY, or PAGES: it ran, but held more memory than the device keeps without
    paging (``device_kind.memory_beyond_comfort()``, read before cached memory is given back)."""
    outcome = FITS
    try:
        try_step(batch)
    except Exception as error:  # noqa: BLE001 - anything but out-of-memory is re-raised
        if not is_out_of_memory(error, device_kind):
            raise
        outcome = OUT_OF_MEMORY
    if outcome == FITS and device_kind is not None and device_kind.memory_beyond_comfort():
        outcome = PAGES
    # Freed outside the except block: until it ends, the traceback keeps the failed try's
    # frames (and their tensors) alive.
    free_memory(device_kind)
    return outcome


def _check_arguments(start: int, max_batch: int) -> None:
    for name, value in (("start", start), ("max_batch", max_batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"find_batch_size({name}={value!r}): a batch size must be a whole number >= 1; "
                             f"pass e.g. {name}=8")
    if max_batch < start:
        raise ValueError(f"find_batch_size(start={start}, max_batch={max_batch}): max_batch is below start, so "
                         f"no size can be tried; pass max_batch >= {start} or a smaller start")


def find_batch_size(try_step: Callable[[int], None], start: int = 8, max_batch: int = 4096,
                    device_kind: DeviceKind | None = None,
                    on_try: Callable[[int, bool], None] | None = None) -> int:
    """The largest batch size, among ``start`` times powers of two (and ``max_batch``), that fits.

    ``try_step(batch_size)`` runs one training step at that size and returns nothing; it should
    raise the device's out-of-memory error when the size does not fit. Starting at ``start``, the
    size doubles while a step fits (never beyond ``max_batch``); once a step runs out of memory, the
    last size that fitted is the answer. If ``start`` itself does not fit, the size halves until one
    fits. A size that ran but held more memory than the device keeps without paging (on MPS: above
    the recommended working set, which torch's limit exceeds 1.7 times) counts as not fitting; if
    even 1 pages, 1 is returned. Between tries, garbage is collected and
    ``device_kind.empty_cache()`` returns cached memory. ``on_try(batch_size, fitted)`` is called after every try (for progress output).

    Raises :class:`BatchSizeError` when not even a batch of 1 fits, ``ValueError`` for bad
    arguments, and re-raises any error that is not out-of-memory.
    """
    _check_arguments(start, max_batch)
    batch, best, ceiling = start, None, max_batch + 1  # ceiling: the smallest size known not to fit
    while True:
        outcome = _try(try_step, batch, device_kind)
        fitted = outcome == FITS
        if on_try is not None:
            on_try(batch, fitted)
        if fitted:
            best = batch
            if min(batch * 2, max_batch) >= ceiling or batch >= max_batch:
                return batch
            batch = min(batch * 2, max_batch)
        elif best is not None:
            return best
        elif batch == 1 and outcome == PAGES:
            return 1  # it runs, only slower: better than no batch at all
        elif batch == 1:
            where = device_kind.name if device_kind is not None else "device"
            raise BatchSizeError(f"find_batch_size: even a batch of 1 runs out of {where} memory (tried "
                                 f"{start} down to 1). Shrink the model or the sequence/image size, use mixed "
                                 "precision or gradient checkpointing, or train on a device with more memory")
        else:
            ceiling, batch = batch, batch // 2
