"""braeburn's side of the drop-in (docs/migrating.md): refusals, mappings, trackers, checkpoint naming, schedules.
What both libraries do alike is in tests/compat/<peer>/."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import braeburn
from braeburn.plan.rules import PlanError
from braeburn import TrainingArguments, TrainingConfig
from braeburn.trainer import parse_config
from braeburn.trainer._argparse import ConfigError
from braeburn.trainer.optim import schedule_factor


def test_training_config_is_training_arguments_with_braeburns_defaults():
    assert braeburn.TrainingArguments is TrainingArguments and issubclass(TrainingConfig, TrainingArguments)
    assert [f.name for f in dataclasses.fields(TrainingConfig)] == [f.name for f in dataclasses.fields(TrainingArguments)]
    ours, theirs = TrainingConfig(), TrainingArguments()
    assert (ours.logging_steps, ours.save_strategy) == (50, "epoch")
    assert (theirs.logging_steps, theirs.save_strategy, theirs.save_steps) == (500, "steps", 500)  # Transformers'


def test_hf_spellings_map_onto_braeburn_options():
    args = TrainingArguments(bf16=True, torch_compile=True, fsdp="full_shard auto_wrap", report_to="none",
                             metric_for_best_model="f1", gradient_checkpointing_kwargs='{"use_reentrant": false}')
    assert (args.mixed_precision, args.compile, args.strategy) == ("bf16", "true", "fsdp")
    assert args.report_to == [] and args.greater_is_better is True  # "none" stored as Transformers stores it: []
    assert args.gradient_checkpointing_kwargs == {"use_reentrant": False}
    assert TrainingArguments(fp16=True).mixed_precision == "fp16"
    assert TrainingArguments(torch_compile=False).compile == "false" and TrainingArguments().compile == "auto"
    assert TrainingArguments().greater_is_better is None  # no metric_for_best_model, as in Transformers


def test_unsupported_fields_are_refused_all_at_once(tmp_path):
    with pytest.raises(ConfigError) as caught:
        parse_config(TrainingConfig, argv=["--deepspeed", "ds.json", "--push_to_hub", "--use_liger_kernel",
                                           "--bf16", "--fp16", "--output_dir", str(tmp_path)],
                     exit_on_error=False, check_plan=False)
    text = str(caught.value)
    assert "deepspeed='ds.json'" in text and "--strategy fsdp" in text
    assert "push_to_hub=True" in text and "huggingface-cli upload" in text
    assert "use_liger_kernel=True" in text and "both set" in text


def test_unsupported_fields_at_their_defaults_are_fine_and_hidden_from_help(capsys):
    assert TrainingArguments(push_to_hub=False, ddp_timeout=1800, dataloader_pin_memory=True).validate() == []
    with pytest.raises(SystemExit):
        parse_config(TrainingConfig, argv=["--help"])
    shown = capsys.readouterr().out
    assert "--bf16" in shown and "--deepspeed" not in shown


def test_load_best_model_needs_matching_strategies():
    errors = TrainingArguments(load_best_model_at_end=True, eval_strategy="epoch", save_strategy="steps").validate()
    assert any("--save_strategy to match --eval_strategy" in str(e) for e in errors)


def test_unknown_or_missing_tracker_is_named():
    with pytest.raises(ConfigError, match="report_to='slack'"):
        errors = TrainingArguments(report_to="slack").validate()
        raise ConfigError(errors)
    from braeburn.accelerator.trackers import resolve_log_with

    with pytest.raises(ValueError, match="no tracker of that name"):
        resolve_log_with("slack")
    if not __import__("importlib").util.find_spec("wandb"):
        with pytest.raises(ValueError, match="pip install wandb"):
            resolve_log_with(["wandb"])


def test_accelerate_only_arguments(no_launcher_env):
    with pytest.raises(PlanError) as caught:
        braeburn.Accelerator(cpu=True, deepspeed_plugin=object(), device_placement=False)
    assert "strategy='fsdp'" in str(caught.value) and "device_placement" in str(caught.value)
    accelerator = braeburn.Accelerator(cpu=True, mixed_precision=None,
                                       gradient_accumulation_plugin=braeburn.GradientAccumulationPlugin(num_steps=3))
    assert accelerator.mixed_precision == "no" and accelerator.gradient_accumulation_steps == 3


def test_jsonl_tracker_and_config(no_launcher_env, tmp_path):
    accelerator = braeburn.Accelerator(cpu=True, log_with="jsonl", project_dir=str(tmp_path))
    accelerator.init_trackers("run", config={"lr": 0.1, "layers": 2})
    accelerator.log({"loss": torch.tensor(0.5), "note": "x"}, step=3)
    accelerator.end_training()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records == [{"step": 3, "loss": 0.5, "note": "x"}]
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"lr": 0.1, "layers": 2}


def test_automatic_checkpoint_naming(no_launcher_env, tmp_path):
    config = braeburn.ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = braeburn.Accelerator(cpu=True, project_config=config)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    for value in (1.0, 2.0, 3.0):
        with torch.no_grad():
            model.weight.fill_(value)
        accelerator.save_state()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if not p.name.startswith(".")) == \
        ["checkpoint_1", "checkpoint_2"]
    with torch.no_grad():
        model.weight.zero_()
    accelerator.load_state()
    assert float(model.weight[0, 0]) == 3.0


def test_more_schedules():
    assert schedule_factor(10, kind="cosine_with_min_lr", warmup=0, total=10, options={"min_lr_rate": 0.1}) == \
        pytest.approx(0.1)
    assert schedule_factor(5, kind="polynomial", warmup=0, total=10, options={"power": 2.0}) == pytest.approx(0.25)
    assert schedule_factor(7, kind="constant_with_warmup", warmup=2, total=10) == 1.0
    assert schedule_factor(3, kind="inverse_sqrt", warmup=0, total=10, options={"timescale": 1}) == pytest.approx(0.5)


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, features, labels=None):
        logits = self.linear(features)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def _rows(count=16):
    generator = torch.Generator().manual_seed(0)
    return [{"features": torch.randn(4, generator=generator), "label": i % 2, "text": "unused"} for i in range(count)]


def test_trainer_options_label_smoothing_sgd_logging_epoch(no_launcher_env, tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, num_train_epochs=2, per_device_train_batch_size=4,
                             label_smoothing_factor=0.1, optim="sgd", optim_args="momentum=0.9",
                             logging_strategy="epoch", save_strategy="no", report_to="none", disable_tqdm=True)
    trainer = braeburn.Trainer(model=_Tiny(), args=args, train_dataset=_rows())
    trainer.train()
    assert isinstance(trainer.optimizer.optimizer, torch.optim.SGD)
    assert trainer.optimizer.optimizer.defaults["momentum"] == 0.9
    assert [r["step"] for r in trainer.state.log_history if "loss" in r] == [4, 8]
    assert not (tmp_path / "tensorboard").exists()  # report_to none


def test_hf_callback_hooks_braeburn_cannot_call_are_refused(no_launcher_env, tmp_path):
    class PreStep(braeburn.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            pass

    with pytest.raises(TypeError, match="on_pre_optimizer_step"):
        braeburn.Trainer(_Tiny(), TrainingArguments(output_dir=str(tmp_path), use_cpu=True), callbacks=[PreStep()])


def test_transformers_early_stopping_callback_works(no_launcher_env, tmp_path):
    transformers = pytest.importorskip("transformers")
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, num_train_epochs=10, learning_rate=1e-12,
                             per_device_train_batch_size=4, eval_strategy="epoch", save_strategy="epoch",
                             load_best_model_at_end=True, report_to="none", disable_tqdm=True)
    trainer = braeburn.Trainer(_Tiny(), args, train_dataset=_rows(), eval_dataset=_rows(8),
                               callbacks=[transformers.EarlyStoppingCallback(early_stopping_patience=2)])
    trainer.train()
    assert trainer.state.global_step == 12  # best at epoch 1, then two epochs without improvement


def test_subclass_overriding_compute_loss(no_launcher_env, tmp_path):
    seen = []

    class WeightedTrainer(braeburn.Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            seen.append(sorted(inputs))
            loss = torch.nn.functional.cross_entropy(outputs["logits"], labels, weight=torch.tensor([1.0, 2.0]))
            return (loss, outputs) if return_outputs else loss

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, max_steps=2, per_device_train_batch_size=4,
                             save_strategy="no", report_to="none", disable_tqdm=True)
    trainer = WeightedTrainer(model=_Tiny(), args=args, train_dataset=_rows())
    trainer.train()
    assert seen == [["features"], ["features"]]  # the unused "text" column was removed, labels renamed
    assert trainer.get_num_trainable_parameters() == 10 and trainer.get_total_train_batch_size() == 4


def test_no_override_keeps_the_fast_path_and_overrides_are_read_once(no_launcher_env, tmp_path):
    from braeburn.compat.transformers.overrides import Overrides

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", disable_tqdm=True)
    assert braeburn.Trainer(model=_Tiny(), args=args)._overrides == Overrides()

    class OwnStep(braeburn.Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            return super().training_step(model, inputs, num_items_in_batch)

    assert OwnStep(model=_Tiny(), args=args)._overrides == Overrides(training_step=True)


def test_subclass_training_step_and_optimizer_and_eval_overrides(no_launcher_env, tmp_path):
    calls = []

    class Custom(braeburn.Trainer):
        def create_optimizer(self, model=None):
            calls.append("create_optimizer")
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.0)  # a rate of 0: nothing moves
            return self.optimizer

        def training_step(self, model, inputs, num_items_in_batch=None):
            calls.append("training_step")
            return super().training_step(model, inputs, num_items_in_batch)

        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
            loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
            return loss + 100, logits, labels

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, max_steps=2, per_device_train_batch_size=4,
                             save_strategy="no", report_to="none", disable_tqdm=True, logging_steps=1)
    trainer = Custom(model=_Tiny(), args=args, train_dataset=_rows(), eval_dataset=_rows(8))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    assert calls == ["create_optimizer", "training_step", "training_step"]
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    assert len(losses) == 2 and all(0 < loss < 5 for loss in losses)  # per-batch losses, not divided or summed
    assert trainer.evaluate()["eval_loss"] > 100


def test_fp16_and_bf16_together_are_one_error_not_three(tmp_path):
    """--fp16 --bf16 also gave two errors about a --mixed_precision auto the user never passed."""
    with pytest.raises(ConfigError) as caught:
        parse_config(TrainingConfig, argv=["--bf16", "--fp16", "--output_dir", str(tmp_path)], exit_on_error=False,
                     check_plan=False)
    assert "1 problem" in str(caught.value) and "mixed_precision auto" not in str(caught.value)
    with pytest.raises(ConfigError, match="fp16=True: conflicts with --mixed_precision bf16"):
        parse_config(TrainingConfig, argv=["--fp16", "--mixed_precision", "bf16", "--output_dir", str(tmp_path)],
                     exit_on_error=False, check_plan=False)


class _TwoHeads(torch.nn.Module):
    """A question-answering-like model: two label keys, two outputs, as Transformers' QA models."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.start, self.end = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)

    def forward(self, features, start_label=None, end_label=None):
        start, end = self.start(features), self.end(features)
        out = {"start_logits": start, "end_logits": end}
        if start_label is not None:
            loss_fn = torch.nn.functional.cross_entropy
            out = {"loss": loss_fn(start, start_label) + loss_fn(end, end_label), **out}
        return out


