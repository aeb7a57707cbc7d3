"""Transformers' overridable Trainer methods, with Transformers' signatures, done braeburn's way.

Users customise the Transformers Trainer by subclassing it and overriding ``training_step``,
``compute_loss``, ``create_optimizer``, ``create_scheduler``, ``prediction_step``,
``evaluation_loop`` or ``log``. :class:`HfOverridableMixin` gives braeburn's Trainer each of them,
called where Transformers calls them:

- ``create_optimizer()`` then ``create_scheduler(num_training_steps)``: once, when training is set up.
- ``training_step(model, inputs, num_items_in_batch)``: forward and backward of one micro-batch;
  returns the loss divided by the accumulation steps, as Transformers' does.
- ``compute_loss(model, inputs, return_outputs=False, num_items_in_batch=None)``: from the
  training step, and from ``prediction_step`` for the evaluation loss.
- ``evaluation_loop(dataloader, description, ...)`` from ``evaluate()``/``predict()``, which calls
  ``prediction_step(model, inputs, prediction_loss_only, ignore_keys)`` for each batch.
- ``log(logs, start_time)`` for every logging step and evaluation.
- ``get_train_dataloader()`` when training starts; ``get_eval_dataloader(eval_dataset)`` at each evaluation and
  ``get_test_dataloader(test_dataset)`` at each ``predict()``: the loader returned is prepared (on the device)
  unless it is already.
- ``save_model(checkpoint_folder, _internal_call=True)`` at each checkpoint, once it is on disk and before
  ``on_save``; its files join the checkpoint's manifest.

Each default is braeburn's own (the core Trainer's hook). The per-step methods cost nothing when not
overridden: :class:`Overrides` is worked out once per Trainer, and each hook takes braeburn's own path (no
float copy of the logits) unless a subclass replaced ``training_step`` or ``compute_loss``.

braeburn passes ``num_items_in_batch=None``: losses are averaged per batch (docs/migrating.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ...checkpoints import ownership
from ...data.loader import DeviceDataLoader
from ...trainer.batches import batch_inputs, compute_loss
from ...trainer.checkpoint import step_of, write_manifest
from .callbacks import watches_saves
from ...trainer.outputs import EvalLoopOutput
from ...trainer.peer_methods import TRANSFORMERS_OVERRIDABLE

# The methods a subclass may replace (the core Trainer refuses a subclass of its own that defines them);
# Overrides has one flag per name.
OVERRIDABLE = TRANSFORMERS_OVERRIDABLE


@dataclasses.dataclass(frozen=True)
class Overrides:
    """Which of Transformers' overridable methods ``type(trainer)`` replaces (read once, at construction)."""

    training_step: bool = False
    compute_loss: bool = False
    create_optimizer: bool = False
    create_scheduler: bool = False
    prediction_step: bool = False
    evaluation_loop: bool = False
    log: bool = False
    get_train_dataloader: bool = False
    get_eval_dataloader: bool = False
    get_test_dataloader: bool = False
    save_model: bool = False

    @classmethod
    def of(cls, trainer_type: type, base: type) -> Overrides:
        return cls(**{name: getattr(trainer_type, name) is not getattr(base, name) for name in OVERRIDABLE})


