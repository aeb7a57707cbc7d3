"""No silent wrong result after train() or on resume.

- evaluate()/predict() after train() on 2 processes cover the whole dataset (a real gloo job);
- a resume with another batch size, accumulation or world size trains the remaining samples and says so;
- a resume that changes the learning rate or max_steps, or a checkpoint folder named for another step,
  is named (or refused) with both values;
- auto_find_batch_size halves the batch on an out-of-memory error in the middle of training and goes on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent


def _launch(job: str, *args: str, timeout: int = 180) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAEBURN_", "TORCHELASTIC_"))}
    env.update(OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "braeburn.cli.main", "launch", "--cpu", "--num-processes", "2",
               str(HERE / job), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-6000:]
    return text


# -- item 6: metrics after train() on several processes ------------------------------------------------
@pytest.mark.slow  # a 2-process job: ~20 s on 2 CPU cores
def test_evaluate_and_predict_after_train_on_two_processes_cover_the_whole_dataset(tmp_path):
    _launch("eval_after_train_job.py", str(tmp_path))
    result = torch.load(tmp_path / "result.pt", weights_only=True)
    assert result == {"eval_n": 11.0, "predictions": 11, "test_n": 11.0}  # not one process's 6


# -- items 7 and 8: a resume that changes the run ----------------------------------------------------
from torch.utils.data import TensorDataset  # noqa: E402

from braeburn.trainer import Callback, Trainer, TrainingConfig  # noqa: E402
from tests.trainer.resume_world_job import CountSteps  # noqa: E402  (the step counter the 2-process job uses too)


class StopAt(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, trainer, state):
        if state.global_step == self.step:
            state.request_stop("test stop", save=True)



def _data(n: int = 40) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 8, generator=generator), torch.randint(0, 3, (n,), generator=generator))


def _train(out: Path, resume: str | None = None, callbacks=(), **options) -> Trainer:
    settings = {"per_device_train_batch_size": 4, "num_train_epochs": 2, "save_strategy": "no", "learning_rate": 0.01,
                "disable_tqdm": True, **options}
    torch.manual_seed(0)
    trainer = Trainer(torch.nn.Linear(8, 3), TrainingConfig(output_dir=str(out), **settings), train_dataset=_data(),
                      loss_fn=torch.nn.functional.cross_entropy, callbacks=list(callbacks))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.fixture
def stopped_at_step_6(tmp_path, cpu_only):
    """40 samples in batches of 4: 10 steps an epoch, 20 in all; stopped (and saved) at step 6, 24 samples in."""
    out = tmp_path / "run"
    _train(out, callbacks=[StopAt(6)])
    assert (out / "checkpoint-6").is_dir()
    return out


@pytest.mark.parametrize("change, steps_left, said", [
    ({"per_device_train_batch_size": 8}, 7, "per_device_train_batch_size 4 -> 8"),  # (80 - 24) / 8 samples
    ({"gradient_accumulation_steps": 2}, 7, "gradient_accumulation_steps 1 -> 2"),
    ({"per_device_train_batch_size": 2}, 28, "per_device_train_batch_size 4 -> 2")])
def test_a_resume_with_another_global_batch_trains_the_remaining_samples_and_says_so(stopped_at_step_6, capsys,
                                                                                     change, steps_left, said):
    counted = CountSteps()
    trainer = _train(stopped_at_step_6, resume="latest", callbacks=[counted], **change)
    out = capsys.readouterr().out
    assert counted.steps == steps_left, out
    assert trainer.state.global_step == trainer.state.max_steps, out
    assert said in out and f"training continues from there to step {trainer.state.max_steps}" in out, out
    assert "training ended (2 epochs done)" in out  # epochs, not max_steps, ended it


def test_a_resume_with_the_same_global_batch_in_another_shape_continues_exactly(stopped_at_step_6, capsys):
    counted = CountSteps()
    _train(stopped_at_step_6, resume="latest", callbacks=[counted], per_device_train_batch_size=2,
           gradient_accumulation_steps=2)
    assert counted.steps == 14  # 20 - 6: the same 4 samples a step
    assert "the same 4 samples a step, so the run continues exactly at step 6" in capsys.readouterr().out


def test_a_new_learning_rate_is_applied_and_named(stopped_at_step_6, capsys):
    trainer = _train(stopped_at_step_6, resume="latest", learning_rate=0.001, max_steps=7)
    assert "learning_rate 0.01 -> 0.001" in capsys.readouterr().out
    rates = trainer.lr_scheduler.scheduler.base_lrs
    assert rates == [pytest.approx(0.001)] * len(rates)


def test_max_steps_below_the_checkpoints_step_is_an_error_naming_both(stopped_at_step_6):
    from braeburn.trainer.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=r"max_steps=4, below the step of the checkpoint .*checkpoint-6 \(6\).*"
                                              r"--max_steps above 6"):
        _train(stopped_at_step_6, resume="latest", max_steps=4)


def test_a_checkpoint_folder_named_for_another_step_is_named(stopped_at_step_6, capsys):
    renamed = stopped_at_step_6 / "checkpoint-3"
    (stopped_at_step_6 / "checkpoint-6").rename(renamed)
    _train(stopped_at_step_6, resume=str(renamed))
    assert "checkpoint-3 holds step 6" in capsys.readouterr().out
    from braeburn.trainer.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="checkpoint-3 holds step 6"):
        _train(stopped_at_step_6, resume="latest")


# -- item 10: out of memory in the middle of an auto_find_batch_size run ------------------------------
class OutOfMemoryLater(torch.nn.Module):
    """Raises torch's out-of-memory error for batches above 4 from forward ``fail_at`` on (the first forward
    is auto_find_batch_size's probe, then one a training step)."""

    def __init__(self, fail_at: int | None):
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.forwards, self.fail_at = torch.nn.Linear(8, 3), 0, fail_at

    def forward(self, x):
        self.forwards += 1
        if self.fail_at is not None and self.forwards >= self.fail_at and x.shape[0] > 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a test)")
        return self.linear(x)


