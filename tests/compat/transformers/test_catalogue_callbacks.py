"""The Transformers Trainer's callbacks, Trainer subclasses and HfArgumentParser, each run under
``transformers.Trainer`` and ``braeburn.Trainer`` in the same test (tiny BERT, CPU, one thread). See
tests/compat/catalogue.py."""

from __future__ import annotations

import pytest
import torch

from tests.compat.catalogue import Catalogue, assert_identical, assert_refused

from . import _runs
from ._runs import catalogue_peers  # noqa: F401  (an autouse fixture)
from ._runs import BITWISE, SAVES, per_run, Run, same, saves, train_both

CATALOGUE = Catalogue("transformers")
idiom = CATALOGUE.idiom


def register(name: str, how: str = BITWISE, **kwargs):
    idiom(name, "identical", how)(same(**kwargs))


# -- callbacks, subclasses, the parser ----------------------------------------------------------------------------
@idiom("EarlyStoppingCallback with load_best_model_at_end, metric_for_best_model, greater_is_better", "identical",
       SAVES)
def _early_stopping(tmp_path):
    args = dict(num_train_epochs=6, learning_rate=1e-9, eval_strategy="epoch", save_strategy="epoch",
                load_best_model_at_end=True, metric_for_best_model="accuracy", greater_is_better=True)
    early = per_run(lambda run: [run.lib.EarlyStoppingCallback(early_stopping_patience=1)])
    after = lambda run, trainer: {"best": (trainer.state.best_metric,  # noqa: E731
                                           str(trainer.state.best_model_checkpoint).rsplit("/", 1)[-1])}
    check = saves(args)
    peer, ours, _ = train_both(tmp_path, args, after, compute_metrics=_runs.accuracy, callbacks=early)
    for seen in (peer, ours):
        seen.calls = [call for call in seen.calls if not call.startswith("on_save")]
    assert peer.extra["best"][1] == "checkpoint-4" and check  # stopped after the second evaluation
    assert_identical(peer, ours)


class _StopAt:
    """A TrainerCallback that stops training at step 3 through control, as Transformers' docs show."""

    @staticmethod
    def make(run: Run):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                control.should_training_stop = True
            return control
        return [type("StopAt", (run.lib.TrainerCallback,), {"on_step_end": on_step_end})()]


register("a TrainerCallback setting control.should_training_stop in on_step_end", args=dict(num_train_epochs=3),
         callbacks=per_run(_StopAt.make))


def _log_setter(run: Run):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_log = state.global_step == 2
        return control
    return [type("LogAt", (run.lib.TrainerCallback,), {"on_step_end": on_step_end})()]


register("a TrainerCallback setting control.should_log", args=dict(logging_steps=500, max_steps=4),
         callbacks=per_run(_log_setter))


def _eval_setter(run: Run):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            control.should_evaluate = True
        return control
    return [type("EvalAt", (run.lib.TrainerCallback,), {"on_step_end": on_step_end})()]


register("a TrainerCallback setting control.should_evaluate in on_step_end (the step's loss logged first)",
         args=dict(logging_steps=2, max_steps=4), callbacks=per_run(_eval_setter))


@idiom("Trainer subclass overriding compute_loss(model, inputs, return_outputs=False, num_items_in_batch=None)",
       "identical", BITWISE)
def _compute_loss(tmp_path):
    seen = []
    for name in _runs.LIBS:
        run = Run(name, tmp_path)

        class Weighted(run.lib.Trainer):
            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                labels = inputs.pop("labels")
                outputs = model(**inputs)
                loss = torch.nn.functional.cross_entropy(outputs.logits, labels, weight=torch.tensor([1.0, 2.0]))
                return (loss, outputs) if return_outputs else loss

        parts = dict(model=run.model(), args=run.args(max_steps=4, eval_strategy="steps", eval_steps=2),
                     train_dataset=run.train, eval_dataset=run.evals, callbacks=[_runs.recorder(run.lib, run.calls)],
                     data_collator=__import__("transformers").DataCollatorWithPadding(run.tok))
        trainer = Weighted(**parts)
        result, error = run.quietly(trainer.train)
        seen.append(_runs.observe(run, trainer, result, error))
    assert_identical(*seen)


@idiom("HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(run_glue's flags)", "identical",
       "the same field values")
def _parser(tmp_path):
    import transformers

    import braeburn

    argv = ["--output_dir", str(tmp_path), "--do_train", "--do_eval", "--per_device_train_batch_size", "32",
            "--learning_rate", "2e-5", "--num_train_epochs", "3", "--eval_strategy", "epoch", "--save_strategy",
            "epoch", "--save_total_limit", "2", "--logging_steps", "10", "--warmup_steps", "0.1", "--seed", "7",
            "--dataloader_pin_memory", "false", "--lr_scheduler_type", "cosine", "--weight_decay", "0.01",
            "--report_to", "none", "--use_cpu"]
    names = ("do_train", "do_eval", "per_device_train_batch_size", "learning_rate", "num_train_epochs",
             "eval_strategy", "save_strategy", "save_total_limit", "logging_steps", "warmup_steps", "seed",
             "dataloader_pin_memory", "lr_scheduler_type", "weight_decay", "use_cpu")
    plain = lambda value: getattr(value, "value", value)  # noqa: E731
    (theirs,) = transformers.HfArgumentParser(transformers.TrainingArguments).parse_args_into_dataclasses(argv)
    (ours,) = braeburn.HfArgumentParser(braeburn.TrainingArguments).parse_args_into_dataclasses(argv)
    assert {n: plain(getattr(theirs, n)) for n in names} == {n: getattr(ours, n) for n in names}


@idiom("include_for_metrics=['inputs'] / include_inputs_for_metrics=True", "refused",
       "compute what needs the inputs in your own evaluation loop")
def _include_for_metrics(tmp_path):
    for fields in (dict(include_for_metrics=["inputs"]), dict(include_inputs_for_metrics=True)):
        run = Run("braeburn", tmp_path)
        _, error = run.quietly(lambda: run.trainer(run.args(**fields), record=False).train())
        assert_refused(error, [next(iter(fields))], ["your own evaluation loop"])


# -- the test: one per idiom (last, so that every idiom above is registered) -----------------------------------
@pytest.mark.slow  # the catalogue took 62 s as one file with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
