"""What a Transformers callback reads from the Trainer's state, and when: the same as under Transformers'
Trainer (on_save when the checkpoint is written, a fractional epoch, best_model_checkpoint only when asked
for, evaluation every logging_steps, train_loss on a finished resume)."""

from __future__ import annotations

import os
import time

from .. import _tiny


def _trainer(hf_lib, tmp_path, callbacks=(), **overrides):
    tok = _tiny.tokenizer(tmp_path / "tok")
    rows = _tiny.tokenized(_tiny.sentence_pairs(48), tok)
    options = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_train_epochs=1,
                   learning_rate=1e-3, use_cpu=True, report_to="none", save_strategy="no", logging_steps=2,
                   seed=0, disable_tqdm=True)
    options.update(overrides)
    return hf_lib.Trainer(model=_tiny.bert(len(tok)), args=hf_lib.TrainingArguments(**options),
                          processing_class=tok, train_dataset=rows[:32], eval_dataset=rows[32:],
                          callbacks=list(callbacks))


def test_on_save_fires_when_its_checkpoint_is_written(hf_lib, tmp_path):
    saves = []

    class Recorder(hf_lib.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            saves.append((state.global_step, os.path.isdir(folder)))

        def on_step_end(self, args, state, control, **kwargs):
            time.sleep(0.05)  # a background write finishes within the next step or two

    _trainer(hf_lib, tmp_path, [Recorder()], max_steps=6, save_strategy="steps", save_steps=2).train()
    assert saves == [(2, True), (4, True), (6, True)]


def test_epoch_is_fractional(hf_lib, tmp_path):
    epochs = []

    class Recorder(hf_lib.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            epochs.append(state.epoch)

    trainer = _trainer(hf_lib, tmp_path, [Recorder()], num_train_epochs=2)
    trainer.train()
    assert epochs == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]
    assert trainer.state.epoch == 2.0


def test_best_model_checkpoint_only_when_asked_for(hf_lib, tmp_path):
    trainer = _trainer(hf_lib, tmp_path, max_steps=4, eval_strategy="steps", eval_steps=2, save_strategy="steps",
                       save_steps=2)
    trainer.train()
    assert trainer.state.best_model_checkpoint is None  # no metric_for_best_model, no load_best_model_at_end
    asked = _trainer(hf_lib, tmp_path / "asked", max_steps=4, eval_strategy="steps", eval_steps=2,
                     save_strategy="steps", save_steps=2, metric_for_best_model="loss")
    asked.train()
    best = asked.state.best_model_checkpoint
    assert best is not None and os.path.isdir(best) and os.path.basename(best) in ("checkpoint-2", "checkpoint-4")


def test_best_model_checkpoint_never_names_an_unwritten_folder(hf_lib, tmp_path):
    trainer = _trainer(hf_lib, tmp_path, max_steps=4, eval_strategy="steps", eval_steps=1, save_strategy="steps",
                       save_steps=4, metric_for_best_model="loss")
    trainer.train()
    best = trainer.state.best_model_checkpoint
    assert best is None or os.path.isdir(best)


def test_eval_steps_default_to_logging_steps(hf_lib, tmp_path):
    trainer = _trainer(hf_lib, tmp_path, max_steps=6, logging_steps=3, eval_strategy="steps")
    trainer.train()
    assert [r["step"] for r in trainer.state.log_history if "eval_loss" in r] == [3, 6]


def test_train_loss_on_a_finished_resume_is_zero(hf_lib, tmp_path):
    _trainer(hf_lib, tmp_path, max_steps=4, save_strategy="steps", save_steps=4).train()
    result = _trainer(hf_lib, tmp_path, max_steps=4, save_strategy="steps", save_steps=4) \
        .train(resume_from_checkpoint=True)
    assert result.global_step == 4 and result.training_loss == 0.0 and result.metrics["train_loss"] == 0.0
