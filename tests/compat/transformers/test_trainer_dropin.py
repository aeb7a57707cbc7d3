"""Transformers Trainer scripts, with only the import switched: the same observable results from both libraries."""

from __future__ import annotations

import numpy as np
import pytest

from .. import _tiny


def _data(tmp_path, train: int = 32, evals: int = 16):
    tok = _tiny.tokenizer(tmp_path / "tok")
    rows = _tiny.tokenized(_tiny.sentence_pairs(train + evals), tok)
    return tok, rows[:train], rows[train:]


def _args(lib, tmp_path, **overrides):
    options = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, per_device_eval_batch_size=8,
                   num_train_epochs=2, learning_rate=1e-3, use_cpu=True, report_to="none", save_strategy="no",
                   logging_steps=2, seed=0, disable_tqdm=True)
    options.update(overrides)
    return lib.TrainingArguments(**options)


def accuracy(eval_pred):
    logits, labels = eval_pred  # tuple-unpackable, numpy, as Transformers gives them
    return {"accuracy": float((np.argmax(logits, -1) == labels).mean())}


def test_train_and_evaluate_with_collator_and_numpy_metrics(hf_lib, tmp_path):
    from transformers import DataCollatorWithPadding

    tok, train, evals = _data(tmp_path)
    trainer = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=_args(hf_lib, tmp_path),
                             data_collator=DataCollatorWithPadding(tok), train_dataset=train, eval_dataset=evals,
                             compute_metrics=accuracy)
    result = trainer.train()
    global_step, training_loss, metrics = result  # TrainOutput is a tuple
    assert global_step == 8 and np.isfinite(training_loss)
    assert {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "epoch"} <= set(metrics)
    evaluated = trainer.evaluate()
    assert {"eval_loss", "eval_accuracy", "eval_runtime", "eval_samples_per_second", "eval_steps_per_second",
            "epoch"} <= set(evaluated)
    history = trainer.state.log_history
    assert any("loss" in r and "learning_rate" in r for r in history)
    assert any("train_runtime" in r for r in history) and "eval_accuracy" in history[-1]


def test_processing_class_without_collator_pads(hf_lib, tmp_path):
    tok, train, evals = _data(tmp_path)
    trainer = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=_args(hf_lib, tmp_path, max_steps=2),
                             processing_class=tok, train_dataset=train, eval_dataset=evals)
    trainer.train()
    assert "eval_loss" in trainer.evaluate()


def test_predict_returns_numpy(hf_lib, tmp_path):
    tok, train, evals = _data(tmp_path)
    trainer = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=_args(hf_lib, tmp_path), processing_class=tok,
                             compute_metrics=accuracy)
    predictions, label_ids, metrics = trainer.predict(evals)
    assert isinstance(predictions, np.ndarray) and predictions.shape == (16, 2)
    assert isinstance(label_ids, np.ndarray) and label_ids.tolist() == [r["label"] for r in evals]
    assert {"test_loss", "test_accuracy", "test_runtime"} <= set(metrics)


def test_load_best_model_and_early_stopping(hf_lib, tmp_path):
    tok, train, evals = _data(tmp_path)
    args = _args(hf_lib, tmp_path, num_train_epochs=20, learning_rate=1e-12, eval_strategy="epoch",
                 save_strategy="epoch", load_best_model_at_end=True, metric_for_best_model="accuracy")
    assert args.greater_is_better is True  # inferred from the metric's name, as in Transformers
    trainer = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=args, processing_class=tok, train_dataset=train,
                             eval_dataset=evals, compute_metrics=accuracy,
                             callbacks=[hf_lib.EarlyStoppingCallback(early_stopping_patience=1)])
    trainer.train()
    assert trainer.state.global_step == 8  # a learning rate of 1e-12 never improves: stopped after 2 epochs
    best = trainer.state.best_model_checkpoint
    assert best is not None and best.endswith("checkpoint-4")


def test_save_model_then_from_pretrained(hf_lib, tmp_path):
    from transformers import AutoModelForSequenceClassification

    tok, train, evals = _data(tmp_path)
    trainer = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=_args(hf_lib, tmp_path, max_steps=2),
                             processing_class=tok, train_dataset=train)
    trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    files = {p.name for p in (tmp_path / "saved").iterdir()}
    assert {"config.json", "model.safetensors", "training_args.bin", "tokenizer_config.json"} <= files
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved")
    trained = trainer.model.state_dict()
    assert all(np.allclose(v.cpu().numpy(), trained[k].cpu().numpy()) for k, v in reloaded.state_dict().items())


