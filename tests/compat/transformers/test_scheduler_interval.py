"""A scheduler the user gives: when the Trainer steps it. The Transformers Trainer steps a
scheduler from ``optimizers=(opt, sched)`` after every optimizer step, and a ReduceLROnPlateau after each
evaluation on metric_for_best_model; braeburn does the same, and takes Lightning's ``{"interval": "epoch"}``."""

from __future__ import annotations

import pytest
import torch

from .. import _tiny


def _run(lib, tmp_path, make_scheduler, **overrides):
    tok = _tiny.tokenizer(tmp_path / "tok")
    rows = _tiny.tokenized(_tiny.sentence_pairs(32), tok)
    model = _tiny.bert(len(tok))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    options = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, per_device_eval_batch_size=8,
                   num_train_epochs=3, use_cpu=True, report_to="none", save_strategy="no", logging_steps=1,
                   seed=0, disable_tqdm=True)
    options.update(overrides)
    from transformers import DataCollatorWithPadding

    trainer = lib.Trainer(model=model, args=lib.TrainingArguments(**options), train_dataset=rows[:24],
                          eval_dataset=rows[24:], data_collator=DataCollatorWithPadding(tok),
                          optimizers=(optimizer, make_scheduler(optimizer)))
    trainer.train()
    return [r["learning_rate"] for r in trainer.state.log_history if "learning_rate" in r], \
        optimizer.param_groups[0]["lr"]


def test_plateau_scheduler_steps_after_each_evaluation(hf_lib, tmp_path):
    # threshold=1: never an improvement (not even the first), so every evaluation halves the rate (patience 0)
    rates, final = _run(hf_lib, tmp_path, lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, factor=0.5, patience=0, threshold=1.0), eval_strategy="epoch", metric_for_best_model="loss")
    assert final == pytest.approx(0.1 * 0.5 ** 3)
    assert rates == [pytest.approx(0.1)] * 3 + [pytest.approx(0.05)] * 3 + [pytest.approx(0.025)] * 3


def test_a_bare_step_scheduler_steps_per_optimizer_step(hf_lib, tmp_path):
    rates, _ = _run(hf_lib, tmp_path, lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5))
    assert rates == [pytest.approx(0.1 * 0.5 ** i) for i in range(9)]  # as Transformers: once per optimizer step
