"""The Trainer's evaluation and prediction: one pass over a dataset without gradients, the loss summed over
every process, predictions gathered (minus the duplicates that pad an uneven last batch), compute_metrics,
and the best checkpoint so far. A mixin of :class:`braeburn.trainer.loop.Trainer`; it uses the Trainer's
accelerator, loaders, callbacks and state. Each batch gives its loss, predictions and labels by Transformers'
rules (:meth:`EvaluationMixin._evaluation_step`), so that its models evaluate as there; a peer's Trainer routes
the hooks (``_evaluation_output``, ``_evaluation_step``, ``_evaluation_forward``) to a subclass's own methods.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils.data import Dataset

from ..data.loader import apply_to_tensors
from ..distributed import process_group as pg
from ..plan.compile_policy import model_outputs_are_overwritten, outputs_are_overwritten
from .batches import (batch_inputs, can_return_loss, compute_loss, ignored_output_keys, labels_by_name, model_logits,
                      output_loss, output_predictions)
from .outputs import EvalLoopOutput, EvalPrediction, PredictionOutput, concat_padded, to_numpy


class LossSum:
    """An evaluation's loss: each batch's mean loss weighted by its size, summed on the device, over every process."""

    def __init__(self, accelerator: Any):
        self.accelerator, self.count = accelerator, 0
        self.total = torch.zeros((), device=accelerator.device)

    def add(self, loss: torch.Tensor, size: int) -> None:
        self.total += loss.float() * size
        self.count += size

    def mean(self) -> float:
        total = self.accelerator.reduce(self.total, "sum")
        return float(total) / (self.count * self.accelerator.num_processes)  # sync


HOST_COPY_BYTES = 64 << 20  # predictions and labels held on the device before they are copied to the host together


class HostBatches:
    """Each evaluation batch's predictions (or labels), copied to the host a few batches at a time.

    A copy to the host waits for the device to finish the batch, so copying every batch at once (two copies a
    batch, predictions and labels) kept the host from queuing the next batch's forward while the device ran this
    one. Here batches stay on the device until they hold ``HOST_COPY_BYTES`` of memory (counted by the storage they
    keep alive, so that a view of a large output counts as the output), or ``every`` batches when
    ``eval_accumulation_steps`` is set (Transformers' meaning; 1 where a model's next call overwrites its outputs,
    CUDA graphs), or the evaluation ends; then each is copied as before. The copies hold the same values: only
    their moment changes."""

    def __init__(self, every: int | None = None, limit_bytes: int = HOST_COPY_BYTES,
                 to_host: Callable[[Any], Any] | None = None):
        self.every, self.limit_bytes, self.to_host = every, limit_bytes, to_host or _to_cpu
        self.host: list[Any] = []
        self._pending: list[Any] = []
        self._storages: dict[int, int] = {}

    def add(self, data: Any) -> None:
        self._pending.append(data)
        apply_to_tensors(self._count, data)
        if sum(self._storages.values()) >= self.limit_bytes or (self.every and len(self._pending) >= self.every):
            self.flush()

    def _count(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        self._storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    def flush(self) -> None:
        self.host.extend(self.to_host(data) for data in self._pending)
        self._pending, self._storages = [], {}

    def on_host(self) -> list[Any]:
        """Every batch added, on the host, in order."""
        self.flush()
        return self.host


class EvaluationMixin:
    """evaluate(), predict() and the best-checkpoint bookkeeping of the Trainer."""

    def evaluate(self, eval_dataset: Dataset | None = None, ignore_keys: list[str] | None = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        """Loss (when the batches have labels) and compute_metrics on ``eval_dataset``; logged and returned."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("evaluate() needs an eval_dataset: pass Trainer(..., eval_dataset=...) or evaluate(dataset)")
        loss_only = True if self.compute_metrics is None else None  # None: config.prediction_loss_only decides
        output = self._evaluation_output(self._eval_loader(dataset), "Evaluation", metric_key_prefix, loss_only,
                                         ignore_keys)
        metrics = output.metrics
        if self.state.max_steps or self.epoch_before_training:
            metrics["epoch"] = self._logged_epoch()
        self._update_best(metrics)
        self._emit_log(dict(metrics))
        self.callbacks.on_evaluate(self, self.state, metrics)
        return metrics

    def predict(self, test_dataset: Dataset, ignore_keys: list[str] | None = None,
                metric_key_prefix: str = "test") -> PredictionOutput:
        """Predictions (logits, as numpy arrays) for ``test_dataset``, with labels and metrics when it has labels."""
        output = self._evaluation_output(self._test_loader(test_dataset), "Prediction", metric_key_prefix, False,
                                         ignore_keys)
        return PredictionOutput(output.predictions, output.label_ids, output.metrics)

    def _evaluation_output(self, loader: Any, description: str, prefix: str, loss_only: bool | None,
                           ignore_keys: list[str] | None) -> EvalLoopOutput:
        """evaluate()/predict()'s pass over a prepared loader. A hook: a peer's Trainer routes it to a subclass's
        own evaluation loop (timed by :meth:`_timed_evaluation`)."""
        return self._prediction_loop(loader, prefix, not loss_only, ignore_keys)

    def _timed_evaluation(self, run: Callable[[], EvalLoopOutput], prefix: str) -> EvalLoopOutput:
        """``run()``'s output, with the runtime and speed metrics of the whole call (rounded as Transformers'
        evaluate() rounds them): for an evaluation loop that is not braeburn's, which times its own batches."""
        started = time.perf_counter()
        output = run()
        metrics = dict(output.metrics or {})
        seconds = time.perf_counter() - started
        samples = output.num_samples or 0
        metrics[f"{prefix}_runtime"] = round(seconds, 4)
        steps = math.ceil(samples / (self.config.per_device_eval_batch_size * self.accelerator.num_processes))
        metrics[f"{prefix}_samples_per_second"] = round(samples / seconds, 3) if seconds > 0 else 0.0
        metrics[f"{prefix}_steps_per_second"] = round(steps / seconds, 3) if seconds > 0 else 0.0
        return output._replace(metrics=metrics)

    def _prediction_loop(self, loader: Any, prefix: str, keep_predictions: bool,
                         ignore_keys: list[str] | None = None) -> EvalLoopOutput:
        """_evaluation_step over every batch of a prepared loader (evaluation_loop's body)."""
        acc, started = self.accelerator, time.perf_counter()
        model = self.prepared_model()
        was_training = model.training
        model.eval()
        # a CUDA-graph model's next call overwrites its outputs (compiled here or by the user): then each batch is
        # copied out at once, as before
        overwritten = outputs_are_overwritten(acc.compile_mode) or model_outputs_are_overwritten(model)
        every = 1 if overwritten else self.config.eval_accumulation_steps
        losses, predictions, labels = self._eval_losses(), HostBatches(every), HostBatches(every)
        for batch in loader:
            loss, logits, batch_labels = self._evaluation_step(model, batch, not keep_predictions, ignore_keys)
            if loss is not None:
                losses.add(loss, _batch_size(batch) or 1)  # Transformers' find_batch_size: the first tensor's length
            if keep_predictions and logits is not None:
                # as Transformers: sequences of another length on each process padded with -100 before the gather
                logits, batch_labels = pg.pad_across((logits, batch_labels), dim=1, pad_index=-100)
                if self.preprocess_logits_for_metrics is not None:
                    logits = self.preprocess_logits_for_metrics(logits, batch_labels)
                predictions.add(acc.gather_for_metrics(logits))
                if batch_labels is not None:
                    labels.add(acc.gather_for_metrics(batch_labels))
        model.train(was_training)
        samples = len(loader.dataset) if hasattr(loader, "dataset") else losses.count
        return self._prediction_output(prefix, losses, predictions.on_host(), labels.on_host(), started, samples)

    def _eval_losses(self) -> LossSum:
        """What turns an evaluation's batch losses into its ``eval_loss``. A hook: here a sum weighted by batch size,
        kept on the device (one sync at the end); the Transformers Trainer takes the float32 mean of every sample's
        loss, as Transformers does."""
        return LossSum(self.accelerator)

    def _evaluation_step(self, model: torch.nn.Module, batch: Any, loss_only: bool,
                         ignore_keys: list[str] | None = None) -> tuple[Any, Any, Any]:
        """(loss, predictions, labels) of one evaluation batch, by Transformers' rules: a dict batch's labels are its
        ``label_names`` (one tensor, or a tuple of several; None unless all are there); the loss is None without
        labels (unless the model returns one without them: ``can_return_loss``); a dict output's predictions are
        its values minus ``loss`` and ``ignore_keys`` (default: the model config's keys_to_ignore_at_inference),
        one value alone or a tuple. Predictions and labels are None when ``loss_only``. A hook: a peer's Trainer
        routes it to a subclass's own prediction step."""
        args, kwargs, labels = batch_inputs(batch, pass_labels=self.loss_fn is None)
        label_names = self.label_names
        if isinstance(batch, Mapping):  # Transformers' label_names: one tensor, or a tuple of several
            labels = labels_by_name(batch, label_names)
        loss_without_labels = not label_names and can_return_loss(self._unwrapped_for_labels())  # CLIP-like models
        with torch.no_grad():
            loss, outputs = self._evaluation_forward(model, batch, (args, kwargs), labels, loss_without_labels)
        loss = None if loss is None else loss.detach().mean()
        if loss_only:
            return loss, None, None
        if isinstance(outputs, Mapping):
            return loss, output_predictions(outputs, ignored_output_keys(self.model, ignore_keys)), labels
        return loss, model_logits(outputs), labels

    def _evaluation_forward(self, model: torch.nn.Module, batch: Any, inputs: tuple[tuple, dict], labels: Any,
                            loss_without_labels: bool) -> tuple[torch.Tensor | None, Any]:
        """(loss, outputs) of an evaluation batch, without gradients: the model's forward on ``inputs`` (its
        positional and keyword arguments), and the loss when there is one. A hook: a peer's Trainer routes it to a
        subclass's own loss."""
        args, kwargs = inputs
        outputs = self._loss_outputs(model(*args, **kwargs), labels)
        return _eval_loss(outputs, labels, self.loss_fn, loss_without_labels), outputs

    def _prediction_output(self, prefix, losses, predictions, labels, started, samples) -> PredictionOutput:
        metrics: dict[str, float] = {}
        if losses.count:
            metrics[f"{prefix}_loss"] = losses.mean()  # sync
        preds, label_ids = to_numpy(concat_padded(predictions)), to_numpy(concat_padded(labels))
        if self.compute_metrics is not None and preds is not None and label_ids is not None:
            for key, value in _metrics_dict(self.compute_metrics(EvalPrediction(preds, label_ids))).items():
                metrics[key if key.startswith(f"{prefix}_") else f"{prefix}_{key}"] = float(value)
        seconds = time.perf_counter() - started  # rounded as train()'s and Transformers' speed metrics
        metrics[f"{prefix}_runtime"] = round(seconds, 4)
        metrics[f"{prefix}_samples_per_second"] = round(samples / seconds, 3) if seconds > 0 else 0.0
        batches = math.ceil(samples / (self.config.per_device_eval_batch_size * self.accelerator.num_processes))
        metrics[f"{prefix}_steps_per_second"] = round(batches / seconds, 3) if seconds > 0 else 0.0
        return EvalLoopOutput(preds, label_ids, metrics, samples)

    def _update_best(self, metrics: dict[str, float]) -> None:
        """A better metric_for_best_model (when one is set) makes this step's checkpoint the best, once written:
        ``_save`` names it best_checkpoint, as Transformers names only a folder that exists."""
        name = self.config.metric_for_best_model
        if name is None:
            return
        name = name if name.startswith("eval_") else f"eval_{name}"
        value = metrics.get(name)
        if value is None or not math.isfinite(value):
            return
        best, better = self.state.best_metric, self.config.greater_is_better
        if best is None or (value > best if better else value < best):
            self.state.best_metric = value
            self._best_step = self.state.global_step


