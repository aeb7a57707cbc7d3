"""braeburn's own Trainer (CoreTrainer) speaks of what it has: a Transformers-style callback is refused with the
class that runs it, and a failed final save advises a call the core Trainer has."""

from __future__ import annotations

import errno

import pytest
import torch
import transformers
from torch.utils.data import TensorDataset

import braeburn
from braeburn.trainer import CoreTrainer, CoreTrainingConfig
from braeburn.trainer.checkpoint import CheckpointError


class OnInit(transformers.TrainerCallback):
    def __init__(self):
        self.seen = []

    def on_init_end(self, args, state, control, **kwargs):
        self.seen.append("on_init_end")


class ArgsStateControl:  # no base class: its hooks take Transformers' arguments
    def on_step_end(self, args, state, control, **kwargs):
        pass


@pytest.mark.parametrize("callback", [OnInit(), braeburn.TrainerCallback(), ArgsStateControl(), OnInit],
                         ids=["transformers", "braeburn", "by-signature", "a-class"])
def test_a_transformers_callback_given_to_the_core_trainer_names_braeburn_trainer(tmp_path, callback):
    with pytest.raises(TypeError) as refused:
        CoreTrainer(torch.nn.Linear(2, 1), CoreTrainingConfig(output_dir=str(tmp_path), use_cpu=True),
                    callbacks=[callback])
    message = str(refused.value)
    assert "is a Transformers-style callback" in message and "use braeburn.Trainer" in message
    assert "not a Trainer hook" not in message


def test_the_public_trainer_still_runs_transformers_callbacks(tmp_path):
    arguments = braeburn.TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    callback = OnInit()
    trainer = braeburn.Trainer(torch.nn.Linear(2, 1), arguments, callbacks=[callback, ArgsStateControl()])
    assert callback.seen == ["on_init_end"]
    trainer.accelerator.end_training()


def _failing_final_save(trainer, monkeypatch):
    original = trainer.accelerator.save_state

    def save_state(*args, **kwargs):
        if trainer.state.global_step >= 2:
            raise OSError(errno.EFBIG, "File too large")
        return original(*args, **kwargs)

    monkeypatch.setattr(trainer.accelerator, "save_state", save_state)
    return original


@pytest.mark.parametrize("trainer_class,config_class,advice", [
    (CoreTrainer, CoreTrainingConfig, "trainer.accelerator.save_state(<another folder>) writes it"),
    (braeburn.Trainer, braeburn.TrainingArguments, "trainer.save_model(<another folder>) writes it")],
    ids=["core", "public"])
def test_a_failed_final_save_advises_a_call_the_trainer_has(tmp_path, monkeypatch, trainer_class, config_class, advice):
    x = torch.randn(16, 4)
    config = config_class(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=8, use_cpu=True,
                          save_strategy="steps", save_steps=1, save_in_background=False, disable_tqdm=True,
                          report_to="none")
    trainer = trainer_class(torch.nn.Linear(4, 2), config, train_dataset=TensorDataset(x, (x.sum(1) > 0).long()),
                            loss_fn=torch.nn.functional.cross_entropy)
    original = _failing_final_save(trainer, monkeypatch)
    with pytest.raises(CheckpointError) as failed:
        trainer.train()
    assert advice in str(failed.value)
    if trainer_class is CoreTrainer:  # the advice works: the model in memory is written
        original(str(tmp_path / "elsewhere"))
        assert (tmp_path / "elsewhere" / "model.safetensors").is_file()
    else:
        trainer.save_model(str(tmp_path / "elsewhere"))
        assert (tmp_path / "elsewhere" / "model.safetensors").is_file()
