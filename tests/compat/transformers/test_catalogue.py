"""The Transformers Trainer's idioms, each run under ``transformers.Trainer`` and ``braeburn.Trainer`` in the same test
(tiny BERT, CPU, one thread; ``_runs.py`` builds both runs and observes them). See tests/compat/catalogue.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.compat.catalogue import Catalogue, Observation, assert_identical, assert_on_purpose, assert_refused

from . import _runs
from ._runs import Run, per_run, train_both

CATALOGUE = Catalogue("transformers")
idiom = CATALOGUE.idiom
BITWISE = "bitwise: losses, logged records, callback calls, checkpoint folders, TrainOutput"


@pytest.fixture(autouse=True)
def _peers(monkeypatch, no_launcher_env, one_thread):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    monkeypatch.setenv("WANDB_DISABLED", "true")
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def same(args: dict | None = None, after=None, **trainer_kwargs):
    """An idiom whose whole run is identical under both libraries."""

    def check(tmp_path):
        peer, ours, _ = train_both(tmp_path, args, after, **trainer_kwargs)
        assert peer.exit is None, f"the idiom fails under Transformers too: {peer.exit}"
        assert_identical(peer, ours)
    return check


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
for _kind in ("cosine", "cosine_with_restarts", "constant_with_warmup", "polynomial", "inverse_sqrt"):
    register(f"lr_scheduler_type='{_kind}'", args=dict(lr_scheduler_type=_kind, warmup_steps=1, max_steps=5))
register("gradient_accumulation_steps=2", args=dict(gradient_accumulation_steps=2, max_steps=3))
register("gradient_accumulation_steps=3 with a partial last window", args=dict(gradient_accumulation_steps=3,
                                                                              num_train_epochs=1))
register("max_grad_norm=0 (no clipping, grad_norm still logged)", args=dict(max_grad_norm=0.0, max_steps=3))
register("max_grad_norm=0.01", args=dict(max_grad_norm=0.01, max_steps=3))
register("weight_decay=0.1", args=dict(weight_decay=0.1, max_steps=4))
register("label_smoothing_factor=0.1", args=dict(label_smoothing_factor=0.1, max_steps=3))
register("seed=123", args=dict(seed=123, max_steps=3))
register("optim='adamw_torch'", args=dict(optim="adamw_torch", max_steps=3))
register("optim='sgd' with optim_args", args=dict(optim="sgd", optim_args="momentum=0.9", max_steps=3))
register("adam_beta2=0.98, adam_epsilon=1e-6", args=dict(adam_beta2=0.98, adam_epsilon=1e-6, max_steps=3))
register("per_device_train_batch_size=8, dataloader_drop_last=True",
         args=dict(per_device_train_batch_size=6, dataloader_drop_last=True, num_train_epochs=1))
register("dataloader_pin_memory=False", args=dict(dataloader_pin_memory=False, max_steps=2))
register("train_sampling_strategy='sequential'", args=dict(max_steps=4))
register("save_strategy='steps', save_steps=2", args=dict(save_strategy="steps", save_steps=2, max_steps=5))
register("save_strategy='epoch'", args=dict(save_strategy="epoch"))
register("save_total_limit=1", args=dict(save_strategy="steps", save_steps=1, save_total_limit=1, max_steps=3))
register("save_only_model=True", args=dict(save_strategy="steps", save_steps=2, save_only_model=True, max_steps=4))
register("report_to='none'", args=dict(report_to="none", max_steps=2))
register("report_to=[] (an empty list)", args=dict(report_to=[], max_steps=2))


# -- the test: one per idiom (last, so that every idiom above is registered) -----------------------------------
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
