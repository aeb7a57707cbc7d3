"""The Transformers Trainer's idioms, each run under ``transformers.Trainer`` and ``braeburn.Trainer`` in the same test
(tiny BERT, CPU, one thread; ``_runs.py`` builds both runs and observes them): TrainingArguments, saving, the
Trainer's arguments and what differs on purpose. TensorBoard is in test_catalogue_tensorboard.py, the refusals in
test_catalogue_refused.py, callbacks, subclasses and the parser in test_catalogue_callbacks.py. See
tests/compat/catalogue.py."""

from __future__ import annotations

import pytest
import torch

from tests.compat.catalogue import Catalogue, assert_identical, assert_on_purpose

from . import _runs
from ._runs import catalogue_peers  # noqa: F401  (an autouse fixture)
from ._runs import BITWISE, SAVES, per_run, Run, same, saves, train_both

CATALOGUE = Catalogue("transformers")
idiom = CATALOGUE.idiom


def register(name: str, how: str = BITWISE, **kwargs):
    idiom(name, "identical", how)(same(**kwargs))


# -- TrainingArguments: steps, strategies, schedules -----------------------------------------------------------
register("TrainingArguments(logging_steps=1) per-step losses", args=dict(max_steps=5))
register("num_train_epochs=2 (3 steps an epoch, fractional epoch in logs)", args=dict(num_train_epochs=2),
         train_rows=12)
register("max_steps=5 beyond one epoch", args=dict(max_steps=5, num_train_epochs=1))
register("logging_steps=2", args=dict(logging_steps=2, max_steps=5))
register("logging_strategy='epoch'", args=dict(logging_strategy="epoch"))
register("logging_first_step=True, logging_steps=3", args=dict(logging_first_step=True, logging_steps=3,
                                                                 max_steps=6))
register("eval_strategy='steps', eval_steps=2", args=dict(eval_strategy="steps", eval_steps=2, max_steps=5))
register("eval_strategy='steps' without eval_steps (logging_steps)", args=dict(eval_strategy="steps",
                                                                               logging_steps=2, max_steps=4))
register("eval_strategy='epoch'", args=dict(eval_strategy="epoch"))
register("eval_on_start=True", args=dict(eval_on_start=True, eval_strategy="epoch", num_train_epochs=1))
register("warmup_steps=0.3 (a ratio below 1)", args=dict(warmup_steps=0.3, max_steps=6))
register("warmup_steps=2", args=dict(warmup_steps=2, max_steps=6))
register("num_train_epochs=1.5 (a fraction of the last epoch)", args=dict(num_train_epochs=1.5))
register("logging_strategy='no'", args=dict(logging_strategy="no", max_steps=3))
register("per_device_eval_batch_size=3 (a short last eval batch), eval_strategy='epoch'",
         args=dict(per_device_eval_batch_size=3, eval_strategy="epoch", num_train_epochs=1),
         compute_metrics=_runs.accuracy)
for _kind in ("cosine", "cosine_with_restarts", "constant_with_warmup", "polynomial", "inverse_sqrt"):
    register(f"lr_scheduler_type='{_kind}'", args=dict(lr_scheduler_type=_kind, warmup_steps=1, max_steps=5))
register("lr_scheduler_type='reduce_lr_on_plateau' with lr_scheduler_kwargs, eval_strategy='steps'",
         args=dict(lr_scheduler_type="reduce_lr_on_plateau", lr_scheduler_kwargs={"patience": 0, "factor": 0.5},
                   eval_strategy="steps", eval_steps=1, max_steps=4))
for _shapes in ({}, {"warmup_type": "cosine", "decay_type": "1-sqrt", "min_lr_ratio": 0.1},
                {"decay_type": "linear", "num_stable_steps": 1}):
    register("lr_scheduler_type='warmup_stable_decay', num_decay_steps=3" + (f", {_shapes}" if _shapes else ""),
             args=dict(lr_scheduler_type="warmup_stable_decay", warmup_steps=2, max_steps=7,
                       lr_scheduler_kwargs={"num_decay_steps": 3, **_shapes}))
