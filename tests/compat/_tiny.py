"""Tiny local stand-ins for what the peers' examples download: a WordPiece tokenizer, a 1-layer BERT, MRPC-like
sentence pairs, and random images. Everything is built on the spot, offline, in well under a second."""

from __future__ import annotations

import random
from pathlib import Path

import torch

WORDS = ("the cat dog sat ran on mat log a big small red blue house tree car fast slow happy sad good bad "
         "is was and or not very").split()


def tokenizer(folder: Path):
    """A WordPiece tokenizer whose vocabulary covers every word of :func:`sentence_pairs` (no ``[UNK]``)."""
    import inspect

    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    if "vocab" in inspect.signature(BertTokenizerFast.__init__).parameters:  # Transformers 5 ignores vocab_file
        return BertTokenizerFast(vocab={token: index for index, token in enumerate(tokens)}, do_lower_case=True)
    return BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)


def bert(vocab_size: int, seed: int = 0):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=2)
    return BertForSequenceClassification(config)


def sentence_pairs(count: int, seed: int = 0) -> list[dict]:
    """MRPC-like rows: two sentences and whether they match (label 1 when they share their first word)."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        first = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        second = list(first) if index % 2 else [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        rng.shuffle(second[1:])
        rows.append({"sentence1": " ".join(first), "sentence2": " ".join(second), "label": int(index % 2),
                     "idx": index})
    return rows


def tokenized(rows: list[dict], tok, max_length: int = 32) -> list[dict]:
    """What run_glue's preprocess_function gives: the raw columns kept, token ids added."""
    out = []
    for row in rows:
        encoded = tok(row["sentence1"], row["sentence2"], truncation=True, max_length=max_length)
        out.append({**row, **encoded})
    return out


def images(count: int, size: int = 16, classes: int = 3, seed: int = 0) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % classes
    pixels = torch.randn(count, 3, size, size, generator=generator) * 0.3 + labels.view(-1, 1, 1, 1).float()
    return torch.utils.data.TensorDataset(pixels, labels)


def small_cnn(classes: int = 3, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, classes))