def test_labels_under_other_names_give_loss_metrics_and_tuples(no_launcher_env, tmp_path):
    rows = [{"features": r["features"], "start_label": i % 3, "end_label": (i + 1) % 3} for i, r in enumerate(_rows(10))]
    seen = []

    def metrics(eval_pred):
        (start, end), (start_ids, end_ids) = eval_pred.predictions, eval_pred.label_ids
        seen.append((start.shape, end.shape, start_ids.tolist()))
        return {"start_accuracy": float((start.argmax(-1) == start_ids).mean())}

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, per_device_eval_batch_size=4, report_to="none",
                             disable_tqdm=True)
    trainer = braeburn.Trainer(_TwoHeads(), args, eval_dataset=rows, compute_metrics=metrics)
    assert trainer.label_names == ["start_label", "end_label"]  # found in forward, as Transformers' find_labels
    result = trainer.evaluate()
    assert result["eval_loss"] > 0 and "eval_start_accuracy" in result
    assert seen == [((10, 3), (10, 3), [i % 3 for i in range(10)])]


def _lr_per_step(tmp_path, scheduler_for, epochs=3):
    model = _Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, num_train_epochs=epochs,
                             per_device_train_batch_size=4, logging_steps=1, save_strategy="no", report_to="none",
                             disable_tqdm=True)
    trainer = braeburn.Trainer(model, args, train_dataset=_rows(), optimizers=(optimizer, scheduler_for(optimizer)))
    trainer.train()
    return [round(r["learning_rate"], 6) for r in trainer.state.log_history if "learning_rate" in r]


