"""report_to="tensorboard" writes Transformers' folder and tags: output_dir/runs/<date>_<host>/ with train/loss,
eval/loss ... (checked against Transformers' own rewrite_logs and default_logdir; TensorBoard's writer is faked, so
the test needs no tensorboard package)."""

from __future__ import annotations

import re
import socket
import sys
import types
from pathlib import Path

import pytest

from . import _runs


class _Writer:
    made: list["_Writer"] = []

    def __init__(self, log_dir=None, **_):
        self.log_dir, self.scalars = log_dir, []
        _Writer.made.append(self)

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def add_text(self, *args, **kwargs): ...
    def flush(self): ...
    def close(self): ...


@pytest.fixture
def fake_tensorboard(monkeypatch):
    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = _Writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    monkeypatch.setattr("braeburn.trainer.config.tensorboard_installed", lambda: True)
    monkeypatch.setattr("braeburn.accelerator.trackers.is_available", lambda name: True, raising=False)
    _Writer.made = []
    return _Writer.made


def test_tensorboard_folder_and_tags_are_transformers(fake_tensorboard, tmp_path, monkeypatch, no_launcher_env,
                                                      one_thread):
    pytest.importorskip("transformers")
    from transformers.integrations.integration_utils import rewrite_logs

    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    run = _runs.Run("braeburn", tmp_path)
    trainer = run.trainer(run.args(max_steps=4, logging_steps=2, eval_strategy="steps", eval_steps=2,
                                   report_to="tensorboard"), record=False)
    trainer.train()
    (writer,) = fake_tensorboard
    folder = Path(writer.log_dir)
    assert folder.parent == run.folder / "out" / "runs"
    assert re.fullmatch(r"[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_" + re.escape(socket.gethostname()), folder.name)
    expected = [(tag, value, record["step"]) for record in trainer.state.log_history
                for tag, value in rewrite_logs({k: v for k, v in record.items() if k != "step"}).items()
                if isinstance(value, (int, float))]
    assert writer.scalars == expected
    assert {"train/loss", "train/grad_norm", "train/learning_rate", "train/epoch", "eval/loss",
            "train/train_loss", "train/total_flos"} <= {tag for tag, _, _ in writer.scalars}


def test_a_link_at_the_runs_folder_is_not_followed(fake_tensorboard, tmp_path, monkeypatch, no_launcher_env,
                                                   one_thread):
    pytest.importorskip("transformers")
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    run = _runs.Run("braeburn", tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run.folder / "out").mkdir(parents=True)
    (run.folder / "out" / "runs").symlink_to(elsewhere)
    trainer = run.trainer(run.args(max_steps=1, report_to="tensorboard"), record=False)
    _, error = run.quietly(trainer.train)
    assert error is None and fake_tensorboard == [] and list(elsewhere.iterdir()) == []
    assert "TensorBoard logging is off" in run.printed


class _FolderWriter(_Writer):
    """As torch's SummaryWriter: it makes its log_dir and an event file there."""

    def __init__(self, log_dir=None, **kwargs):
        super().__init__(log_dir, **kwargs)
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        (Path(log_dir) / "events.out.tfevents.0").touch()


def test_the_runs_folder_is_the_name_output_dir_checks_and_records(fake_tensorboard, tmp_path, monkeypatch,
                                                                   no_launcher_env, one_thread):
    """TensorBoard writes into output_dir/runs: a user's runs/ there refuses the run before training (as any name the
    run writes); a user's tensorboard/ folder is not the run's, so it neither refuses the run nor is set aside with
    the run's files by a rerun (it was: the record named tensorboard, the folder braeburn's own Trainer uses)."""
    pytest.importorskip("transformers")
    monkeypatch.setitem(sys.modules["torch.utils.tensorboard"].__dict__, "SummaryWriter", _FolderWriter)
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    run = _runs.Run("braeburn", tmp_path)
    out = run.folder / "out"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "notes.txt").write_text("a user's")
    _, error = run.quietly(run.trainer(run.args(max_steps=1, report_to="tensorboard"), record=False).train)
    assert type(error).__name__ == "ForeignFileError" and "runs" in str(error) and "TensorBoard" in str(error)
    (out / "runs" / "notes.txt").unlink()
    (out / "runs").rmdir()
    for attempt in range(2):  # a first run, then a rerun that sets the first aside
        if attempt:
            (out / "tensorboard").mkdir()
            (out / "tensorboard" / "mine.txt").write_text("a user's")
        _, error = run.quietly(run.trainer(run.args(max_steps=1, report_to="tensorboard"), record=False).train)
        assert error is None
    assert (out / "tensorboard" / "mine.txt").read_text() == "a user's"
    assert [p.name for p in (out / "previous-run-1").iterdir() if p.name == "runs"] == ["runs"]


@pytest.fixture
def broken_tensorboard(tmp_path, monkeypatch):
    """A tensorboard package that is installed (found) but raises when imported, as a broken install does."""
    package = tmp_path / "site" / "tensorboard"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('this tensorboard is broken')\n")
    (tmp_path / "site" / "tensorboard-2.20.0.dist-info").mkdir()  # its metadata, which Transformers looks for
    (tmp_path / "site" / "tensorboard-2.20.0.dist-info" / "METADATA").write_text("Name: tensorboard\nVersion: 2.20.0\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [n for n in sys.modules if n.startswith(("tensorboard", "torch.utils.tensorboard"))]:
        monkeypatch.delitem(sys.modules, name)
    import torch

    monkeypatch.delattr(torch.utils, "tensorboard", raising=False)  # (from torch.utils import tensorboard reads it)


def test_a_tensorboard_that_fails_on_import_is_refused_at_trainer_with_the_way_out(broken_tensorboard, tmp_path,
                                                                                   no_launcher_env, one_thread):
    """Transformers' Trainer(report_to="tensorboard") stops with the package's own error; braeburn's refuses at the
    same moment, Trainer(...), with one error naming TensorBoard, the package's error and the way out."""
    from tests.compat.catalogue import assert_refused

    run = _runs.Run("braeburn", tmp_path)
    for report_to in ("tensorboard", "all"):
        with pytest.raises(ImportError) as refused:
            run.trainer(run.args(report_to=report_to, max_steps=1))
        assert_refused(refused.value, ["report_to", "TensorBoard", "RuntimeError: this tensorboard is broken"],
                       ["pip install --force-reinstall tensorboard", "'none'"])
    assert not (run.folder / "out").exists()  # refused before anything was written


@pytest.mark.parametrize("report_to", ["tensorboard", ["tensorboard"], ["wandb", "tensorboard"]])
def test_the_missing_tensorboard_package_names_the_value_that_needs_it(monkeypatch, tmp_path, report_to):
    from braeburn import TrainingConfig

    monkeypatch.setattr("braeburn.trainer.config.tensorboard_installed", lambda: False)
    [error] = [e for e in TrainingConfig(output_dir=str(tmp_path), report_to=report_to).validate()
               if "needs the tensorboard package" in str(e)]
    assert error.option == "report_to" and error.value == "tensorboard"
    assert "report_to='tensorboard'" in str(error) or "report_to=tensorboard" in str(error)