register("max_grad_norm=0 (no clipping, grad_norm still logged)", args=dict(max_grad_norm=0.0, max_steps=3))
register("max_grad_norm=0.01", args=dict(max_grad_norm=0.01, max_steps=3))
register("weight_decay=0.1", args=dict(weight_decay=0.1, max_steps=4))
register("label_smoothing_factor=0.1", args=dict(label_smoothing_factor=0.1, max_steps=3))
register("seed=123 (shuffled: the seed orders the data)", args=dict(seed=123, max_steps=3,
                                                                  train_sampling_strategy="random"))
register("optim='adamw_torch'", args=dict(optim="adamw_torch", max_steps=3))
register("optim='sgd' with optim_args", args=dict(optim="sgd", optim_args="momentum=0.9", max_steps=3))
register("adam_beta2=0.98, adam_epsilon=1e-6", args=dict(adam_beta2=0.98, adam_epsilon=1e-6, max_steps=3))
register("per_device_train_batch_size=6, dataloader_drop_last=True",
         args=dict(per_device_train_batch_size=6, dataloader_drop_last=True, num_train_epochs=1))
register("dataloader_pin_memory=False", args=dict(dataloader_pin_memory=False, max_steps=2))
register("train_sampling_strategy='sequential'", args=dict(max_steps=4))
register("report_to='none'", args=dict(report_to="none", max_steps=2))
register("report_to=[] (an empty list)", args=dict(report_to=[], max_steps=2))
register("the model's config.use_cache after Trainer(...) and train() (TrainingArguments.use_cache=False)",
         BITWISE + ", and config.use_cache (what config.json saves)", args=dict(max_steps=1),
         after=lambda run, trainer: {"use_cache": trainer.model.config.use_cache})



# -- saving: the checkpoint folders (their files and on_save's moment are the seed catalogue's) ------------------
idiom("save_strategy='steps', save_steps=2", "identical", SAVES)(saves(dict(save_strategy="steps", save_steps=2,
                                                                            max_steps=5)))
idiom("save_strategy='epoch'", "identical", SAVES)(saves(dict(save_strategy="epoch")))
idiom("save_total_limit=1", "identical", SAVES)(saves(dict(save_strategy="steps", save_steps=1, save_total_limit=1,
                                                            max_steps=3)))
idiom("TrainingArguments defaults: save_strategy='steps', logging_steps=500 (one checkpoint, at the last step)",
      "identical", SAVES)(saves(dict(save_strategy="steps", logging_steps=500)))


@idiom("TrainingArguments(output_dir=...) defaults", "identical", "the same values for the fields run_glue reads")
def _defaults(tmp_path):
    import transformers

    import braeburn

    names = ("logging_steps", "save_strategy", "save_steps", "eval_strategy", "eval_steps", "logging_strategy",
             "lr_scheduler_type", "learning_rate", "warmup_steps", "weight_decay", "max_grad_norm", "num_train_epochs",
             "max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "seed", "optim",
             "dataloader_pin_memory", "save_only_model", "train_sampling_strategy", "load_best_model_at_end")
    theirs = transformers.TrainingArguments(output_dir=str(tmp_path))
    ours = braeburn.TrainingArguments(output_dir=str(tmp_path))
    plain = lambda value: getattr(value, "value", value)  # noqa: E731 - Transformers' enums of text
    assert {n: plain(getattr(theirs, n)) for n in names} == {n: getattr(ours, n) for n in names}


# -- the Trainer's arguments -----------------------------------------------------------------------------------
register("compute_metrics returning a dict (EvalPrediction unpacked as a tuple)",
         args=dict(eval_strategy="epoch", num_train_epochs=1), compute_metrics=_runs.accuracy)
register("compute_metrics reading eval_pred.predictions / .label_ids",
         args=dict(eval_strategy="epoch", num_train_epochs=1),
         compute_metrics=lambda p: {"mean_label": float(p.label_ids.mean()),
                                    "first": float(p.predictions[0, 0])})
register("preprocess_logits_for_metrics (argmax before compute_metrics)",
         args=dict(eval_strategy="epoch", num_train_epochs=1),
         preprocess_logits_for_metrics=lambda logits, labels: logits.argmax(-1),
         compute_metrics=lambda p: {"accuracy": float((p.predictions == p.label_ids).mean())})