def test_lightning_scheduler_dict_steps_per_epoch(no_launcher_env, tmp_path):
    rates = _lr_per_step(tmp_path, lambda opt: {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5),
                                               "interval": "epoch"})
    assert rates == [0.1] * 4 + [0.05] * 4 + [0.025] * 4  # 4 steps per epoch, one scheduler step per epoch
    rates = _lr_per_step(tmp_path / "f2", lambda opt: {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5),
                                                      "interval": "step", "frequency": 2}, epochs=1)
    assert rates == [0.1, 0.1, 0.05, 0.05]


def test_bare_epoch_style_scheduler_is_stepped_per_step_and_said(no_launcher_env, tmp_path, capsys):
    rates = _lr_per_step(tmp_path, lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5), epochs=1)
    assert rates == [0.1, 0.05, 0.025, 0.0125]  # as the Transformers Trainer
    assert "'interval': 'epoch'" in capsys.readouterr().err


def test_bad_scheduler_dict_is_refused_with_the_fix(no_launcher_env, tmp_path):
    optimizer = torch.optim.SGD(_Tiny().parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    with pytest.raises(ValueError, match="'interval': 'step' or 'epoch'"):
        braeburn.Trainer(_Tiny(), TrainingArguments(output_dir=str(tmp_path), use_cpu=True),
                         optimizers=(optimizer, {"scheduler": sched, "interval": "batch"}))
