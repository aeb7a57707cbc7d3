"""auto_find_batch_size: halve per_device_train_batch_size after an out-of-memory error until a step fits,
before training and during it (:meth:`AutoBatchMixin._train_through_out_of_memory`). A mixin of
:class:`braeburn.trainer.loop.Trainer`: halving during training changes the loop's own state (its window, its
samples per batch), as only the Trainer's methods may.

Built on ``braeburn.data.batch_size.find_batch_size`` (which recognises every device kind's out-of-memory
error). Each try runs one forward and backward pass on real training samples; the optimizer state
that AdamW adds at its first step (two tensors per parameter) is not part of the try, so leave some
headroom. RNG states are restored after the tries, so they do not change the run that follows.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import default_collate

from ..checkpoints import state as state_io
from ..data.batch_size import BatchSizeError, find_batch_size, free_memory, is_out_of_memory
from ..data.loader import cast_float64, move_to_device


class AutoBatchMixin:
    """The batch size that fits, found before training and halved during it (see the module doc)."""

    def _find_train_batch_size(self) -> int:
        """The largest batch, from the configured size down by halving, whose training step fits in memory."""
        return _find_train_batch_size(self)

    def _train_through_out_of_memory(self, loader: Any) -> None:
        """``self._train_epochs(loader)``; with auto_find_batch_size, an out-of-memory error in a training
        forward or backward halves the batch and goes on, as Transformers' find_executable_batch_size does.

        Unlike Transformers (which restarts training at the smaller size), the run continues from its last
        optimizer step: the weights and optimizer state are those of that step (the failed window only left
        gradients, which are dropped), the data goes on from the same sample, and gradient_accumulation_steps
        doubles, so a step still takes the same samples (for an even batch) and the schedule is unchanged.
        """
        while True:
            try:
                self._train_epochs(loader)
                return
            except Exception as error:  # noqa: BLE001 - anything but a recoverable out-of-memory is re-raised
                why_not = _why_not_halve(self, error)
                if why_not == _NOT_OOM:
                    raise
                reason = f"{type(error).__name__}: {str(error)[:200]}"
                if why_not is not None:
                    raise BatchSizeError(_cannot_halve_message(self, reason, why_not)) from error
            # Outside the except block: until it ends, the traceback keeps the failed step's tensors alive.
            free_memory(self.accelerator.plan.device)
            self._halve(loader, reason)

    def _halve(self, loader: Any, reason: str) -> None:
        config, acc, state = self.config, self.accelerator, self.state
        old_batch, old_accumulation = config.per_device_train_batch_size, config.gradient_accumulation_steps
        new_batch, new_accumulation = old_batch // 2, old_accumulation * 2
        self.optimizer.zero_grad(set_to_none=True)  # the failed window's partial gradients
        self._window_has_grads = False
        epoch = loader.epoch  # the epoch running (state.epoch is fractional, as in Transformers)
        batches_done = min((state.global_step - epoch * state.steps_per_epoch) * old_accumulation, len(loader))
        loader.rebatch(new_batch)
        loader.load_state_dict({"epoch": epoch, "batches_yielded": batches_done * old_batch // new_batch})
        acc.restart_accumulation(new_accumulation)
        config.per_device_train_batch_size, config.gradient_accumulation_steps = new_batch, new_accumulation
        state.per_device_train_batch_size, state.gradient_accumulation_steps = new_batch, new_accumulation
        self._samples_per_batch = new_batch * acc.num_processes
        acc.print(f"braeburn: warning: out of memory in training step {state.global_step + 1} at "
                  f"per_device_train_batch_size={old_batch} ({reason}); auto_find_batch_size continues from step "
                  f"{state.global_step} with per_device_train_batch_size={new_batch} and gradient_accumulation_steps="
                  f"{new_accumulation} (was {old_accumulation}), so each optimizer step takes "
                  f"{new_batch * new_accumulation * acc.num_processes} samples; the partial step was dropped and its "
                  "batches are trained on again.")


def _find_train_batch_size(trainer: Any) -> int:
    config, acc = trainer.config, trainer.accelerator
    model = trainer.prepared_model()
    dataset, collate = trainer.train_dataset, trainer.collate_fn or default_collate
    kind = acc.plan.device
    saved_rng = state_io.rng_state(kind)
    announced: set[str] = set()

    def try_step(batch_size: int) -> None:
        samples = [dataset[i] for i in range(min(batch_size, len(dataset)))]
        batch = collate(samples)
        reason = acc._float64_batch_reason()  # the prepared loader's rule: its device, and the model's dtype
        if reason:
            batch = cast_float64(batch, announced, reason)
        batch = move_to_device(batch, acc.device)
        model.train()
        trainer.forward_loss(model, batch).backward()
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


_NOT_OOM = "not an out-of-memory error of an auto_find_batch_size run"


def _why_not_halve(trainer: Any, error: BaseException) -> str | None:
    """None when the batch can be halved: an out-of-memory error of a training forward or backward (not of
    the optimizer step, which may have updated part of the weights, nor of an evaluation), on one process,
    at a batch above 1. Otherwise why not."""
    config, acc = trainer.config, trainer.accelerator
    if not (config.auto_find_batch_size and is_out_of_memory(error, acc.plan.device)):
        return _NOT_OOM
    where = _called_from_loop(error.__traceback__)
    if where not in ("forward_loss", "backward"):
        return (f"it happened in {where or 'the training loop'}, not in a training forward or backward, so the "
                "weights may be part-updated or a smaller training batch would not help")
    if acc.num_processes > 1:
        return (f"this run has {acc.num_processes} processes, and the others are waiting in a collective for "
                "this one")
    if config.per_device_train_batch_size == 1:
        return "the batch is 1 already"
    return None


def _cannot_halve_message(trainer: Any, reason: str, why_not: str) -> str:
    last = trainer.state.last_checkpoint
    resume = (f"Resume from the last checkpoint with --resume_from_checkpoint {last}" if last else
              "No checkpoint was saved before it; train again")
    return (f"Out of memory in training step {trainer.state.global_step + 1} at per_device_train_batch_size="
            f"{trainer.config.per_device_train_batch_size} ({reason}). auto_find_batch_size cannot halve the batch "
            f"and go on: {why_not}. {resume}, with a smaller --per_device_train_batch_size (and a larger "
            "--gradient_accumulation_steps to keep the samples a step).")


def _called_from_loop(traceback: Any) -> str | None:
    """The name of the function the training loop was running when ``traceback`` began: the one ``_train_epochs``
    called, or within a micro-batch (``_micro_batch``: a peer's routing, then braeburn's) the one the innermost
    ``_micro_batch`` called."""
    where = None
    while traceback is not None:
        if traceback.tb_frame.f_code.co_name in ("_train_epochs", "_micro_batch") and traceback.tb_next is not None:
            where = traceback.tb_next.tb_frame.f_code.co_name
        traceback = traceback.tb_next
    return where
