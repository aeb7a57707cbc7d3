"""Checks of what a user hands the Trainer, made where it enters, so a mistake reads as one clear error.

Without them an empty dataset fails inside torch's sampler, float token ids inside ``nn.Embedding``,
and a label outside the class range inside ``cross_entropy`` (on CUDA as a device-side assert that
names nothing). The dataset checks run once before training; the batch checks run on the first
training batch only: dtypes are host metadata (free), the label range costs one device sync, once.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch

IGNORE_INDEX = -100  # what cross_entropy (and Transformers' losses) skip
NO_CONTEXT = contextlib.nullcontext()  # reusable: the batches after the first pay no check


def _refuse_iterable(dataset: Any, name: str) -> None:
    """TypeError for a dataset the Trainer cannot index: it shuffles, shards across processes and resumes
    mid-epoch by sample position, and counts its steps from the length."""
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    if not iterable and hasattr(dataset, "__len__"):
        return
    what = "a torch IterableDataset (a stream)" if iterable else "an object with no len()"
    raise TypeError(f"{name} is {what} ({type(dataset).__name__}): the Trainer reads samples by index (it shuffles, "
                    "splits them among processes and resumes a run mid-epoch by position) and counts its steps from "
                    "the dataset's length, which a stream does not give. Pass a map-style dataset, one with __len__ "
                    "and __getitem__: a Hugging Face datasets.Dataset (not IterableDataset), a TensorDataset, or "
                    "the first N samples as a list (list(itertools.islice(stream, N))); or train on the stream with "
                    "braeburn's Accelerator in your own loop")


def check_datasets(train_dataset: Any, eval_dataset: Any, eval_strategy: str) -> None:
    """Raise ValueError (TypeError for a stream) naming the dataset and the fix, before any DataLoader is built."""
    _refuse_iterable(train_dataset, "train_dataset")
    if len(train_dataset) == 0:
        raise ValueError("train_dataset is empty (0 samples): there is nothing to train on. Check the path or "
                         "filter that built it, or pass Trainer(..., train_dataset=...) a dataset with samples.")
    if eval_strategy != "no" and eval_dataset is None:
        raise ValueError(f"eval_strategy={eval_strategy!r} asks for evaluation during training, but no "
                         "eval_dataset was given. Pass Trainer(..., eval_dataset=...), or --eval_strategy no.")
    if isinstance(eval_dataset, dict):
        raise ValueError(f"eval_dataset is a dict of {len(eval_dataset)} datasets ({', '.join(map(str, eval_dataset))}); "
                         "braeburn's Trainer evaluates one eval_dataset during training. Pass the one the run should "
                         "be judged on as eval_dataset, and evaluate the others after training with "
                         "trainer.evaluate(eval_dataset={name: dataset, ...}) (metrics eval_<name>_loss, as "
                         "Transformers names them).")
    if eval_strategy != "no" and not hasattr(eval_dataset, "__len__"):
        _refuse_iterable(eval_dataset, "eval_dataset")
    if eval_strategy != "no" and len(eval_dataset) == 0:
        raise ValueError(f"eval_dataset is empty (0 samples), and eval_strategy={eval_strategy!r} evaluates on it. "
                         "Pass an eval_dataset with samples, or --eval_strategy no.")


def _describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')} of shape {list(tensor.shape)}"


def check_batch_inputs(kwargs: Mapping[str, Any]) -> None:
    """Token ids (``input_ids``, ``token_type_ids``, ``*_ids``) must be integers: nn.Embedding takes nothing else."""
    for name, value in kwargs.items():
        if name.endswith("_ids") and name != "labels" and isinstance(value, torch.Tensor) \
                and (value.is_floating_point() or value.is_complex()):
            raise TypeError(f"The training batch's {name!r} is {_describe(value)}: token ids must be integers "
                            f"(torch.long), since the model looks them up in an embedding table. Build them with "
                            f"torch.tensor(ids, dtype=torch.long) in the dataset or collate_fn (not float).")


def _logits(outputs: Any) -> torch.Tensor | None:
    if isinstance(outputs, torch.Tensor):
        return outputs
    logits = outputs.get("logits") if isinstance(outputs, Mapping) else getattr(outputs, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else None


def check_labels(outputs: Any, labels: Any) -> None:
    """Integer labels must index the model's class dimension (one device sync, on the first batch only)."""
    logits = _logits(outputs)
    if not isinstance(labels, torch.Tensor) or logits is None or labels.is_floating_point() or labels.is_complex():
        return
    if labels.dtype == torch.bool or logits.dim() < 2 or labels.shape != logits.shape[:-1] or labels.numel() == 0:
        return  # not class indices for this output (segmentation maps, multi-label targets, ...)
    classes = logits.shape[-1]
    counted = labels[labels != IGNORE_INDEX]
    if counted.numel() == 0:
        return
    low, high = int(counted.min()), int(counted.max())  # one sync, once per train()
    if low < 0 or high >= classes:
        raise ValueError(f"The first training batch has labels from {low} to {high}, but the model outputs "
                         f"{classes} classes (logits {_describe(logits)}), so labels must be in 0..{classes - 1} "
                         f"(or {IGNORE_INDEX} to ignore a position). Map the labels to 0..{classes - 1} in the "
                         f"dataset, or build the model with num_classes (num_labels) = {high + 1} or more.")


def _whole_numbers(labels: Any) -> tuple[float, float] | None:
    """(lowest, highest) when ``labels`` is a float tensor of whole numbers >= 0: class indices kept as floats."""
    if not isinstance(labels, torch.Tensor) or not labels.is_floating_point() or labels.numel() == 0:
        return None
    if not bool(torch.equal(labels, labels.round())) or float(labels.min()) < 0:  # syncs, only after a failure
        return None
    return float(labels.min()), float(labels.max())


# torch's words when a class-index loss (cross_entropy, nll_loss) gets a float target: "expected target dtype to be Long
# or Byte, but got Float" since torch 2.13, "expected scalar type Long but found Float" before (torch 2.11 on the GPU
# machine; older torch: "Expected object of scalar type Long but got scalar type Float for argument #2 'target'").
_TARGET_REFUSED = re.compile(r"target|scalar type long but found", re.IGNORECASE)


@contextlib.contextmanager
def float_labels_explained(labels: Any) -> Iterator[None]:
    """Around the first training batch's forward and loss: when the loss refuses its target (torch's error names
    the target) and the labels are floats holding whole numbers (class indices as numpy or pandas often give
    them, float64 cast to float32 on every device), one error with the fix, the same on every device."""
    try:
        yield
    except (RuntimeError, ValueError) as error:
        found = _whole_numbers(labels) if _TARGET_REFUSED.search(str(error)) else None
        if found is None:
            raise
        torch_said = str(error).strip().splitlines()[0]
        raise TypeError(f"The training batch's labels are {_describe(labels)} holding whole numbers ({found[0]:g} "
                        f"to {found[1]:g}), and the loss refused them as its target (torch: {torch_said}). Class "
                        "labels must be integers: build them with dtype=torch.long (torch.tensor(y, dtype=torch.long), "
                        "or y.astype('int64') in numpy). A loss that wants float targets (BCE, MSE) needs a model "
                        "output of the labels' shape.") from None


__all__ = ["NO_CONTEXT", "check_batch_inputs", "check_datasets", "check_labels", "float_labels_explained"]
