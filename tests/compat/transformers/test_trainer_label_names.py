"""Labels not named ``labels``: question answering's ``start_positions``/``end_positions`` and
``--label_names``. The Transformers Trainer finds them from the model's forward (or takes ``label_names``), so
evaluation has a loss and metrics, predictions and label_ids are tuples in output order, and the best model is
tracked on that loss."""

from __future__ import annotations

import numpy as np
import torch

from .. import _tiny


def _qa_model(vocab_size: int):
    from transformers import BertConfig, BertForQuestionAnswering

    torch.manual_seed(0)
    config = BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    return BertForQuestionAnswering(config)


def _qa_rows(tok, count: int) -> list[dict]:
    rows = []
    for row in _tiny.tokenized(_tiny.sentence_pairs(count), tok, max_length=16):
        length = len(row["input_ids"])
        rows.append({"input_ids": row["input_ids"], "attention_mask": row["attention_mask"],
                     "start_positions": 1, "end_positions": min(3, length - 1)})
    return rows


def _args(lib, tmp_path, **overrides):
    options = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, per_device_eval_batch_size=8,
                   num_train_epochs=2, learning_rate=1e-3, use_cpu=True, report_to="none", save_strategy="no",
                   logging_steps=2, seed=0, disable_tqdm=True)
    options.update(overrides)
    return lib.TrainingArguments(**options)


def _trainer(lib, tmp_path, seen: list, **overrides):
    from transformers import DataCollatorWithPadding

    tok = _tiny.tokenizer(tmp_path / "tok")

    def metrics(eval_pred):
        start_logits, end_logits = eval_pred.predictions  # the two arrays, not the keys of a dict
        start_ids, end_ids = eval_pred.label_ids
        seen.append((type(eval_pred.predictions), start_logits.shape, type(eval_pred.label_ids), start_ids.shape))
        return {"exact": float(((start_logits.argmax(-1) == start_ids) & (end_logits.argmax(-1) == end_ids)).mean())}

    return lib.Trainer(model=_qa_model(len(tok)), args=_args(lib, tmp_path, **overrides),
                       data_collator=DataCollatorWithPadding(tok), train_dataset=_qa_rows(tok, 16),
                       eval_dataset=_qa_rows(tok, 12), compute_metrics=metrics)


def test_question_answering_eval_has_loss_metrics_and_tuples(hf_lib, tmp_path):
    seen: list = []
    trainer = _trainer(hf_lib, tmp_path, seen)
    assert list(trainer.label_names) == ["start_positions", "end_positions"]
    metrics = trainer.evaluate()
    assert np.isfinite(metrics["eval_loss"]) and "eval_exact" in metrics
    predictions_type, start_shape, labels_type, start_ids_shape = seen[-1]
    assert predictions_type is tuple and labels_type is tuple
    assert start_shape[0] == 12 and start_ids_shape == (12,)
    predictions, label_ids, test_metrics = trainer.predict(trainer.eval_dataset)
    assert isinstance(predictions, tuple) and len(predictions) == 2 and isinstance(label_ids, tuple)
    assert "test_loss" in test_metrics


def test_question_answering_loads_the_best_model(hf_lib, tmp_path):
    trainer = _trainer(hf_lib, tmp_path, [], eval_strategy="epoch", save_strategy="epoch",
                       load_best_model_at_end=True)
    trainer.train()
    assert trainer.state.best_metric is not None  # eval_loss, Transformers' default metric_for_best_model
    assert trainer.state.best_model_checkpoint is not None


def test_label_names_argument_picks_the_label_key(hf_lib, tmp_path):
    seen: list = []
    trainer = _trainer(hf_lib, tmp_path, seen, label_names=["start_positions", "end_positions"])
    assert "eval_loss" in trainer.evaluate() and seen
