"""TrainingArguments.set_training / set_evaluate / set_testing / set_save / set_logging / set_optimizer /
set_lr_scheduler / set_dataloader / set_push_to_hub: the same calls on braeburn's and Transformers' classes give the
same field values; what braeburn cannot honour is refused at the call, with the fix."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

transformers = pytest.importorskip("transformers")

import braeburn  # noqa: E402
from braeburn.compat.transformers.arguments import stored_report_to  # noqa: E402
from braeburn.trainer._argparse import ConfigError  # noqa: E402

SETTERS = ("set_training", "set_evaluate", "set_testing", "set_save", "set_logging", "set_push_to_hub",
           "set_optimizer", "set_lr_scheduler", "set_dataloader")
CALLS = [
    ("set_training", {}),
    ("set_training", dict(learning_rate=1e-4, batch_size=4, weight_decay=0.01, num_epochs=2, max_steps=10,
                          gradient_accumulation_steps=2, seed=7, activation_checkpointing=True)),
    ("set_evaluate", {}),
    ("set_evaluate", dict(strategy="steps", steps=100, batch_size=16, accumulation_steps=2, loss_only=True)),
    ("set_testing", dict(batch_size=32, loss_only=True)),
    ("set_save", {}),
    ("set_save", dict(strategy="epoch", steps=50, total_limit=2)),
    ("set_logging", {}),
    ("set_logging", dict(strategy="epoch", steps=100, report_to="none", level="info", first_step=True,
                         replica_level="warning")),
    ("set_optimizer", dict(name="adamw_torch", learning_rate=1e-3, weight_decay=0.1, beta1=0.8, beta2=0.99,
                           epsilon=1e-6)),
    ("set_lr_scheduler", dict(name="cosine", num_epochs=2.0, max_steps=100, warmup_steps=5)),
    ("set_dataloader", dict(train_batch_size=16, eval_batch_size=64, drop_last=True, num_workers=2,
                            pin_memory=False, persistent_workers=True, prefetch_factor=2, sampler_seed=3)),
]
KEPT = {"logging_nan_inf_filter", "log_on_each_node"}  # set_logging keeps them True in braeburn (docs/migrating.md)


def _plain(value):
    return getattr(value, "value", value)


def _fields(args, names):
    return {name: _plain(getattr(args, name)) for name in names}


@pytest.mark.parametrize("setter, kwargs", CALLS, ids=[f"{s}-{i}" for i, (s, _) in enumerate(CALLS)])
def test_a_setter_gives_the_field_values_transformers_gives(tmp_path, setter, kwargs):
    ours = braeburn.TrainingArguments(output_dir=str(tmp_path))
    theirs = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    names = ({f.name for f in dataclasses.fields(ours)} & {f.name for f in dataclasses.fields(theirs)}) - KEPT
    before = _fields(theirs, names)
    assert getattr(ours, setter)(**kwargs) is ours and getattr(theirs, setter)(**kwargs) is theirs
    changed = {n for n, v in _fields(theirs, names).items() if v != before[n]}
    after = _fields(theirs, names)
    after["report_to"] = stored_report_to(after["report_to"])  # "none" as the field stores it: []
    mine = _fields(ours, names)
    assert {n: mine[n] for n in changed | {"report_to"}} == {n: after[n] for n in changed | {"report_to"}}
    assert (ours.logging_nan_inf_filter, ours.log_on_each_node) == (True, True)
    assert ours.validate() == []  # and braeburn honours what was set


@pytest.mark.parametrize("setter", SETTERS)
def test_a_setter_has_transformers_signature_and_defaults(setter):
    ours = inspect.signature(getattr(braeburn.TrainingArguments, setter)).parameters
    theirs = inspect.signature(getattr(transformers.TrainingArguments, setter)).parameters
    assert [(p.name, _plain(p.default)) for p in ours.values()] == \
        [(p.name, _plain(p.default)) for p in theirs.values()]


@pytest.mark.parametrize("setter, kwargs, field", [
    ("set_save", dict(on_each_node=True), "save_on_each_node"),
    ("set_evaluate", dict(strategy="steps", delay=2), "eval_delay"),
    ("set_dataloader", dict(in_order=False), "dataloader_in_order"),
    ("set_dataloader", dict(ignore_data_skip=True), "ignore_data_skip"),
])
def test_a_setter_argument_braeburn_cannot_honour_is_refused_before_anything_changes(tmp_path, setter, kwargs, field):
    args = braeburn.TrainingArguments(output_dir=str(tmp_path))
    before = dataclasses.asdict(args)
    with pytest.raises(ConfigError) as raised:
        getattr(args, setter)(**kwargs)
    assert f"{field}=" in str(raised.value) and setter in str(raised.value)
    assert dataclasses.asdict(args) == before


def test_set_push_to_hub_is_refused_with_the_fix(tmp_path):
    args = braeburn.TrainingArguments(output_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=r"push_to_hub=True: \(from set_push_to_hub\).*huggingface-cli upload"):
        args.set_push_to_hub("me/model")
    assert args.push_to_hub is False


@pytest.mark.parametrize("setter, kwargs, said", [
    ("set_evaluate", dict(strategy="sometimes"), r"set_evaluate\(strategy='sometimes'\): .*choose one of no, steps"),
    ("set_save", dict(strategy="steps", steps=0), r"set_save\(strategy='steps', steps=0\): .*pass steps=500"),
    ("set_logging", dict(strategy="steps", steps=0), r"set_logging\(strategy='steps', steps=0\): .*pass steps=500")])
def test_a_setter_refuses_what_transformers_refuses(tmp_path, setter, kwargs, said):
    """As ValueError, as there; naming the call, the value and the fix (braeburn's said neither call nor fix)."""
    with pytest.raises(ValueError):
        getattr(transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none"), setter)(**kwargs)
    with pytest.raises(ValueError, match=said):
        getattr(braeburn.TrainingArguments(output_dir=str(tmp_path)), setter)(**kwargs)


@pytest.mark.parametrize("setter, kwargs, field", [("set_optimizer", dict(name="adamw_bnb_8bit"), "optim"),
                                                   ("set_optimizer", dict(name="no_such_optimizer"), "optim"),
                                                   ("set_lr_scheduler", dict(name="no_such_schedule"),
                                                    "lr_scheduler_type")])
def test_an_optimizer_or_scheduler_braeburn_lacks_is_refused_at_the_call(tmp_path, setter, kwargs, field):
    """Transformers' setter refuses a name it lacks at the call (OptimizerNames(name), SchedulerType(name)); braeburn
    set the field and refused it only when the Trainer was made, and took an 8-bit optimizer it has not either."""
    if kwargs["name"].startswith("no_such"):
        with pytest.raises(ValueError):
            getattr(transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none"), setter)(**kwargs)
    args = braeburn.TrainingArguments(output_dir=str(tmp_path))
    before = dataclasses.asdict(args)
    with pytest.raises(ConfigError, match=rf"{field}='{kwargs['name']}': \(from {setter}\) choose one of"):
        getattr(args, setter)(**kwargs)
    assert dataclasses.asdict(args) == before