register("data_collator=None with processing_class (padding collator)",
         args=dict(max_steps=3), data_collator=None, processing_class=per_run(lambda run: run.tok))
register("data_collator=a function", args=dict(max_steps=3),
         data_collator=per_run(lambda run: (lambda features: run.tok.pad(
             [{"labels": f["label"], **{k: f[k] for k in ("input_ids", "token_type_ids", "attention_mask")}}
              for f in features],
             return_tensors="pt"))))
register("remove_unused_columns=True drops the raw text columns", args=dict(remove_unused_columns=True, max_steps=2))
register("label_names=['labels']", args=dict(label_names=["labels"], eval_strategy="epoch", num_train_epochs=1))
@idiom("optimizers=(AdamW, LambdaLR)", "identical", BITWISE)
def _with_optimizers(tmp_path):
    seen = []
    for name in _runs.LIBS:
        run = Run(name, tmp_path)
        model = run.model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
        trainer = run.trainer(run.args(max_steps=4), model=model, optimizers=(optimizer, scheduler))
        result, error = run.quietly(trainer.train)
        seen.append(_runs.observe(run, trainer, result, error))
    assert_identical(*seen)


@idiom("optimizers=(AdamW over the classifier only, None), the body left trainable", "identical", BITWISE)
def _optimizer_over_part_of_the_model(tmp_path):
    """Transformers zeroes the model's gradients after each step: those of the body, which no optimizer steps, do not
    pile up into the next steps' grad_norm (and clip the classifier's ever harder)."""
    seen = []
    for name in _runs.LIBS:
        run = Run(name, tmp_path)
        model = run.model()
        optimizer = torch.optim.AdamW(model.classifier.parameters(), lr=1e-2)
        trainer = run.trainer(run.args(max_steps=4, max_grad_norm=0.05), model=model, optimizers=(optimizer, None))
        result, error = run.quietly(trainer.train)
        seen.append(_runs.observe(run, trainer, result, error))
    assert_identical(*seen)


def _list_rows(run: Run) -> list[dict]:
    keep = ("input_ids", "token_type_ids", "attention_mask", "label")
    return [{k: (v[:5] if isinstance(v, list) else v) for k, v in row.items() if k in keep} for row in run.train]


register("list features of one length, no data_collator (default_data_collator)", args=dict(max_steps=3),
         data_collator=None, train_dataset=per_run(_list_rows), eval_dataset=None)


@idiom("evaluate(metric_key_prefix='val') and predict() after train()", "identical", BITWISE)
def _evaluate_predict(tmp_path):
    def after(run, trainer):
        metrics = trainer.evaluate(metric_key_prefix="val")
        output = trainer.predict(run.evals)
        return {"evaluate": _runs.train_output_view((0, 0, metrics))["metrics"],
                "predict": (output.predictions.tolist(), output.label_ids.tolist(),
                            _runs.train_output_view((0, 0, output.metrics))["metrics"])}

    peer, ours, _ = train_both(tmp_path, dict(max_steps=2), after, compute_metrics=_runs.accuracy)
    assert_identical(peer, ours)


@idiom("evaluate() before train()", "identical", "the same eval_loss and epoch (0) in the metrics and log_history "
       "(timings by name; Transformers' eval_model_preparation_time left out)")
def _evaluate_first(tmp_path):
    seen = []
    for name in _runs.LIBS:
        run = Run(name, tmp_path)
        trainer = run.trainer(record=False)
        metrics, _ = run.quietly(trainer.evaluate)
        keep = lambda record: {k: v for k, v in record.items() if k in ("eval_loss", "epoch", "step")}  # noqa: E731
        seen.append((keep(metrics), [keep(record) for record in trainer.state.log_history]))
    assert seen[0] == seen[1] and seen[0][0]["epoch"] == 0


@idiom("trainer.state fields after train()", "identical", "global_step, max_steps, epoch, num_train_epochs, "
       "logging_steps, eval_steps, save_steps, train_batch_size, total_flos, best_metric")
