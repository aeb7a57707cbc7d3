"""What the Trainer returns: from ``train()`` a :class:`TrainOutput`, from ``evaluate()``'s loop an
:class:`EvalLoopOutput`, from ``predict()`` a :class:`PredictionOutput`; ``compute_metrics`` receives an
:class:`EvalPrediction`. Predictions and labels are numpy arrays (:func:`to_numpy`), the batches concatenated with
their padding (:func:`concat_padded`): the shapes and types Transformers' Trainer gives, so a ``compute_metrics``
written for it works unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class EvalPrediction:
    """What ``compute_metrics`` receives: numpy arrays, as Transformers gives them (also ``preds, labels = p``)."""

    def __init__(self, predictions: Any, label_ids: Any, inputs: Any = None, losses: Any = None):
        self.predictions, self.label_ids, self.inputs, self.losses = predictions, label_ids, inputs, losses

    def _items(self) -> tuple[Any, ...]:
        return (self.predictions, self.label_ids) + tuple(x for x in (self.inputs, self.losses) if x is not None)

    def __iter__(self):
        return iter(self._items())

    def __getitem__(self, index: int) -> Any:
        return self._items()[index]

    def __len__(self) -> int:
        return len(self._items())


class PredictionOutput(NamedTuple):
    predictions: Any
    label_ids: Any
    metrics: dict[str, float]


class TrainOutput(NamedTuple):
    global_step: int
    training_loss: float
    metrics: dict[str, float]


class EvalLoopOutput(NamedTuple):
    """One pass over an evaluation set (what Transformers' ``evaluation_loop`` returns)."""

    predictions: Any
    label_ids: Any
    metrics: dict[str, float] | None
    num_samples: int | None


def to_numpy(data: Any) -> Any:
    """Tensors (nested in tuples/lists/dicts too) as numpy arrays; bf16/fp16 become float32 as in Transformers."""
    import torch

    if isinstance(data, torch.Tensor):
        data = data.detach().cpu()
        if data.dtype in (torch.bfloat16, torch.float16):
            data = data.float()
        return data.numpy()
    if isinstance(data, Mapping):
        return {k: to_numpy(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(to_numpy(v) for v in data)
    return data


def concat_padded(parts: list[Any], padding_index: int = -100) -> Any:
    """Concatenate batches on dim 0, padding dim 1 with ``padding_index`` when lengths differ (token tasks)."""
    import torch

    if not parts:
        return None
    first = parts[0]
    if isinstance(first, torch.Tensor):
        if first.dim() < 2 or all(p.shape[1:] == first.shape[1:] for p in parts):
            return torch.cat(parts)
        longest = max(p.shape[1] for p in parts)
        padded = []
        for part in parts:
            shape = (part.shape[0], longest) + tuple(part.shape[2:])
            out = part.new_full(shape, padding_index)
            out[:, :part.shape[1]] = part
            padded.append(out)
        return torch.cat(padded)
    if isinstance(first, Mapping):
        return {k: concat_padded([p[k] for p in parts], padding_index) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(concat_padded([p[i] for p in parts], padding_index) for i in range(len(first)))
    return parts


__all__ = ["EvalLoopOutput", "EvalPrediction", "PredictionOutput", "TrainOutput", "concat_padded", "to_numpy"]
