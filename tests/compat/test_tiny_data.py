"""The conformance suite's stand-in data reaches the model: its tokenizer knows every word the sentence pairs use,
so a comparison of losses between braeburn and a peer sees the text, not a row of [UNK]."""

from __future__ import annotations

import pytest

from . import _tiny

pytest.importorskip("transformers", reason="the tiny tokenizer is a Transformers tokenizer")


def test_the_tiny_tokenizer_knows_every_word_of_the_sentence_pairs(tmp_path):
    tok = _tiny.tokenizer(tmp_path)
    rows = _tiny.tokenized(_tiny.sentence_pairs(64), tok)
    ids = {token for row in rows for token in row["input_ids"]}
    assert tok.unk_token_id not in ids
    assert len(ids) > len(_tiny.WORDS) // 2  # the words, not a handful of special tokens
    first = rows[0]
    words = first["sentence1"].split() + first["sentence2"].split()
    assert tok.convert_ids_to_tokens(first["input_ids"]) == ["[CLS]", *first["sentence1"].split(), "[SEP]",
                                                             *first["sentence2"].split(), "[SEP]"]
    assert len(first["input_ids"]) == len(words) + 3
