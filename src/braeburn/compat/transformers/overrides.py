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
- ``log(logs, start_time)`` (in hf_compat) for every logging step and evaluation.

The per-step methods cost nothing when not overridden: :class:`Overrides` is worked out once per
Trainer, and the loop takes braeburn's own path (no extra calls, no float copy of the logits) unless a
subclass replaced ``training_step`` or ``compute_loss``.

braeburn passes ``num_items_in_batch=None``: losses are averaged per batch (docs/migrating.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import torch

from ...trainer.batches import batch_inputs, compute_loss, model_logits, output_loss
from .trainer_api import ignored_output_keys, labels_by_name, output_predictions

# The methods a subclass may replace; Overrides has one flag per name.
OVERRIDABLE = ("training_step", "compute_loss", "create_optimizer", "create_scheduler", "prediction_step",
               "evaluation_loop", "log")


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

    @classmethod
    def of(cls, trainer_type: type, base: type) -> Overrides:
        return cls(**{name: getattr(trainer_type, name) is not getattr(base, name) for name in OVERRIDABLE})


class EvalLoopOutput(NamedTuple):
    """What Transformers' ``evaluation_loop`` returns."""

    predictions: Any
    label_ids: Any
    metrics: dict[str, float] | None
    num_samples: int | None


class HfOverridableMixin:
    """Transformers' overridable methods of the Trainer (see the module doc). A mixin of the Trainer."""

    # -- training ----------------------------------------------------------------------------------------
    def create_optimizer_and_scheduler(self, num_training_steps: int) -> None:
        self.create_optimizer()
        self.create_scheduler(num_training_steps=num_training_steps)

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        """``self.optimizer``, built from the arguments (optim, learning_rate, weight_decay ...) when not given."""
        from ...trainer.optim import default_optimizer

        if self.optimizer is None:
            acc = self.accelerator
            model = model if model is not None else acc.unwrap_model(self._model_for_inference())
            self.optimizer = default_optimizer(model, self.config, acc.plan.device, grad_scaler=acc.plan.grad_scaler)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None) -> Any:
        """``self.lr_scheduler``, built from lr_scheduler_type and the warm-up when not given."""
        from ...trainer.optim import default_scheduler

        if self.lr_scheduler is None:
            self.lr_scheduler = default_scheduler(optimizer or self.optimizer, self.config, num_training_steps)
        return self.lr_scheduler

    @property
    def current_gradient_accumulation_steps(self) -> int:
        return self.config.gradient_accumulation_steps

    def training_step(self, model: torch.nn.Module, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        """Forward and backward of one micro-batch; the loss returned is divided by gradient_accumulation_steps
        (Transformers' convention: the logged loss is the sum of a step's returns)."""
        model.train()
        loss = self._forward_loss(model, inputs)  # calls an overridden compute_loss
        with backward_as_in_transformers(self.accelerator):
            loss = loss / self.current_gradient_accumulation_steps
            self.accelerator.backward(loss)
        return loss.detach()

    def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """The loss of one batch: the model's own, or loss_fn / compute_loss_func on its outputs and labels."""
        args, kwargs, labels = batch_inputs(inputs, pass_labels=self.loss_fn is None)
        outputs = model(*args, **kwargs)
        loss = compute_loss(outputs, labels, self.loss_fn)
        return (loss, outputs) if return_outputs else loss

    # -- evaluation --------------------------------------------------------------------------------------
    def prediction_step(self, model: torch.nn.Module, inputs: Any, prediction_loss_only: bool,
                        ignore_keys: list[str] | None = None) -> tuple[Any, Any, Any]:
        """(loss, logits, labels) of one evaluation batch, by Transformers' rules: a dict batch's labels are its
        ``label_names`` (one tensor, or a tuple of several; None unless all are there); the loss is None without
        labels (unless the model returns one without them: ``can_return_loss``); a dict output's predictions are
        its values minus ``loss`` and ``ignore_keys`` (default: the model config's keys_to_ignore_at_inference),
        one value alone or a tuple. Logits and labels are None when ``prediction_loss_only``."""
        args, kwargs, labels = batch_inputs(inputs, pass_labels=self.loss_fn is None)
        label_names = self.label_names
        if isinstance(inputs, Mapping):  # Transformers' label_names: one tensor, or a tuple of several
            labels = labels_by_name(inputs, label_names)
        loss_without_labels = not label_names and self.can_return_loss  # CLIP-like: return_loss=True
        loss = None
        with torch.no_grad():
            if (labels is not None or loss_without_labels) and self._overrides.compute_loss:
                loss, outputs = self.compute_loss(model, inputs, return_outputs=True)
            else:
                outputs = model(*args, **kwargs)
                loss = _eval_loss(outputs, labels, self.loss_fn, loss_without_labels)
        loss = None if loss is None else loss.detach().mean()
        if prediction_loss_only:
            return loss, None, None
        if isinstance(outputs, Mapping):
            return loss, output_predictions(outputs, ignored_output_keys(self.model, ignore_keys)), labels
        return loss, model_logits(outputs), labels

    def evaluation_loop(self, dataloader: Any, description: str, prediction_loss_only: bool | None = None,
                        ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval") -> EvalLoopOutput:
        """prediction_step over ``dataloader``: the mean loss over every process, predictions gathered, and
        compute_metrics on them."""
        loss_only = self.config.prediction_loss_only if prediction_loss_only is None else prediction_loss_only
        output = self._prediction_loop(dataloader, metric_key_prefix, not loss_only, ignore_keys)
        return EvalLoopOutput(output.predictions, output.label_ids, output.metrics, output.num_samples)

    def _evaluation_output(self, dataloader: Any, description: str, prefix: str, loss_only: bool | None,
                           ignore_keys: list[str] | None) -> Any:
        """evaluate()/predict()'s result: braeburn's loop, or an overridden evaluation_loop with Transformers'
        speed metrics added, as its evaluate() adds them."""
        if not self._overrides.evaluation_loop:
            return self._prediction_loop(dataloader, prefix, not loss_only, ignore_keys)
        started = time.perf_counter()
        output = self.evaluation_loop(dataloader, description=description, prediction_loss_only=loss_only,
                                      ignore_keys=ignore_keys, metric_key_prefix=prefix)
        metrics = dict(output.metrics or {})
        seconds = time.perf_counter() - started
        samples = output.num_samples or 0
        metrics[f"{prefix}_runtime"] = round(seconds, 4)
        steps = math.ceil(samples / (self.config.per_device_eval_batch_size * self.accelerator.num_processes))
        metrics[f"{prefix}_samples_per_second"] = round(samples / seconds, 3) if seconds > 0 else 0.0
        metrics[f"{prefix}_steps_per_second"] = round(steps / seconds, 3) if seconds > 0 else 0.0
        return output._replace(metrics=metrics)


@contextlib.contextmanager
def backward_as_in_transformers(accelerator: Any) -> Iterator[None]:
    """Transformers' Trainer runs Accelerate with gradient_accumulation_steps=1 and divides the loss in its
    training_step; inside a training_step, ``self.accelerator.backward(loss)`` therefore does not divide (braeburn's
    Accelerator divides, as Accelerate's does with accumulation). The micro-batch's sync_gradients is decided
    already (accumulate() ran), so only the division changes."""
    steps = accelerator.gradient_accumulation_steps
    accelerator.gradient_accumulation_steps = 1
    try:
        yield
    finally:
        accelerator.gradient_accumulation_steps = steps


def _eval_loss(outputs: Any, labels: Any, loss_fn: Any, loss_without_labels: bool) -> torch.Tensor | None:
    """The batch's loss: loss_fn's or the model's when the batch has labels (or the model returns a loss
    without them), else None (no eval loss, as Transformers)."""
    if labels is not None and (loss_fn is not None or output_loss(outputs) is not None):
        return compute_loss(outputs, labels, loss_fn)
    if labels is None and loss_without_labels and output_loss(outputs) is not None:
        return compute_loss(outputs, None, None)
    return None


__all__ = ["EvalLoopOutput", "HfOverridableMixin", "OVERRIDABLE", "Overrides", "backward_as_in_transformers"]
