"""A disk that fills during a run costs a write, never the run: metrics.jsonl, TensorBoard and the plot warn
once (naming the file) and training goes on; every on_train_end hook runs, and the signal handlers are
restored. The disk is a real full tmpfs where one can be mounted, else a fake raising ENOSPC from the
write (tests/full_disk.py).
"""

from __future__ import annotations

import errno
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.trainer import Callback, Trainer, TrainingConfig
from braeburn.trainer.callbacks import CallbackList
from braeburn.trainer.metrics_log import MetricsLogCallback, read_metrics
from braeburn.trainer.plots import PLOT_FILE, PlotCallback
from braeburn.trainer.state import TrainerState
from tests.full_disk import full_disk  # noqa: F401  (the fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def fake_trainer(folder: Path):
    return SimpleNamespace(is_main_process=True, output_dir=folder)


def test_metrics_log_survives_a_full_disk_warns_once_and_catches_up(full_disk, capsys):
    logger, state, trainer = MetricsLogCallback(tensorboard=False), TrainerState(), fake_trainer(full_disk.folder)
    logger.on_train_begin(trainer, state)
    for step in range(1, 7):
        if step == 3:
            full_disk.fill()
        if step == 6:
            full_disk.free()
        state.global_step = step
        logger.on_log(trainer, state, {"loss": 1.0 / step, "x" * 6000: 0.0})  # big: a real full disk has no page left
    logger.on_train_end(trainer, state)
    assert [r["step"] for r in read_metrics(full_disk.folder)] == [1, 2, 3, 4, 5, 6]  # in order, no torn line
    err = capsys.readouterr().err
    assert err.count("warning: cannot write") == 1, err
    assert f"{full_disk.folder / 'metrics.jsonl'} (No space left on device)" in err and "Training goes on" in err


def test_records_held_back_by_a_full_disk_are_tried_once_more_at_the_end(full_disk, capsys):
    logger, state, trainer = MetricsLogCallback(tensorboard=False), TrainerState(), fake_trainer(full_disk.folder)
    logger.on_train_begin(trainer, state)
    full_disk.fill()
    state.global_step = 1
    logger.on_log(trainer, state, {"loss": 0.5})
    full_disk.free()
    logger.on_train_end(trainer, state)
    assert read_metrics(full_disk.folder) == [{"step": 1, "loss": 0.5}]


class BrokenTensorBoard:
    log_dir = "out/tensorboard"

    def __init__(self):
        self.calls, self.closed = 0, False

    def add_scalar(self, *args):
        self.calls += 1
        raise OSError(errno.EIO, "Input/output error")

    def close(self):
        self.closed = True


def test_a_failed_tensorboard_write_warns_once_and_metrics_go_on(tmp_path, monkeypatch, capsys):
    broken = BrokenTensorBoard()
    monkeypatch.setattr("braeburn.trainer.metrics_log._tensorboard_writer", lambda folder: broken)
    logger, state, trainer = MetricsLogCallback(), TrainerState(), fake_trainer(tmp_path)
    logger.on_train_begin(trainer, state)
    for step in (1, 2, 3):
        state.global_step = step
        logger.on_log(trainer, state, {"loss": 0.5})
    logger.on_train_end(trainer, state)
    assert broken.calls == 1 and broken.closed
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    err = capsys.readouterr().err
    assert err.count("warning: cannot write out/tensorboard (Input/output error)") == 1, err


def test_the_plot_on_a_full_disk_warns_and_leaves_no_temporary_file(full_disk, capsys):
    pytest.importorskip("matplotlib")  # optional dependency: the plot extra
    state = TrainerState(log_history=[{"step": 1, "loss": 1.0, "learning_rate": 1e-3},
                                      {"step": 2, "loss": 0.5, "learning_rate": 5e-4}])
    full_disk.fill()
    plot = PlotCallback()
    plot.on_train_end(fake_trainer(full_disk.folder), state)
    plot.wait()  # drawn in a thread while the last checkpoint is written
    assert plot.path is None and not (full_disk.folder / PLOT_FILE).exists()
    assert [p.name for p in full_disk.folder.iterdir() if p.name != ".ballast"] == []  # no .training_curves.png.tmp
    err = capsys.readouterr().err
    assert f"cannot write {full_disk.folder / PLOT_FILE}" in err and "No space left on device" in err


def test_every_on_train_end_hook_runs_when_one_fails(capsys):
    ran = []

    class Fails(Callback):
        def __init__(self, name):
            self.name = name

        def on_train_end(self, trainer, state):
            ran.append(self.name)
            raise RuntimeError(f"{self.name} broke")

    class Records(Callback):
        def on_train_end(self, trainer, state):
            ran.append("records")

    callbacks = CallbackList([Fails("first"), Records(), Fails("second")])
    with pytest.raises(RuntimeError, match="first broke"):  # the first failure, with its own traceback
        callbacks.on_train_end(None, TrainerState())
    assert ran == ["first", "records", "second"]
    assert "another on_train_end hook failed too: RuntimeError: second broke" in capsys.readouterr().err


class FillDiskAt(Callback):
    def __init__(self, disk, step):
        self.disk, self.step = disk, step

    def on_step_end(self, trainer, state):
        if state.global_step == self.step:
            self.disk.fill()


def test_a_disk_that_fills_mid_run_ends_the_run_normally(full_disk, capsys):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32))
    config = TrainingConfig(output_dir=str(full_disk.folder / "run"), per_device_train_batch_size=4, max_steps=6,
                            logging_steps=1, save_strategy="no", use_cpu=True, mixed_precision="no",
                            compile="false")
    trainer = Trainer(torch.nn.Linear(4, 1), config, train_dataset=data,
                      loss_fn=lambda out, y: ((out[:, 0] - y) ** 2).mean(), callbacks=[FillDiskAt(full_disk, 3)])
    result = trainer.train()  # no exception: the user's code after train() (saving the model) runs
    assert result.global_step == 6
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # handlers restored
    run = full_disk.folder / "run"
    steps = [r["step"] for r in read_metrics(run) if "loss" in r]  # whole lines only (read_metrics parses each)
    # The fake fails every write from step 3 on; a real tmpfs still takes small lines into a page it has.
    assert steps == [1, 2] if not full_disk.real else steps == list(range(1, len(steps) + 1)) and len(steps) >= 2
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
    err = capsys.readouterr().err
    assert err.count(f"cannot write {run / 'metrics.jsonl'}") == (1 if len(steps) < 6 else 0), err
    if __import__("importlib").util.find_spec("matplotlib"):
        assert f"cannot write {run / PLOT_FILE}" in err