class HfOverridableMixin:
    """Transformers' overridable methods of the Trainer (see the module doc). A mixin of ``braeburn.Trainer``: it
    fills the core Trainer's hooks, calling a subclass's override where there is one."""

    peer_methods_called = OVERRIDABLE  # each is called where Transformers calls it
    _micro_batch_steps = 1  # current_gradient_accumulation_steps, as _micro_batch read it for the micro-batch in hand

    # -- the core's hooks: a subclass's override, else braeburn's own ---------------------------------------
    def _micro_batch(self, model: torch.nn.Module, batch: Any) -> None:
        if self._overrides.training_step:  # a subclass's training_step: forward and backward
            self._overridden_training_step(model, batch)
            return
        steps = self.config.gradient_accumulation_steps  # 1: the window is one micro-batch, whatever the loader says
        if steps != 1:
            steps = self.current_gradient_accumulation_steps
        self._micro_batch_steps = steps  # _keep_loss divides by it
        if steps == self.accelerator.gradient_accumulation_steps:  # a full window: backward divides by these already
            super()._micro_batch(model, batch)
            return
        with loss_divided_by(self.accelerator, steps):
            super()._micro_batch(model, batch)

    @property
    def _has_own_training_step(self) -> bool:
        return self._overrides.training_step

    def _overridden_training_step(self, model: torch.nn.Module, batch: Any) -> None:
        """Transformers' training_step returns the loss divided by the accumulation steps; the window keeps
        per-batch losses, as braeburn's own path does."""
        with backward_as_in_transformers(self.accelerator):
            loss = self.training_step(model, batch, None)
        super()._keep_loss(loss.detach().float())  # divided already

    def _keep_loss(self, loss: torch.Tensor) -> None:
        """The micro-batch's share of its step's loss, as Transformers' training_step returns it: divided by the
        window's length (a short last window's by its own); the log adds the shares and divides by the steps."""
        steps = self._micro_batch_steps  # the window's length, read by _micro_batch for this micro-batch
        super()._keep_loss(loss / steps if steps != 1 else loss)  # (x / 1 is x: no operator on a step without one)

    def _batch_loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        if self._overrides.compute_loss:  # a subclass overrode Transformers' compute_loss
            return self.compute_loss(model, batch, num_items_in_batch=None)
        return super()._batch_loss(model, batch)

    def _make_optimizer(self, model: torch.nn.Module | None = None) -> bool:
        if self._overrides.create_optimizer:
            self.create_optimizer()
            return False  # the subclass's optimizer: its learning rate is not the config's
        return super()._make_optimizer(model)

    def _make_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None) -> None:
        if self._overrides.create_scheduler:
            self.create_scheduler(num_training_steps=num_training_steps)
        else:
            super()._make_scheduler(num_training_steps, optimizer)

    def _evaluation_output(self, loader: Any, description: str, prefix: str, loss_only: bool | None,
                           ignore_keys: list[str] | None) -> EvalLoopOutput:
        """evaluate()/predict()'s result: braeburn's loop, or an overridden evaluation_loop with Transformers'
        speed metrics added, as its evaluate() adds them."""
        if not self._overrides.evaluation_loop:
            return super()._evaluation_output(loader, description, prefix, loss_only, ignore_keys)
        return self._timed_evaluation(lambda: self.evaluation_loop(
            loader, description=description, prediction_loss_only=loss_only, ignore_keys=ignore_keys,
            metric_key_prefix=prefix), prefix)

    def _evaluation_step(self, model: torch.nn.Module, batch: Any, loss_only: bool,
                         ignore_keys: list[str] | None = None) -> tuple[Any, Any, Any]:
        if self._overrides.prediction_step:
            return self.prediction_step(model, batch, loss_only, ignore_keys)
        return super()._evaluation_step(model, batch, loss_only, ignore_keys)

    def _evaluation_forward(self, model: torch.nn.Module, batch: Any, inputs: tuple[tuple, dict], labels: Any,
                            loss_without_labels: bool) -> tuple[torch.Tensor | None, Any]:
        if (labels is not None or loss_without_labels) and self._overrides.compute_loss:
            return self.compute_loss(model, batch, return_outputs=True)
        loss, outputs = super()._evaluation_forward(model, batch, inputs, labels, loss_without_labels)
        if labels is None and not loss_without_labels and isinstance(outputs, (tuple, list)) and outputs and \
                not hasattr(outputs, "_fields"):  # Transformers' prediction_step: a tuple's items are all predictions
            outputs = {f"output_{index}": value for index, value in enumerate(outputs)}
        return loss, outputs

    def _emit_log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if not self._overrides.log:
            super()._emit_log(logs, start_time)
        elif start_time is None:  # an evaluation's metrics: Transformers calls log(metrics)
            self.log(logs)
        else:
            self.log(logs, start_time=start_time)

    def _record_train_metrics(self, metrics: dict[str, float]) -> None:
        if self._overrides.log:  # Transformers ends train() with self.log(metrics): an override sees them too
            self.log(dict(metrics))
        else:
            super()._record_train_metrics(metrics)

    def _train_dataloader(self) -> Any:
        return self.get_train_dataloader() if self._overrides.get_train_dataloader else super()._train_dataloader()

    def _eval_loader(self, dataset: Any) -> Any:
        if not self._overrides.get_eval_dataloader:
            return super()._eval_loader(dataset)
        return self._prepared_once(self.get_eval_dataloader(dataset))

    def _test_loader(self, dataset: Any) -> Any:
        if not self._overrides.get_test_dataloader:
            return super()._test_loader(dataset)
        return self._prepared_once(self.get_test_dataloader(dataset))

    def _prepare_eval_loaders(self) -> None:
        if not self._overrides.get_eval_dataloader:  # else the subclass makes one at each evaluation
            super()._prepare_eval_loaders()

    def _prepared_once(self, loader: Any) -> Any:
        """A loader a subclass made for one evaluation, prepared for it (not saved in checkpoints: a resumed run
        would not have made it yet)."""
        return loader if isinstance(loader, DeviceDataLoader) else self.accelerator._device_loader(loader)

    @property
    def _save_is_watched(self) -> bool:
        return self._overrides.save_model or any(watches_saves(c) for c in self.callbacks.callbacks)

    def _checkpoint_written(self, folder: Path) -> None:
        """A subclass's save_model into the checkpoint, as Transformers' checkpoint calls it; what it wrote joins
        the checkpoint's manifest, so that a resume reads it as braeburn's own."""
        if not self._overrides.save_model:
            return
        if self.is_main_process:
            ownership.adopt_saved(folder)  # its files are braeburn's: save_model() may replace them
        self.save_model(str(folder), _internal_call=True)
        if self.is_main_process:
            write_manifest(folder, step_of(folder))

    # -- training ----------------------------------------------------------------------------------------
    def create_optimizer_and_scheduler(self, num_training_steps: int) -> None:
        self.create_optimizer()
        self.create_scheduler(num_training_steps=num_training_steps)

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        """``self.optimizer``, built from the arguments (optim, learning_rate, weight_decay ...) when not given."""
        super()._make_optimizer(model)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None) -> Any:
        """``self.lr_scheduler``, built from lr_scheduler_type and the warm-up when not given."""
        super()._make_scheduler(num_training_steps, optimizer)
        return self.lr_scheduler

    @property
    def current_gradient_accumulation_steps(self) -> int:
        """The micro-batches of this optimizer step: gradient_accumulation_steps, fewer in an epoch's last window
        when the epoch's batches do not divide evenly. Transformers divides each micro-batch's loss by it, so the
        last window's gradient is its batches' mean, not a fraction of it."""
        steps, loader = self.config.gradient_accumulation_steps, self._train_loader
        if steps == 1 or loader is None or not loader.batches_yielded:
            return steps
        try:
            batches = len(loader)
        except TypeError:  # an iterable dataset: no end of epoch known in advance
            return steps
        window_start = (loader.batches_yielded - 1) // steps * steps
        return min(steps, batches - window_start)

    def training_step(self, model: torch.nn.Module, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        """Forward and backward of one micro-batch; the loss returned is divided by gradient_accumulation_steps
        (Transformers' convention: the logged loss is the sum of a step's returns)."""
        model.train()
        loss = self.forward_loss(model, inputs)  # calls an overridden compute_loss
        with backward_as_in_transformers(self.accelerator):
            loss = loss / self.current_gradient_accumulation_steps
            self.accelerator.backward(loss)
        return loss.detach()

    def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """The loss of one batch: the model's own, or loss_fn / compute_loss_func on its outputs and labels."""
        args, kwargs, labels = batch_inputs(inputs, pass_labels=self.loss_fn is None)
        outputs = self._loss_outputs(model(*args, **kwargs), labels)
        loss = compute_loss(outputs, labels, self.loss_fn)
        return (loss, outputs) if return_outputs else loss

    def _loss_outputs(self, outputs: Any, labels: Any) -> Any:
        """A model that computed its loss and returned a tuple: Transformers takes ``outputs[0]`` as the loss and the
        rest as the predictions (one item alone, else a tuple); here the tuple becomes a dict of them, which the
        loss and the predictions are read from as from a ModelOutput."""
        if self.loss_fn is not None or labels is None or not isinstance(outputs, (tuple, list)) or not outputs:
            return outputs
        return {"loss": outputs[0], **{f"output_{index}": value for index, value in enumerate(outputs[1:], 1)}}

    # -- evaluation --------------------------------------------------------------------------------------
    def prediction_step(self, model: torch.nn.Module, inputs: Any, prediction_loss_only: bool,
                        ignore_keys: list[str] | None = None) -> tuple[Any, Any, Any]:
        """(loss, logits, labels) of one evaluation batch, by Transformers' rules (braeburn's evaluation step,
        ``braeburn.trainer.evaluation``), with an overridden ``compute_loss`` giving the loss when there are labels.
        Logits and labels are None when ``prediction_loss_only``."""
        return super()._evaluation_step(model, inputs, prediction_loss_only, ignore_keys)

    def evaluation_loop(self, dataloader: Any, description: str, prediction_loss_only: bool | None = None,
                        ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval") -> EvalLoopOutput:
        """prediction_step over ``dataloader``: the mean loss over every process, predictions gathered, and
        compute_metrics on them."""
        loss_only = self.config.prediction_loss_only if prediction_loss_only is None else prediction_loss_only
        return super()._evaluation_output(dataloader, description, metric_key_prefix, loss_only, ignore_keys)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Record ``logs`` in log_history and send them to the loggers (callbacks' on_log)."""
        super()._emit_log(logs, start_time)


@contextlib.contextmanager
def loss_divided_by(accelerator: Any, steps: int) -> Iterator[None]:
    """``accelerator.backward(loss)`` divides the loss by ``steps`` inside the block. The micro-batch's
    sync_gradients is decided already (accumulate() ran), so only the division changes."""
    configured = accelerator.gradient_accumulation_steps
    accelerator.gradient_accumulation_steps = steps
    try:
        yield
    finally:
        accelerator.gradient_accumulation_steps = configured


def backward_as_in_transformers(accelerator: Any) -> contextlib.AbstractContextManager:
    """Transformers' Trainer runs Accelerate with gradient_accumulation_steps=1 and divides the loss in its
    training_step; inside a training_step, ``self.accelerator.backward(loss)`` therefore does not divide (braeburn's
    Accelerator divides, as Accelerate's does with accumulation)."""
    return loss_divided_by(accelerator, 1)


__all__ = ["EvalLoopOutput", "HfOverridableMixin", "OVERRIDABLE", "Overrides", "backward_as_in_transformers",
           "loss_divided_by"]