def _eval_loss(outputs: Any, labels: Any, loss_fn: Any, loss_without_labels: bool) -> torch.Tensor | None:
    """The batch's loss: loss_fn's or the model's when the batch has labels (or the model returns a loss
    without them), else None (no eval loss, as Transformers)."""
    if labels is not None and (loss_fn is not None or output_loss(outputs) is not None):
        return compute_loss(outputs, labels, loss_fn)
    if labels is None and loss_without_labels and output_loss(outputs) is not None:
        return compute_loss(outputs, None, None)
    return None


def _to_cpu(data: Any) -> Any:
    return apply_to_tensors(lambda t: t.cpu(), data)


def _batch_size(batch: Any) -> int | None:
    """The length of the batch's first tensor (None when it holds none), as Transformers' find_batch_size."""
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else [batch]
    for item in items:
        if isinstance(item, torch.Tensor) and item.dim() > 0:
            return len(item)
        if isinstance(item, (Mapping, list, tuple)) and (found := _batch_size(item)) is not None:
            return found
    return None


def _metrics_dict(result: Any) -> dict:
    if isinstance(result, dict):
        return result
    raise TypeError(f"compute_metrics returned a {type(result).__name__} ({str(result)[:60]}), not a dict: evaluate() "
                    "names each metric by its key (eval_<key>); return a dict such as {\"accuracy\": 0.9}")

