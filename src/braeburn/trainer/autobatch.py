"""auto_find_batch_size: halve per_device_train_batch_size after an out-of-memory error until a step fits.

Built on ``braeburn.batch_size.find_batch_size`` (which recognises every device kind's out-of-memory
error). Each try runs one forward and backward pass on real training samples; the optimizer state
that AdamW adds at its first step (two tensors per parameter) is not part of the try, so leave some
headroom. RNG states are restored after the tries, so they do not change the run that follows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch.utils.data import default_collate

from .. import state as state_io
from ..batch_size import find_batch_size
from ..data import cast_float64, move_to_device

if TYPE_CHECKING:
    from .loop import Trainer


def find_train_batch_size(trainer: "Trainer") -> int:
    """The largest batch, from the configured size down by halving, whose training step fits in memory."""
    config, acc = trainer.config, trainer.accelerator
    model = trainer._model_for_inference()
    dataset, collate = trainer.train_dataset, trainer.collate_fn or default_collate
    kind = acc.plan.device
    saved_rng = state_io.rng_state(kind)
    announced: set[str] = set()

    def try_step(batch_size: int) -> None:
        samples = [dataset[i] for i in range(min(batch_size, len(dataset)))]
        batch = collate(samples)
        if not kind.supports_float64:
            batch = cast_float64(batch, acc.device, announced)
        batch = move_to_device(batch, acc.device)
        model.train()
        trainer._forward_loss(model, batch).backward()
        model.zero_grad(set_to_none=True)

    def report(batch_size: int, fitted: bool) -> None:
        if not fitted:
            acc.print(f"braeburn: per_device_train_batch_size={batch_size} does not fit in {kind.name} memory "
                      "(out of memory, or more than it holds without paging); halving")

    try:
        found = find_batch_size(try_step, start=config.per_device_train_batch_size,
                                max_batch=config.per_device_train_batch_size, device_kind=kind, on_try=report)
    finally:
        state_io.set_rng_state(saved_rng, kind)
    if found != config.per_device_train_batch_size:
        acc.print(f"braeburn: auto_find_batch_size: training with per_device_train_batch_size={found}")
    return found
