"""Padding text batches to a few lengths, so kernels and compiled graphs see few shapes.

Padding each batch to its longest sequence ("dynamic padding") computes the fewest tokens, but on
a GPU every new length costs: the attention kernels plan anew for each shape (0.2-2.4 s the
first time a length is seen on an H100), a compiled graph recompiles, and the MPS graph
cache grows by one entry per shape. Padding to the longest length wastes compute on short
batches. :func:`bucket_length` takes the middle way: multiples of 16 up to 128 tokens, of 32 up
to 256, of 64 beyond: at most 8 lengths up to 128, 16 up to 512, at most 15% more tokens than
dynamic padding on lengths above 100 (MRPC: 3 lengths in place of ~29 per epoch). Devices where
each new shape costs a plan or a graph (CUDA, MPS: ``DeviceKind.new_shapes_cost``) take coarse
buckets: multiples of 64 up to 256, of 128 up to 512 (MRPC: 2 lengths).

:class:`BucketPadding` wraps any collate function whose batches are Transformers-style mappings
(``input_ids`` with an ``attention_mask`` of the same shape) and pads them further to the bucket
length; batches of other forms pass through untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils.data import default_collate

# How the keys of a Transformers batch are padded (right side). Keys not listed here make a batch
# pass through unchanged: braeburn cannot know what padding means for them.
PAD_VALUES: dict[str, int | None] = {
    "input_ids": None,  # the tokenizer's pad id, read from the batch itself
    "attention_mask": 0,
    "token_type_ids": 0,
    "position_ids": 0,
    "special_tokens_mask": 1,
    "labels": -100,  # ignored by the loss, as Transformers' collators pad labels
}


def bucket_length(length: int, limit: int | None = None, coarse: bool = False) -> int:
    """``length`` rounded up to the next bucket (16s to 128, 32s to 256, 64s beyond; ``coarse``: 64s to 256,
    128s to 512, 256s beyond), at most ``limit``."""
    if coarse:
        step = 64 if length <= 256 else 128 if length <= 512 else 256
    else:
        step = 16 if length <= 128 else 32 if length <= 256 else 64
    padded = -(-length // step) * step
    return max(length, min(padded, limit)) if limit else padded


def _pad_id(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """The id the collator padded ``input_ids`` with (0 when no position is padded)."""
    padded = attention_mask == 0
    return int(input_ids[padded][0]) if bool(padded.any()) else 0


def pad_to_bucket(batch: Any, limit: int | None = None, coarse: bool = False) -> Any:
    """``batch`` with its sequences padded on the right to :func:`bucket_length`; other batches unchanged."""
    if not isinstance(batch, Mapping):
        return batch
    ids, mask = batch.get("input_ids"), batch.get("attention_mask")
    if not (isinstance(ids, torch.Tensor) and isinstance(mask, torch.Tensor)) or ids.dim() != 2 or mask.shape != ids.shape:
        return batch
    length = ids.shape[1]
    target = bucket_length(length, limit, coarse)
    if target == length:
        return batch
    rows = ids.shape[0]
    sequences = {key: value for key, value in batch.items()
                 if isinstance(value, torch.Tensor) and value.dim() >= 2 and tuple(value.shape[:2]) == (rows, length)}
    if any(key not in PAD_VALUES for key in sequences):
        return batch
    pad_id = _pad_id(ids, mask)
    padded = dict(batch)
    for key, value in sequences.items():
        fill = pad_id if PAD_VALUES[key] is None else PAD_VALUES[key]
        extra = value.new_full((rows, target - length, *value.shape[2:]), fill)
        padded[key] = torch.cat([value, extra], dim=1)
    return _same_mapping_type(batch, padded)


def _same_mapping_type(original: Mapping, items: dict) -> Mapping:
    if type(original) is dict:
        return items
    try:  # Transformers' BatchEncoding and other dict subclasses take a dict
        return type(original)(items)
    except Exception:
        return items


class BucketPadding:
    """A collate function that pads what ``collate_fn`` (torch's default when None) returns to few lengths."""

    def __init__(self, collate_fn: Callable | None = None, limit: int | None = None, coarse: bool = False):
        self.collate_fn = collate_fn or default_collate
        self.limit, self.coarse = limit, coarse

    def __call__(self, features: list) -> Any:
        return pad_to_bucket(self.collate_fn(features), self.limit, self.coarse)

    def __repr__(self) -> str:
        return f"BucketPadding({self.collate_fn!r}, limit={self.limit})"


def position_limit(model: torch.nn.Module) -> int | None:
    """The longest sequence a Transformers model takes (its config's position limit), if it says."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def batch_signature(batch: Any) -> tuple:
    """The shapes of a batch's tensors: batches with equal signatures run the same kernels. (A shape is a
    torch.Size, a tuple: equal to, and hashed as, the tuple of its sizes.)"""
    if isinstance(batch, torch.Tensor):
        return (batch.shape,)
    if isinstance(batch, (list, tuple)):  # before the Mapping ABC, whose check costs more
        if len(batch) == 2 and type(batch[0]) is torch.Tensor and type(batch[1]) is torch.Tensor:
            return (batch[0].shape, batch[1].shape)  # (inputs, labels): the same tuple, without a comprehension
        return tuple([v.shape for v in batch if isinstance(v, torch.Tensor)])
    if isinstance(batch, Mapping):
        return tuple([(key, v.shape) for key, v in batch.items() if isinstance(v, torch.Tensor)])
    return ()


__all__ = ["BucketPadding", "PAD_VALUES", "batch_signature", "bucket_length", "pad_to_bucket", "position_limit"]
