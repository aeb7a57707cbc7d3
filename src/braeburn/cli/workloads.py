"""Built-in training workloads for `braeburn bench`: a small MLP, a small CNN, a BERT-base step and a
GPT-2-small step, each in a "full" size (the real model) and a "tiny" size (for CI, seconds on a CPU).

Each workload builds its model on the CPU, one synthetic batch, and the loss of a training step. Its
FLOPs per sample (forward + backward, matmuls, convolutions and attention) are counted once by
running one step under torch's ``FlopCounterMode``, so MFU needs no hand-written formula. BERT and
GPT-2 are built from their configs with `transformers` (no download); it is an optional extra.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

SIZES = ("tiny", "full")
TRANSFORMERS_MISSING = ("the {name} workload builds its model with the `transformers` package, which is not "
                        "installed: pip install 'braeburn[examples]' (or pip install transformers)")


@dataclass
class BuiltWorkload:
    """A model on the CPU, a batch maker and the step's loss."""

    model: nn.Module
    make_batch: Callable[[int], tuple]  # batch size -> tensors on the CPU
    loss: Callable[[nn.Module, tuple], torch.Tensor]
    batch_size: int  # the default for this size
    sample: str  # what one sample is, for the report ("1 image 3x32x32", "128 tokens")


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build: Callable[[str], BuiltWorkload]
    needs: str | None = None  # an optional package the workload imports

    def missing_dependency(self) -> str | None:
        """Why this workload cannot be built here (a missing extra), or None."""
        if self.needs is None:
            return None
        try:
            __import__(self.needs)
        except ImportError:
            return TRANSFORMERS_MISSING.format(name=self.name)
        return None


def _classification_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    inputs, labels = batch
    return nn.functional.cross_entropy(model(inputs), labels)


def _build_mlp(size: str) -> BuiltWorkload:
    width, depth, features, batch = (2048, 2, 784, 256) if size == "full" else (64, 2, 32, 32)
    layers: list[nn.Module] = []
    for index in range(depth):
        layers += [nn.Linear(features if index == 0 else width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    return BuiltWorkload(model, lambda n: (torch.randn(n, features), torch.randint(0, 10, (n,))),
                         _classification_loss, batch, f"{features} features")


def _build_cnn(size: str) -> BuiltWorkload:
    (c1, c2, c3), image, batch = ((32, 64, 128), 32, 128) if size == "full" else ((4, 8, 8), 16, 8)
    model = nn.Sequential(
        nn.Conv2d(3, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(),
        nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c2, c3, 3, padding=1), nn.BatchNorm2d(c3), nn.ReLU(), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c3, 10))
    return BuiltWorkload(model, lambda n: (torch.randn(n, 3, image, image), torch.randint(0, 10, (n,))),
                         _classification_loss, batch, f"1 image 3x{image}x{image}")


def _language_model_loss(model: nn.Module, batch: tuple) -> torch.Tensor:
    (tokens,) = batch
    return model(input_ids=tokens, labels=tokens).loss


def _token_batches(vocab: int, seq: int) -> Callable[[int], tuple]:
    return lambda n: (torch.randint(0, vocab, (n, seq)),)


def _build_bert(size: str) -> BuiltWorkload:
    from transformers import BertConfig, BertForMaskedLM

    if size == "full":  # bert-base-uncased's dimensions
        config, seq, batch = BertConfig(), 128, 16
    else:
        config, seq, batch = BertConfig(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=64, max_position_embeddings=64), 16, 4
    model = BertForMaskedLM(config)
    return BuiltWorkload(model, _token_batches(config.vocab_size, seq), _language_model_loss, batch,
                         f"{seq} tokens (masked-LM step)")


def _build_gpt2(size: str) -> BuiltWorkload:
    from transformers import GPT2Config, GPT2LMHeadModel

    if size == "full":  # GPT-2 small (124M)
        config, seq, batch = GPT2Config(), 256, 8
    else:
        config, seq, batch = GPT2Config(vocab_size=512, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                        bos_token_id=0, eos_token_id=0), 16, 4
    model = GPT2LMHeadModel(config)
    return BuiltWorkload(model, _token_batches(config.vocab_size, seq), _language_model_loss, batch,
                         f"{seq} tokens (causal-LM step)")


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("mlp", "MLP, 2 hidden layers of 2048 (tiny: 64)", _build_mlp),
    Workload("cnn", "CNN, 3 conv layers with batch norm on 32x32 images (tiny: 16x16)", _build_cnn),
    Workload("bert-base", "BERT-base masked-LM step, 128 tokens (tiny: 2 layers of 32)", _build_bert, "transformers"),
    Workload("gpt2-small", "GPT-2 small causal-LM step, 256 tokens (tiny: 2 layers of 32)", _build_gpt2,
             "transformers"),
)}


def get_workload(name: str) -> Workload:
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)} or all")
    return WORKLOADS[name]


def build(name: str, size: str, seed: int = 0) -> BuiltWorkload:
    """Build ``name`` at ``size`` on the CPU, with weights from ``seed``."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
    workload = get_workload(name)
    missing = workload.missing_dependency()
    if missing:
        raise ImportError(missing)
    torch.manual_seed(seed)
    return workload.build(size)


def training_flops_per_sample(built: BuiltWorkload, batch_size: int = 1) -> float:
    """FLOPs of one training step (forward + backward) per sample, counted by torch on the CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    batch = built.make_batch(batch_size)
    counter = FlopCounterMode(display=False)
    with counter:
        built.loss(built.model, batch).backward()
    built.model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch_size


def to_device(batch: tuple, device: Any) -> tuple:
    return tuple(t.to(device) for t in batch)


__all__ = ["BuiltWorkload", "SIZES", "WORKLOADS", "Workload", "build", "get_workload", "to_device",
           "training_flops_per_sample"]
