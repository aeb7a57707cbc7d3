"""Issue 32: checkpoints are never harmed or trusted blindly. Rotation deletes only this run's checkpoints,
"latest" never resumes another run's, the best model is loaded only from a verified checkpoint of this
run, and a run none of whose saves succeeded says so and fails."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.trainer import Trainer, TrainingConfig
from braeburn.trainer.checkpoint import CheckpointError, CheckpointManager
from braeburn.trainer.hf_callbacks import _load_best

pytestmark = pytest.mark.usefixtures("one_thread", "cpu_only")


def tiny_trainer(out: Path, **options) -> Trainer:
    torch.manual_seed(0)
    x, y = torch.randn(32, 4), torch.randint(0, 2, (32,))
    settings = {"per_device_train_batch_size": 8, "num_train_epochs": 2, "disable_tqdm": True,
                "save_in_background": False, "logging_steps": 2, **options}
    config = TrainingConfig(output_dir=str(out), use_cpu=True, **settings)
    return Trainer(torch.nn.Linear(4, 2), config, train_dataset=TensorDataset(x, y), eval_dataset=TensorDataset(x, y),
                   loss_fn=torch.nn.functional.cross_entropy)


@pytest.fixture
def trained(tmp_path) -> Trainer:
    trainer = tiny_trainer(tmp_path / "out", save_strategy="steps", save_steps=2)
    trainer.train()
    return trainer


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.accelerator.unwrap_model(trainer._prepared_model).state_dict().items()}


# -- item 4: load_best_model_at_end ----------------------------------------------------------------
def test_best_model_with_a_flipped_byte_is_refused_and_the_final_weights_kept(trained):
    best = trained.output_dir / "checkpoint-4"
    weights_file = best / "model_0.pt"
    data = bytearray(weights_file.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights_file.write_bytes(bytes(data))
    final = weights(trained)
    with pytest.raises(CheckpointError, match=r"load_best_model_at_end: .*model_0.pt is corrupted: its sha256"):
        _load_best(trained, best)
    assert all(torch.equal(final[k], v) for k, v in weights(trained).items())


def test_best_model_outside_the_output_dir_is_refused(trained, tmp_path):
    copied = tmp_path / "elsewhere" / "checkpoint-2"
    shutil.copytree(trained.output_dir / "checkpoint-2", copied)
    final = weights(trained)
    with pytest.raises(CheckpointError, match=r"not a checkpoint-N folder of this run's output_dir"):
        _load_best(trained, copied)
    assert all(torch.equal(final[k], v) for k, v in weights(trained).items())


def test_a_missing_best_checkpoint_is_reported_as_missing(trained, capsys):
    best = trained.output_dir / "checkpoint-2"
    shutil.rmtree(best)
    with pytest.raises(CheckpointError, match=r"best checkpoint .*checkpoint-2 is missing") as error:
        _load_best(trained, best)
    assert "sharded" not in str(error.value) and "sharded" not in capsys.readouterr().out


def test_a_good_best_checkpoint_is_loaded(trained, capsys):
    trained.state.best_metric = 0.5
    _load_best(trained, trained.output_dir / "checkpoint-2")
    saved = torch.load(trained.output_dir / "checkpoint-2" / "model_0.pt", weights_only=True)
    assert all(torch.equal(saved[k], v) for k, v in weights(trained).items())
    assert "loaded the best model from" in capsys.readouterr().out