def test_callback_hooks_and_control(hf_lib, tmp_path):
    calls = []

    class Recorder(hf_lib.TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            calls.append(("train_begin", state.global_step, "model" in kwargs))

        def on_step_begin(self, args, state, control, **kwargs):
            calls.append(("step_begin", state.global_step))

        def on_step_end(self, args, state, control, **kwargs):
            calls.append(("step_end", state.global_step))
            if state.global_step == 3:
                control.should_training_stop = True
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            if "loss" in (logs or {}):
                calls.append(("log", state.global_step))

        def on_train_end(self, args, state, control, **kwargs):
            calls.append(("train_end", state.global_step))

    tok, train, evals = _data(tmp_path)
    trainer = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=_args(hf_lib, tmp_path), processing_class=tok,
                             train_dataset=train, callbacks=[Recorder()])
    trainer.train()
    assert trainer.state.global_step == 3
    assert calls[:4] == [("train_begin", 0, True), ("step_begin", 0), ("step_end", 1), ("step_begin", 1)]
    assert ("log", 2) in calls and calls[-1] == ("train_end", 3)


def test_resume_from_checkpoint_true(hf_lib, tmp_path):
    tok, train, evals = _data(tmp_path)
    args = _args(hf_lib, tmp_path, max_steps=4, save_strategy="steps", save_steps=2)
    first = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=args, processing_class=tok, train_dataset=train)
    first.train()
    args = _args(hf_lib, tmp_path, max_steps=6, save_strategy="steps", save_steps=2)
    second = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=args, processing_class=tok, train_dataset=train)
    result = second.train(resume_from_checkpoint=True)
    assert result.global_step == 6
    assert [r["step"] for r in second.state.log_history if "loss" in r] == [2, 4, 6]


def test_run_glue_flags_parse(hf_lib, tmp_path):
    """The run_glue command line flags the issue lists, through HfArgumentParser."""
    from dataclasses import dataclass, field

    @dataclass
    class DataTrainingArguments:
        task_name: str | None = field(default=None, metadata={"help": "GLUE task"})
        max_seq_length: int = 128

    argv = ["--task_name", "mrpc", "--output_dir", str(tmp_path / "o"), "--do_train", "--do_eval", "--bf16",
            "--report_to", "none", "--load_best_model_at_end", "--eval_strategy", "epoch", "--save_strategy",
            "epoch", "--gradient_checkpointing", "--torch_compile", "--optim", "adamw_torch", "--logging_strategy",
            "steps", "--label_smoothing_factor", "0.1", "--dataloader_pin_memory", "--full_determinism",
            "--save_only_model", "false", "--data_seed", "3", "--logging_first_step", "--disable_tqdm", "true",
            "--run_name", "glue", "--remove_unused_columns", "--use_cpu", "--metric_for_best_model", "accuracy"]
    data_args, args = hf_lib.HfArgumentParser((DataTrainingArguments, hf_lib.TrainingArguments)) \
        .parse_args_into_dataclasses(args=argv)
    assert data_args.task_name == "mrpc" and args.bf16 and args.torch_compile and args.gradient_checkpointing
    assert args.optim == "adamw_torch" and args.label_smoothing_factor == 0.1 and args.data_seed == 3
    assert args.run_name == "glue" and args.disable_tqdm and args.greater_is_better is True
    assert args.report_to in ("none", ["none"], [])
    assert args.train_batch_size == 8 and args.should_log and args.get_process_log_level() >= 0
    with args.main_process_first(desc="dataset map pre-processing"):
        pass


@pytest.mark.parametrize("report_to", ["none", "all", None])
def test_report_to_assigned_after_the_arguments_were_made_trains_as_transformers(hf_lib, tmp_path, report_to):
    """`args.report_to = "none"` after TrainingArguments(...) (no __post_init__ stores it): Transformers' Trainer
    reads it as given; braeburn's read the string letter by letter ("report_to='n': choose from none, ...")."""
    tok, train, _ = _data(tmp_path, train=8, evals=0)
    args = _args(hf_lib, tmp_path, max_steps=1)
    args.report_to = report_to
    trainer = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=args, processing_class=tok, train_dataset=train)
    assert trainer.train().global_step == 1
