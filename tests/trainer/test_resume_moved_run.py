"""A run folder copied (`cp -a`) or moved, then resumed with load_best_model_at_end: the run trains to the end
and loads the best checkpoint from where the folder is now; where it cannot be found, one warning and the
final weights, never a failed run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from braeburn.checkpoints.state import load_model_state
from braeburn.trainer.state import TrainerState
from tests.trainer.test_no_harm_checkpoints import tiny_trainer, weights

pytestmark = pytest.mark.usefixtures("one_thread", "cpu_only")

# A larger eval_loss is "better": the loss falls as the model trains, so the best checkpoint is the first
# one, checkpoint-2, and never the last: loading it changes the weights.
BEST = {"eval_strategy": "steps", "eval_steps": 2, "save_strategy": "steps", "save_steps": 2,
        "load_best_model_at_end": True, "metric_for_best_model": "eval_loss", "greater_is_better": True}


def first_half(out: Path) -> None:
    tiny_trainer(out, max_steps=4, **BEST).train()
    assert Path(TrainerState.load(out / "checkpoint-4").best_checkpoint) == out / "checkpoint-2"


def test_a_copied_run_resumed_to_the_end_loads_its_best_checkpoint_from_the_copy(tmp_path, capsys):
    """The copy's resume trained to the end, then failed: 'not a checkpoint-N folder of this run's output_dir'."""
    first, copy = tmp_path / "run", tmp_path / "copy"
    first_half(first)
    subprocess.run(["cp", "-a", str(first), str(copy)], check=True)
    capsys.readouterr()
    # save_total_limit=2: rotation keeps the best, which must be the copy's checkpoint-2, not the original's
    trainer = tiny_trainer(copy, max_steps=8, save_total_limit=2, **BEST)
    trainer.train(resume_from_checkpoint="latest")
    out = capsys.readouterr().out
    assert (copy / "checkpoint-2").is_dir() and (copy / "checkpoint-8").is_dir()
    assert trainer.state.best_checkpoint == str(copy / "checkpoint-2")
    best = load_model_state(copy / "checkpoint-2", 0)
    assert all(torch.equal(best[k], v) for k, v in weights(trainer).items())
    assert f"loaded the best model from {copy / 'checkpoint-2'}" in out
    assert f"the best checkpoint recorded, {first / 'checkpoint-2'}, is in the folder this run was copied or " \
           f"moved from; {copy / 'checkpoint-2'}, the same checkpoint of the same run, is used instead" in out
    assert "warning" not in out


def test_a_moved_run_whose_best_checkpoint_is_gone_warns_once_and_keeps_its_final_weights(tmp_path, capsys):
    first, moved = tmp_path / "run", tmp_path / "moved"
    first_half(first)
    shutil.move(first, moved)
    shutil.rmtree(moved / "checkpoint-2")  # the best: in neither place now
    capsys.readouterr()
    trainer = tiny_trainer(moved, max_steps=8, **BEST)
    trainer.train(resume_from_checkpoint="latest")  # returns: the user's code after train() runs
    out = capsys.readouterr().out
    final = load_model_state(moved / "checkpoint-8", 0)
    assert all(torch.equal(final[k], v) for k, v in weights(trainer).items())
    warnings = [line for line in out.splitlines() if "load_best_model_at_end" in line]
    assert len(warnings) == 1 and warnings[0].startswith("braeburn: warning: load_best_model_at_end: ")
    assert str(first / "checkpoint-2") in warnings[0] and "keeps its final weights" in warnings[0]


def test_a_checkpoint_of_another_run_under_the_same_name_is_not_taken_for_the_best(tmp_path, capsys):
    first, moved = tmp_path / "run", tmp_path / "moved"
    first_half(first)
    shutil.move(first, moved)
    tiny_trainer(tmp_path / "other", max_steps=2, save_strategy="steps", save_steps=2).train()
    shutil.rmtree(moved / "checkpoint-2")
    shutil.copytree(tmp_path / "other" / "checkpoint-2", moved / "checkpoint-2")  # same name, another run id
    capsys.readouterr()
    trainer = tiny_trainer(moved, max_steps=8, **BEST)
    trainer.train(resume_from_checkpoint=str(moved / "checkpoint-4"))
    out = capsys.readouterr().out
    assert "loaded the best model" not in out and "is used instead" not in out  # neither loaded nor followed
    assert "so braeburn does not load it" in out
    assert "braeburn: warning: load_best_model_at_end: " in out
