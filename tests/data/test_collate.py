"""Text batches are padded to a few lengths, and only batches whose padding braeburn understands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from braeburn.data.collate import BucketPadding, bucket_length, pad_to_bucket, position_limit

ROOT = Path(__file__).resolve().parents[2]
MRPC = ROOT.parent / "shared" / "data" / "glue" / "MRPC"


def test_bucket_lengths():
    assert [bucket_length(n) for n in (1, 16, 17, 100, 128, 129, 200, 257, 500)] == \
        [16, 16, 32, 112, 128, 160, 224, 320, 512]
    assert len({bucket_length(n) for n in range(1, 129)}) == 8
    assert len({bucket_length(n) for n in range(1, 513)}) == 16
    assert bucket_length(100, limit=104) == 104 and bucket_length(120, limit=100) == 120  # never cut
    assert [bucket_length(n, coarse=True) for n in (1, 64, 65, 103, 257, 600)] == [64, 64, 128, 128, 384, 768]


def test_pads_every_sequence_key_with_its_own_value():
    ids = torch.tensor([[5, 6, 7], [8, 9, 1]])  # 1 is this tokenizer's pad id
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
             "labels": torch.tensor([[5, 6, 7], [8, 9, -100]]), "score": torch.tensor([0.5, 1.0])}
    padded = pad_to_bucket(batch)
    assert padded["input_ids"].shape == (2, 16)
    assert padded["input_ids"][0, 3:].eq(1).all() and padded["attention_mask"][:, 3:].eq(0).all()
    assert padded["labels"][:, 3:].eq(-100).all() and padded["token_type_ids"][:, 3:].eq(0).all()
    assert torch.equal(padded["input_ids"][:, :3], ids) and torch.equal(padded["score"], batch["score"])


def test_leaves_batches_it_cannot_pad_safely_alone():
    ids = torch.ones(2, 5, dtype=torch.long)
    unknown = {"input_ids": ids, "attention_mask": ids, "my_positions": ids}  # what padding means is unknown
    assert pad_to_bucket(unknown) is unknown
    no_mask = {"input_ids": ids}
    assert pad_to_bucket(no_mask) is no_mask
    images = (torch.randn(2, 3, 8, 8), torch.tensor([0, 1]))
    assert pad_to_bucket(images) is images
    already = {"input_ids": torch.ones(2, 16, dtype=torch.long), "attention_mask": torch.ones(2, 16)}
    assert pad_to_bucket(already) is already


def test_position_limit_caps_the_bucket():
    class Config:
        max_position_embeddings = 20

    model = torch.nn.Linear(1, 1)
    model.config = Config()
    assert position_limit(model) == 20
    batch = {"input_ids": torch.ones(1, 18, dtype=torch.long), "attention_mask": torch.ones(1, 18, dtype=torch.long)}
    assert BucketPadding(lambda features: batch, limit=20)([None])["input_ids"].shape == (1, 20)


@pytest.mark.skipif(not (MRPC / "train.tsv").is_file(), reason="needs ../shared/data/glue/MRPC beside the checkout")
def test_mrpc_batches_take_at_most_four_lengths_instead_of_dozens(tmp_path):
    """The text example's collation (longest in the batch) over MRPC, shuffled as the Trainer does."""
    sys.path.insert(0, str(ROOT / "examples"))
    from _text import read_glue_tsv, word_tokenizer
    from text_classification import pad_batch

    examples = read_glue_tsv(MRPC / "train.tsv", "mrpc")
    tokenizer = word_tokenizer(examples.first + examples.second, tmp_path / "vocab")
    encoded = tokenizer(examples.first, examples.second, truncation=True, max_length=128)
    features = [{"input_ids": encoded["input_ids"][i], "attention_mask": encoded["attention_mask"][i], "labels": 0}
                for i in range(len(examples))]
    collate = BucketPadding(lambda batch: pad_batch(batch, tokenizer.pad_token_id))
    order = torch.randperm(len(features), generator=torch.Generator().manual_seed(0)).tolist()
    raw, bucketed = set(), set()
    for start in range(0, len(order), 32):
        batch = [features[i] for i in order[start:start + 32]]
        raw.add(pad_batch(batch, tokenizer.pad_token_id)["input_ids"].shape[1])
        bucketed.add(collate(batch)["input_ids"].shape[1])
    assert len(raw) > 20 and len(bucketed) <= 4


def test_the_summary_names_text_padding_only_for_text_batches():
    from braeburn.data.collate import batch_signature
    from braeburn.trainer.summary import _padded_text

    text = batch_signature({"input_ids": torch.zeros(8, 64), "attention_mask": torch.zeros(8, 64)})
    images = batch_signature((torch.zeros(32, 1, 8, 8), torch.zeros(32)))
    scalar = batch_signature((torch.zeros(32, 4), torch.tensor(3.0)))  # a 0-d tensor has the shape ()
    assert _padded_text({text, images}) and not _padded_text({images, scalar})