def _autobatch_run(out: Path, fail_at: int | None) -> tuple[Trainer, torch.nn.Module]:
    model = OutOfMemoryLater(fail_at)
    config = TrainingConfig(output_dir=str(out), per_device_train_batch_size=8, auto_find_batch_size=True,
                            num_train_epochs=2, save_strategy="no", learning_rate=0.05, disable_tqdm=True)
    trainer = Trainer(model, config, train_dataset=_data(), loss_fn=torch.nn.functional.cross_entropy)
    trainer.train()
    return trainer, model


@pytest.mark.slow  # 7 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("step", [4, 6])  # mid-epoch, and the first step of the second epoch (5 steps an epoch)
def test_out_of_memory_during_an_auto_find_batch_size_run_halves_the_batch_and_continues(tmp_path, cpu_only,
                                                                                        capsys, step):
    reference, _ = _autobatch_run(tmp_path / "reference", fail_at=None)
    trainer, model = _autobatch_run(tmp_path / "oom", fail_at=step + 1)
    out = capsys.readouterr().out
    assert trainer.state.global_step == 10, out  # 40 samples in steps of 8, twice: nothing lost, nothing added
    assert (trainer.config.per_device_train_batch_size, trainer.config.gradient_accumulation_steps) == (4, 2)
    assert (f"out of memory in training step {step} at per_device_train_batch_size=8 (OutOfMemoryError: CUDA out "
            "of memory") in out
    assert f"continues from step {step - 1} with per_device_train_batch_size=4 and gradient_accumulation_steps=2" in out
    for mine, theirs in zip(model.parameters(), reference.model.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)  # the same samples in each step: the same training


# -- item 7 on real processes: another world size -------------------------------------------------------
def _alone(job: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAEBURN_", "TORCHELASTIC_"))}
    env.update(OMP_NUM_THREADS="1", BRAEBURN_DEVICE="cpu")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, str(HERE / job), *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done.stdout + done.stderr


@pytest.mark.slow  # a 2-process job and a 1-process run each: ~40 s on 2 CPU cores
@pytest.mark.parametrize("stop_on, resume_on, expected", [
    (2, 1, {"trained": 16, "step": 24, "max_steps": 24}),  # 32 of 96 samples done: 64 left, 4 a step
    (1, 2, {"trained": 10, "step": 12, "max_steps": 12})])  # 16 of 96 done: 80 left, 8 a step
def test_a_resume_on_another_number_of_processes_trains_the_remaining_samples(tmp_path, stop_on, resume_on, expected):
    run = {1: _alone, 2: _launch}
    run[stop_on]("resume_world_job.py", str(tmp_path), "stop")
    said = run[resume_on]("resume_world_job.py", str(tmp_path), "resume")
    assert torch.load(tmp_path / "resumed.pt", weights_only=True) == expected, said[-3000:]
    assert f"world size {stop_on} -> {resume_on}" in said


class OutOfMemoryInStep(torch.optim.SGD):
    """An optimizer whose third step runs out of memory (where the weights may be part-updated)."""

    def step(self, closure=None):
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a test)")
        return super().step(closure)


def test_out_of_memory_in_the_optimizer_step_is_named_with_the_checkpoint_to_resume(tmp_path, cpu_only):
    from braeburn.data.batch_size import BatchSizeError

    model = OutOfMemoryLater(fail_at=None)
    config = TrainingConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, auto_find_batch_size=True,
                            max_steps=6, save_strategy="steps", save_steps=2, disable_tqdm=True)
    trainer = Trainer(model, config, train_dataset=_data(), loss_fn=torch.nn.functional.cross_entropy,
                      optimizer=OutOfMemoryInStep(model.parameters(), lr=0.01))
    with pytest.raises(BatchSizeError, match=r"Out of memory in training step 3 .* cannot halve the batch and go on: "
                                             r"it happened in _optimizer_step.*--resume_from_checkpoint .*checkpoint-2"):
        trainer.train()
