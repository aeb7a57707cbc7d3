"""Learning-rate schedules: the same rate at every step as ``transformers.get_scheduler``, bitwise, and the
same logged ``learning_rate`` as the Transformers Trainer."""

from __future__ import annotations

import pytest
import torch

from braeburn.trainer.config import TrainingConfig
from braeburn.trainer.optim import default_scheduler

from .. import _tiny

CASES = [  # (lr_scheduler_type, warmup_steps, lr_scheduler_kwargs)
    ("linear", 4, None), ("linear", 0, None), ("linear", 0.25, None),
    ("cosine", 4, None), ("cosine", 0, {"num_cycles": 1.5}),
    ("cosine_with_restarts", 3, None), ("cosine_with_restarts", 0, {"num_cycles": 3}),
    ("cosine_with_min_lr", 4, {"min_lr_rate": 0.1}), ("cosine_with_min_lr", 2, {"min_lr": 1e-4}),
    ("polynomial", 4, None), ("polynomial", 0, {"power": 2.0, "lr_end": 1e-5}),
    ("constant", 4, None), ("constant_with_warmup", 4, None),
    ("inverse_sqrt", 4, None), ("inverse_sqrt", 0, None), ("inverse_sqrt", 0, {"timescale": 3}),
]
TOTAL = 12


def _rates(scheduler, optimizer, steps: int) -> list[float]:
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("kind,warmup,kwargs", CASES)
def test_every_step_matches_transformers_get_scheduler(kind, warmup, kwargs):
    transformers = pytest.importorskip("transformers")
    config = TrainingConfig(output_dir="unused", learning_rate=1e-3, warmup_steps=warmup, lr_scheduler_type=kind,
                            lr_scheduler_kwargs=kwargs)
    weight = torch.nn.Parameter(torch.zeros(1))
    theirs_opt, ours_opt = torch.optim.SGD([weight], lr=1e-3), torch.optim.SGD([weight], lr=1e-3)
    hf_args = transformers.TrainingArguments(output_dir="unused", warmup_steps=warmup, report_to="none")
    theirs = transformers.get_scheduler(kind, theirs_opt, num_warmup_steps=hf_args.get_warmup_steps(TOTAL),
                                        num_training_steps=TOTAL, scheduler_specific_kwargs=kwargs)
    ours = default_scheduler(ours_opt, config, TOTAL)
    assert _rates(ours, ours_opt, TOTAL + 2) == _rates(theirs, theirs_opt, TOTAL + 2)  # bitwise, past the end too


def test_logged_learning_rate_is_the_rate_the_step_used(hf_lib, tmp_path):
    """Transformers logs the rate before the scheduler steps: a warm-up of 4 logs 0, .25, .5, .75, then 1."""
    tok = _tiny.tokenizer(tmp_path / "tok")
    rows = _tiny.tokenized(_tiny.sentence_pairs(64), tok)
    args = hf_lib.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, max_steps=8,
                                    learning_rate=1e-3, warmup_steps=4, logging_steps=1, use_cpu=True,
                                    report_to="none", save_strategy="no", seed=0, disable_tqdm=True)
    trainer = hf_lib.Trainer(model=_tiny.bert(len(tok)), args=args, processing_class=tok, train_dataset=rows)
    trainer.train()
    logged = [r["learning_rate"] for r in trainer.state.log_history if "loss" in r]
    assert logged == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 7.5e-4, 5e-4, 2.5e-4], abs=1e-12)
