"""What a batch means to the model and where the loss comes from.

Batches are dicts (keyword arguments, Transformers style, labels under ``labels``) or
``(inputs, labels)`` tuples, as a TensorDataset gives. The loss is ``loss_fn(outputs, labels)`` when
a loss_fn is given, else the model output's ``.loss`` or ``["loss"]``. For evaluation: which batch keys hold
the labels (:func:`find_label_names`, :func:`labels_by_name`) and which outputs are the predictions
(:func:`output_predictions`, :func:`model_logits`), by Transformers' rules, so that its models evaluate as there.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..data.loader import first_dim

LABELS = "labels"


def batch_inputs(batch: Any, pass_labels: bool) -> tuple[tuple, dict, Any]:
    """(positional args, keyword args, labels) for one batch.

    With a loss_fn the labels are kept from the model (its forward may not take them); without one,
    a dict batch keeps ``labels`` so that a Transformers model computes its own loss.
    """
    if isinstance(batch, (tuple, list)):  # first: a check against the Mapping ABC costs more than this one
        if len(batch) == 1:
            return (batch[0],), {}, None
        if len(batch) == 2 and type(batch[0]) is torch.Tensor:  # (inputs, labels), a TensorDataset's: no unpacking
            return (batch[0],), {}, batch[1]
        *inputs, labels = batch
        if len(inputs) == 1 and not isinstance(inputs[0], torch.Tensor) and isinstance(inputs[0], Mapping):
            return (), dict(inputs[0]), labels
        return tuple(inputs), {}, labels
    if isinstance(batch, Mapping):
        kwargs = dict(batch)
        labels = kwargs.get(LABELS)
        if not pass_labels:
            kwargs.pop(LABELS, None)
        return (), kwargs, labels
    return (batch,), {}, None


def batch_samples(batch: Any, loader: Any, full_batch: int, num_processes: int) -> int:
    """The samples ``batch`` holds on all processes: its first dimension (shape metadata: no device sync), so a
    short last batch counts its own, as Transformers' samples/s does (dataset length x epochs); the last global
    batch padded to fill every process counts its real samples. ``full_batch`` where no tensor tells."""
    remainder = getattr(getattr(loader, "tracker", None), "remainder", -1)
    if remainder >= 0:
        return remainder
    size = first_dim(batch)
    return full_batch if size is None else size * num_processes


def output_loss(outputs: Any) -> torch.Tensor | None:
    if isinstance(outputs, Mapping):
        return outputs.get("loss")
    return getattr(outputs, "loss", None)


def compute_loss(outputs: Any, labels: Any, loss_fn: Any) -> torch.Tensor:
    if loss_fn is not None:
        if labels is None:
            raise ValueError("loss_fn was given but the batch has no labels: give batches as (inputs, labels) "
                             "tuples, or dicts with the labels under 'labels'")
        return loss_fn(outputs, labels)
    loss = output_loss(outputs)
    if loss is None:
        raise TypeError(
            f"The model returned {type(outputs).__name__}, which carries no loss, and no loss_fn was given. Either "
            "pass Trainer(..., loss_fn=torch.nn.CrossEntropyLoss()) (called as loss_fn(outputs, labels)), or make "
            "the model return the loss as output.loss or output['loss'] (Transformers models do when the batch "
            "has 'labels').")
    return loss


def model_logits(outputs: Any) -> Any:
    """The predictions in a model output: the tensor itself, or its ``logits``."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, Mapping):
        if outputs.get("logits") is not None:
            return outputs["logits"]
        return {k: v for k, v in outputs.items() if k != "loss"}
    logits = getattr(outputs, "logits", None)
    if logits is not None:
        return logits
    if isinstance(outputs, (tuple, list)):
        return outputs[0]
    raise TypeError(f"cannot find predictions in a model output of type {type(outputs).__name__}: return a "
                    "tensor of logits, or an object/dict with 'logits'")


def find_label_names(model: Any) -> list[str]:
    """Transformers' default ``label_names``: the forward's parameters with "label" in their name, and
    ``start_positions``/``end_positions`` for a question-answering model; ``["labels"]`` when it names none
    (braeburn's models with a ``loss_fn``)."""
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        params = list(inspect.signature(forward).parameters)
    except (TypeError, ValueError):
        return ["labels"]
    answers = ("start_positions", "end_positions") if "QuestionAnswering" in type(model).__name__ else ()
    return [p for p in params if "label" in p or p in answers] or ["labels"]


def can_return_loss(model: Any) -> bool:
    """Transformers' ``can_return_loss``: the forward has ``return_loss=True`` as a default (CLIP-like models)."""
    try:
        param = inspect.signature(model.forward).parameters.get("return_loss")
    except (AttributeError, TypeError, ValueError):
        return False
    return param is not None and param.default is True


def labels_by_name(batch: Mapping, names: list[str]) -> Any:
    """A dict batch's labels as Transformers' prediction_step takes them: the tensor for one name, a tuple in
    ``names``' order for several, None unless every one is there."""
    values = tuple(batch.get(name) for name in names)
    if not values or any(value is None for value in values):
        return None
    return values[0] if len(values) == 1 else values


def output_predictions(outputs: Any, ignore_keys: list[str] | None = None) -> Any:
    """The predictions of a dict-like output (a ModelOutput) as Transformers gives them: the values other than
    ``loss`` and ``ignore_keys``, in order, as a tuple, or the value itself when there is one
    (``start_logits, end_logits = predictions``)."""
    skip = {"loss", *(ignore_keys or ())}
    values = tuple(v for k, v in outputs.items() if k not in skip and v is not None)
    return values[0] if len(values) == 1 else values


def ignored_output_keys(model: Any, ignore_keys: list[str] | None) -> list[str]:
    """Transformers' default ``ignore_keys``: the model config's ``keys_to_ignore_at_inference``."""
    if ignore_keys is not None:
        return ignore_keys
    config = getattr(model, "config", None)
    return list(getattr(config, "keys_to_ignore_at_inference", ["cache"])) if config is not None else []


def label_smoothed_loss(factor: float) -> Callable[[Any, Any], Any]:
    """Cross-entropy on the output's logits with label smoothing, ignoring -100 labels (Transformers' LabelSmoother)."""
    import torch

    def loss_fn(outputs: Any, labels: Any) -> Any:
        # Transformers' arithmetic, step by step, so that the losses are bitwise its LabelSmoother's.
        log_probs = -torch.nn.functional.log_softmax(model_logits(outputs), dim=-1)
        labels = labels.long()
        if labels.dim() == log_probs.dim() - 1:
            labels = labels.unsqueeze(-1)
        padding = labels.eq(-100)
        nll = log_probs.gather(dim=-1, index=torch.clamp(labels, min=0)).masked_fill(padding, 0.0)
        smoothed = log_probs.sum(dim=-1, keepdim=True, dtype=torch.float32).masked_fill(padding, 0.0)
        active = padding.numel() - padding.long().sum()
        return (1 - factor) * (nll.sum() / active) + factor * (smoothed.sum() / (active * log_probs.shape[-1]))

    return loss_fn
