"""The Trainer's collate function when the script gives none or a partial one: a tokenizer's padding, torch's
default, and dict samples cut to the keys the model's forward takes (``remove_unused_columns``), as Transformers'
Trainer builds them, so that its datasets and collators work unchanged."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils.data import default_collate

LABEL_KEYS = ("labels", "label", "label_ids")


def forward_arguments(model: Any) -> set[str] | None:
    """The names the model's forward declares (as Transformers' signature columns), or None when it
    declares none besides *args/**kwargs (then nothing is removed)."""
    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return None
    named = {p.name for p in params if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)}
    return named or None


def _with_labels_renamed(feature: Mapping) -> dict:
    """The feature with ``label``/``label_ids`` named ``labels``, and its lists of numbers as tensors (one sample's
    token ids), which Transformers' default_data_collator stacks; torch's default_collate would transpose them into
    a list of per-position tensors."""
    import torch

    feature = {key: torch.tensor(value) if _numbers(value) else value for key, value in feature.items()}
    for key in ("label", "label_ids"):
        if key in feature and "labels" not in feature:
            feature["labels"] = feature.pop(key)
    return feature


def _numbers(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], (int, float, list, tuple)) \
        and not isinstance(value[0], bool)


def _padding_collator(processing_class: Any) -> Callable | None:
    """``DataCollatorWithPadding(processing_class)`` as Transformers builds it when no collator is given."""
    if not callable(getattr(processing_class, "pad", None)):
        return None

    def collate(features: list[Mapping]) -> Any:
        batch = processing_class.pad([_with_labels_renamed(f) for f in features], padding=True, return_tensors="pt")
        return dict(batch)

    return collate


def _dict_samples(features: list[Any]) -> bool:
    """Whether the samples are dicts; a tuple sample (a TensorDataset's) is told first, without the Mapping ABC's
    check, which costs more (the collator runs at every batch)."""
    return bool(features) and not isinstance(features[0], (tuple, list)) and isinstance(features[0], Mapping)


def make_collate(model: Any, config: Any, data_collator: Callable | None, processing_class: Any) -> Callable | None:
    """The collate function: the given collator, else a padding one for a tokenizer, else the default; dict
    samples lose the keys the model's forward does not take (remove_unused_columns), labels kept."""
    collate = data_collator or _padding_collator(processing_class)
    keep = forward_arguments(model) if config.remove_unused_columns else None
    if keep is None and collate is data_collator:
        return data_collator  # nothing to change: braeburn's own path (None: torch's default_collate)
    # label and label_ids are kept whatever label_names says, as Transformers keeps them (collators rename them)
    keep = None if keep is None else keep | set(LABEL_KEYS) | set(config.label_names or ())
    inner = collate or None  # None: torch's default_collate, dict samples' labels renamed first

    def collate_fn(features: list[Any]) -> Any:
        dict_samples = bool(features) and type(features[0]) is not tuple and _dict_samples(features)  # (a call less)
        if keep is not None and dict_samples:
            features = [{k: v for k, v in f.items() if k in keep} for f in features]
        if inner is not None:
            return inner(features)
        return default_collate([_with_labels_renamed(f) for f in features] if dict_samples else features)

    collate_fn.hands_tuples_to_default_collate = inner is None  # (the loader's once-an-epoch check, collates_ready)
    return collate_fn


__all__ = ["LABEL_KEYS", "forward_arguments", "make_collate"]