def _state(tmp_path):
    fields = ("global_step", "max_steps", "epoch", "num_train_epochs", "logging_steps", "eval_steps", "save_steps",
              "train_batch_size", "total_flos", "best_metric", "best_model_checkpoint")
    after = lambda run, trainer: {name: getattr(trainer.state, name) for name in fields}  # noqa: E731
    peer, ours, _ = train_both(tmp_path, dict(max_steps=3), after)
    assert_identical(peer, ours)


@idiom("transformers.TrainingArguments passed to braeburn.Trainer", "identical",
       "bitwise: its fields are taken by name (one braeburn lacks, set away from its default, is refused)")
def _transformers_arguments(tmp_path):
    import transformers

    seen = []
    for name in _runs.LIBS:
        run = Run(name, tmp_path)
        args = transformers.TrainingArguments(output_dir=str(run.folder / "out"), max_steps=3, logging_steps=1,
                                              use_cpu=True, learning_rate=1e-3, per_device_train_batch_size=4,
                                              train_sampling_strategy="sequential", save_strategy="no",
                                              disable_tqdm=True)
        trainer = run.trainer(args)
        result, error = run.quietly(trainer.train)
        seen.append(_runs.observe(run, trainer, result, error))
    assert_identical(*seen)


class _NamedParameters(torch.nn.Module):
    """A model whose parameter names and shapes disagree: ``scale`` is 1-D but not a bias or a norm (Transformers
    decays it), ``relative_attention_bias`` is 2-D but named bias (T5's; Transformers does not decay it)."""

    def __init__(self, vocab: int, as_tuple: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(vocab, 8)
        self.scale = torch.nn.Parameter(torch.rand(8) + 0.5)
        self.relative_attention_bias = torch.nn.Parameter(torch.randn(8, 2))
        self.as_tuple = as_tuple

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        hidden = (self.embed(input_ids) * attention_mask[..., None]).mean(1) * self.scale
        logits = hidden @ self.relative_attention_bias
        loss = torch.nn.functional.cross_entropy(logits, labels)
        return (loss, logits) if self.as_tuple else {"loss": loss, "logits": logits}


register("weight_decay=0.5 on a 1-D parameter not named bias and a 2-D one named *bias* (decided by name)",
         args=dict(weight_decay=0.5, learning_rate=5e-2, max_steps=4),
         model=per_run(lambda run: _NamedParameters(len(run.tok))))


register("a model returning a tuple (loss, logits): outputs[0] is the loss, the rest the predictions",
         args=dict(max_steps=4, eval_strategy="steps", eval_steps=2), compute_metrics=_runs.accuracy,
         model=per_run(lambda run: _NamedParameters(len(run.tok), as_tuple=True)))


register("gradient_accumulation_steps=3 with a partial last window, a model without **kwargs (train_loss a mean "
         "over steps)", args=dict(gradient_accumulation_steps=3, num_train_epochs=2, logging_steps=3),
         model=per_run(lambda run: _NamedParameters(len(run.tok))))


@idiom("trainer.get_decay_parameter_names(model)", "identical", "the same names, in the same order")
def _decay_names(tmp_path):
    names = []
    for name in _runs.LIBS:
        run = Run(name, tmp_path)
        trainer = run.trainer(record=False)
        names.append((trainer.get_decay_parameter_names(trainer.model),
                      trainer.get_decay_parameter_names(_NamedParameters(len(run.tok)))))
    assert names[0] == names[1] and "scale" in names[0][1] and "relative_attention_bias" not in names[0][1]


# -- different on purpose ---------------------------------------------------------------------------------------
def _accumulation(steps: int, epochs: float):
    def check(tmp_path):
        peer, ours, runs = train_both(tmp_path, dict(gradient_accumulation_steps=steps, num_train_epochs=epochs))
        assert peer.losses != ours.losses  # the difference the line names
        assert_on_purpose(runs[1].printed.splitlines(), f"gradient_accumulation_steps={steps}")
    return check


ACCUMULATION = ("each micro-batch's loss is divided by the window's length (Accelerate's mean); Transformers 5 hands "
                "models that take **kwargs num_items_in_batch and does not divide (the window's sum for a classifier)")
idiom("gradient_accumulation_steps=2", "on purpose", ACCUMULATION)(_accumulation(2, 1))
idiom("gradient_accumulation_steps=3 with a partial last window", "on purpose", ACCUMULATION)(_accumulation(3, 1))


@idiom("fp16=True with use_cpu=True", "on purpose", "the same float32 run as Transformers (Accelerate has no fp16 on "
       "the CPU); one line says so and names bf16=True for mixed precision there")
def _fp16_on_cpu(tmp_path):
    peer, ours, runs = train_both(tmp_path, dict(fp16=True, max_steps=3))
    assert_identical(peer, ours)
    line = assert_on_purpose(runs[1].printed.splitlines(), "fp16=True")
    assert "float32" in line and "bf16=True" in line


register("bf16=True with use_cpu=True", "bitwise: bf16 autocast on the CPU, as Transformers",
         args=dict(bf16=True, max_steps=3))


@idiom("torch_compile=True", "on purpose", "braeburn compiles the model its own way: losses differ from a Transformers "
       "compiled run from step 1 (rounding; other dropout masks); leave torch_compile off for Transformers' eager "
       "numbers, bitwise")
def _torch_compile(tmp_path):
    run = Run("braeburn", tmp_path)
    trainer = run.trainer(run.args(torch_compile=True, max_steps=1), record=False)
    _, error = run.quietly(trainer.train)
    assert error is None, error
    line = assert_on_purpose(run.printed.splitlines(), "torch_compile=True")
    assert "differ" in line and "Leave torch_compile off" in line


def _compiling_device(patch: pytest.MonkeyPatch) -> None:
    """The CPU faked as a device where braeburn's compile='auto' compiles (as on CUDA; the compile rule's tests fake
    it the same way)."""
    from braeburn.devices.cpu import CpuDevice

    patch.setattr(CpuDevice, "compile_by_default", lambda self, host: (True, "faked: auto compiles here"))


@idiom("torch_compile unset on a GPU (braeburn's compile='auto')", "on purpose",
       "braeburn may compile where Transformers never does: it times the first eager steps and compiles when the "
       "expected gain pays the compile back; one line at the start says so and names torch_compile=False for "
       "Transformers' eager run (on the CPU auto never compiles: no line, identical)")
def _torch_compile_unset(tmp_path):
    with pytest.MonkeyPatch.context() as patch:
        _compiling_device(patch)
        peer, ours, runs = train_both(tmp_path, dict(max_steps=3))
    assert_identical(peer, ours)  # (three steps: too short to earn a compile back, so eager here)
    line = assert_on_purpose(runs[1].printed.splitlines(), "torch_compile is not set")
    assert "torch_compile=False" in line and "compile='auto'" in line


def _printed_by_braeburn(tmp_path, **args) -> str:
    run = Run("braeburn", tmp_path)
    _, error = run.quietly(run.trainer(run.args(max_steps=1, **args), record=False).train)
    assert error is None, error
    return run.printed


def test_no_compile_line_where_auto_never_compiles_or_torch_compile_is_set(tmp_path, monkeypatch):
    assert "torch_compile is not set" not in _printed_by_braeburn(tmp_path / "cpu")  # the CPU: eager, as Transformers
    _compiling_device(monkeypatch)
    assert "torch_compile is not set" not in _printed_by_braeburn(tmp_path / "off", torch_compile=False)
    assert "compile    off (compile=False, as asked)" in _printed_by_braeburn(tmp_path / "off2", torch_compile=False)


def test_transformers_arguments_keep_their_torch_compile_false(tmp_path, monkeypatch):
    """A transformers.TrainingArguments says torch_compile=False by default (never compile): braeburn keeps it, on a
    device where its compile='auto' could compile, and says nothing of an unset torch_compile."""
    import transformers

    _compiling_device(monkeypatch)
    run = Run("braeburn", tmp_path)
    args = transformers.TrainingArguments(output_dir=str(run.folder / "out"), max_steps=1, use_cpu=True,
                                          save_strategy="no", report_to="none", disable_tqdm=True)
    _, error = run.quietly(run.trainer(args, record=False).train)
    assert error is None, error
    assert "torch_compile is not set" not in run.printed
    assert "compile    off (compile=False, as asked)" in run.printed


# -- the test: one per idiom (last, so that every idiom above is registered) -----------------------------------
@pytest.mark.slow  # the catalogue took 62 s as one file with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
