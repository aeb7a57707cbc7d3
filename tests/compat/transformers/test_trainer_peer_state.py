"""The Trainer's state as Transformers users read it, on a tiny CPU run: no peer needed."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.trainer import Callback, Trainer, TrainingConfig
from braeburn import errors as hf_compat

pytestmark = pytest.mark.usefixtures("one_thread", "cpu_only")


def _trainer(tmp_path, callbacks=(), **options) -> Trainer:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=generator)
    data = TensorDataset(x, (x.sum(1) > 0).long())
    options = {"num_train_epochs": 1, "save_strategy": "no", **options}
    config = TrainingConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, report_to="none",
                            **options)
    torch.manual_seed(0)
    return Trainer(torch.nn.Linear(4, 2), config, train_dataset=data, eval_dataset=data, callbacks=list(callbacks),
                   loss_fn=torch.nn.functional.cross_entropy)


class Record(Callback):
    def __init__(self):
        self.saves, self.epochs = [], []

    def on_save(self, trainer, state, checkpoint_dir):
        self.saves.append((state.global_step, checkpoint_dir.name, checkpoint_dir.is_dir()))

    def on_step_end(self, trainer, state):
        self.epochs.append(state.epoch)


def test_background_on_save_sees_the_step_it_saved(tmp_path):
    record = Record()
    _trainer(tmp_path, [record], num_train_epochs=2, save_strategy="steps", save_steps=2,
             save_in_background=True).train()
    assert record.saves == [(2, "checkpoint-2", True), (4, "checkpoint-4", True), (6, "checkpoint-6", True),
                            (8, "checkpoint-8", True)]


def test_epoch_is_fractional(tmp_path):
    record = Record()
    trainer = _trainer(tmp_path, [record], num_train_epochs=2)
    trainer.train()
    assert record.epochs == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0] and trainer.state.epoch == 2.0


def test_best_checkpoint_only_when_asked_and_only_written_folders(tmp_path):
    plain = _trainer(tmp_path / "a", eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=2)
    plain.train()
    assert plain.state.best_checkpoint is None and plain.state.best_metric is None
    asked = _trainer(tmp_path / "b", eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=4,
                     metric_for_best_model="loss")
    asked.train()
    best = asked.state.best_checkpoint
    assert asked.state.best_metric is not None and (best is None or best.endswith("checkpoint-4"))


def test_eval_steps_default_to_logging_steps_with_a_note(tmp_path, capsys):
    hf_compat._noted.clear()
    trainer = _trainer(tmp_path, eval_strategy="steps")
    assert "braeburn's default logging_steps is 50 (Transformers': 500)" in capsys.readouterr().err
    trainer.config.logging_steps = 2
    trainer.train()
    assert [r["step"] for r in trainer.state.log_history if "eval_loss" in r] == [2, 4]


def test_train_loss_on_a_finished_resume_is_zero(tmp_path):
    _trainer(tmp_path, save_strategy="epoch").train()
    result = _trainer(tmp_path, save_strategy="epoch").train(resume_from_checkpoint=True)
    assert result.global_step == 4 and result.training_loss == 0.0
