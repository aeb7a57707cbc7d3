"""Checkpoints are never harmed or trusted blindly. Rotation deletes only this run's checkpoints,
"latest" never resumes another run's, the best model is loaded only from a verified checkpoint of this
run, and a run none of whose saves succeeded says so and fails."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.checkpoints.state import load_model_state
from braeburn.trainer import Trainer, TrainingConfig, background_save
from braeburn.trainer.checkpoint import CheckpointError, CheckpointManager, run_of
from braeburn.trainer.options_callback import _load_best
from braeburn.trainer.summary import non_finite_message

pytestmark = pytest.mark.usefixtures("one_thread", "cpu_only")
SRC = Path(__file__).resolve().parents[2] / "src"


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
    weights_file = best / "model.safetensors"
    data = bytearray(weights_file.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights_file.write_bytes(bytes(data))
    final = weights(trained)
    with pytest.raises(CheckpointError, match=r"load_best_model_at_end: .*model.safetensors is corrupted: its sha256"):
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
    saved = load_model_state(trained.output_dir / "checkpoint-2", 0)
    assert all(torch.equal(saved[k], v) for k, v in weights(trained).items())
    assert "loaded the best model from" in capsys.readouterr().out


# -- item 1: a reused output folder ----------------------------------------------------------------
@pytest.fixture
def reused(tmp_path, capsys):
    """Run 1 left checkpoint-5 ... checkpoint-30; run 2 reuses the folder with --overwrite_output_dir."""
    out = tmp_path / "out"
    tiny_trainer(out, max_steps=30, save_strategy="steps", save_steps=5).train()
    second = tiny_trainer(out, max_steps=12, save_strategy="steps", save_steps=4, save_total_limit=2,
                          overwrite_output_dir=True, learning_rate=1e-2, seed=7)
    second.train()
    return out, second, capsys.readouterr().out


def test_rotation_in_a_reused_folder_deletes_only_this_runs_checkpoints(reused):
    out, second, printed = reused
    names = sorted((p.name for p in CheckpointManager(out).checkpoints()), key=lambda n: int(n.split("-")[1]))
    assert names == ["checkpoint-5", "checkpoint-8", "checkpoint-10", "checkpoint-12", "checkpoint-15",
                     "checkpoint-20", "checkpoint-25", "checkpoint-30"]  # run 2 keeps its 2 newest; run 1 untouched
    assert "holds 6 checkpoints of another run (checkpoint-5, checkpoint-10, checkpoint-15 and 3 more)" in printed
    assert "This run does not delete them" in printed


def test_latest_refuses_to_choose_between_two_runs(reused):
    out, _, _ = reused
    with pytest.raises(CheckpointError, match=r"holds the checkpoints of 2 different runs .*checkpoint-30.*"
                                              r"checkpoint-12.*Pass the checkpoint to continue"):
        tiny_trainer(out, max_steps=16, save_strategy="steps", save_steps=4).train(resume_from_checkpoint="latest")


def test_the_nan_message_names_this_runs_checkpoint_not_another_runs(reused):
    out, second, _ = reused
    message = non_finite_message(second, 13, float("nan"))
    assert f"Resume from the last good checkpoint ({out / 'checkpoint-12'})" in message


def test_a_resumed_run_rotates_its_own_earlier_checkpoints_and_no_others(reused):
    out, _, _ = reused
    resumed = tiny_trainer(out, max_steps=20, save_strategy="steps", save_steps=4, save_total_limit=2)
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-12"))
    names = {p.name for p in CheckpointManager(out).checkpoints()}
    assert names == {"checkpoint-5", "checkpoint-10", "checkpoint-15", "checkpoint-20", "checkpoint-25",
                     "checkpoint-30", "checkpoint-16"}  # run 2's 8 and 12 rotated away
    assert run_of(out / "checkpoint-20") == run_of(out / "checkpoint-16") == resumed.state.run_id  # the same step:
    assert run_of(out / "checkpoint-25") != resumed.state.run_id  # replaced, as the warning says; the rest kept


# -- item 11: every save failed --------------------------------------------------------------------
def failing_saves(monkeypatch, trainer: Trainer, background: bool, from_step: int = 0) -> None:
    """Saves of steps >= from_step fail as a file-size limit makes them fail (EFBIG)."""
    def fail_from(original):
        def save_state(self_or_dir, *args):
            if trainer.state.global_step >= from_step:
                raise OSError(errno.EFBIG, "File too large")
            return original(self_or_dir, *args)
        return save_state

    if background:
        monkeypatch.setattr(background_save._Replay, "save_state", fail_from(background_save._Replay.save_state))
    else:
        monkeypatch.setattr(trainer.accelerator, "save_state", fail_from(trainer.accelerator.save_state))


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_a_run_whose_every_save_failed_says_so_and_fails(tmp_path, monkeypatch, capsys, background):
    trainer = tiny_trainer(tmp_path / "out", save_strategy="steps", save_steps=4, save_in_background=background)
    failing_saves(monkeypatch, trainer, background)
    # The end of the loop tries step 8 once more (3 attempts); in the background too, once the step-8 save has
    # been waited for (it was 2 or 3 there, by timing, until the end of the loop waited for the save in flight).
    attempts = "3"
    with pytest.raises(CheckpointError, match=rf"Training ended at step 8, but its checkpoint could not be written "
                                              rf"\(({attempts}) of \1 saves failed\), so no checkpoint of this "
                                              r"run exists\. The last error: .*File too large") as caught:
        trainer.train()
    counted = re.search(r"\((\d) of", str(caught.value)).group(1)
    printed = capsys.readouterr().out
    assert f"checkpoint NONE written: all {counted} saves of this run failed (the last: Saving" in printed
    assert trainer.state.last_checkpoint is None and not CheckpointManager(trainer.output_dir).checkpoints()


def test_a_run_whose_final_save_failed_names_the_older_checkpoint_and_fails(tmp_path, monkeypatch, capsys):
    trainer = tiny_trainer(tmp_path / "out", save_strategy="steps", save_steps=4)
    failing_saves(monkeypatch, trainer, background=False, from_step=8)
    older = trainer.output_dir / "checkpoint-4"
    with pytest.raises(CheckpointError, match=rf"so the newest checkpoint, {older}, is older than the final weights"):
        trainer.train()
    assert (f"checkpoint the final save failed (2 of 3 failed; the last: Saving {trainer.output_dir / 'checkpoint-8'}"
            in capsys.readouterr().out)


def test_the_summary_names_the_checkpoint_written(tmp_path, capsys):
    trainer = tiny_trainer(tmp_path / "out", save_strategy="steps", save_steps=4)
    trainer.train()
    assert f"  checkpoint {trainer.output_dir / 'checkpoint-8'}\n" in capsys.readouterr().out


SCRIPT = """
import resource, signal, sys, torch
from torch.utils.data import TensorDataset
from braeburn.errors import run_main
from braeburn.checkpoints.state import load_model_state
from braeburn.trainer import Trainer, TrainingConfig, background_save

def main(argv):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.RLIM_INFINITY))  # below the RNG-state file
    x, y = torch.randn(32, 4), torch.randint(0, 2, (32,))
    config = TrainingConfig(output_dir=argv[0], use_cpu=True, per_device_train_batch_size=8, max_steps=4,
                            save_strategy="steps", save_steps=2, disable_tqdm=True)
    Trainer(torch.nn.Linear(4, 2), config, train_dataset=TensorDataset(x, y),
            loss_fn=torch.nn.functional.cross_entropy).train()

run_main(main)
"""


@pytest.mark.slow  # a script run as a subprocess (21 s on a loaded machine)
def test_a_script_whose_every_save_hit_a_file_size_limit_exits_1(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "out")], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "checkpoint NONE written: all 3 saves of this run failed" in done.stdout  # step 4 tried once more
    assert "error: Training ended at step 4, but its checkpoint could not be written" in done.stderr
    assert "File too large" in done.stderr and "Traceback" not in done.stderr
