"""Errors that must be one clear line (an output folder that cannot be written) and errors that must keep
their traceback (a bug in the user's own collate_fn, called back by the DataLoader)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.errors import is_user_error, run_main
from braeburn.trainer import Trainer, TrainingConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def read_only(tmp_path, monkeypatch):
    """A folder that refuses new entries: its mode bits (not root), a read-only tmpfs (root), else a fake mkdir."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                                 capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        mounted = False
    if mounted:
        yield folder
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
        return
    real_mkdir = os.mkdir

    def refuse(path, *args, **kwargs):
        if Path(path).parent == folder:
            raise PermissionError(13, os.strerror(13), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", refuse)
    yield folder


def _trainer(output_dir: Path) -> Trainer:
    data = TensorDataset(torch.randn(8, 4), torch.randn(8))
    config = TrainingConfig(output_dir=str(output_dir), max_steps=1, use_cpu=True, mixed_precision="no",
                            compile="false", save_strategy="no")
    return Trainer(torch.nn.Linear(4, 1), config, train_dataset=data, loss_fn=lambda out, y: (out[:, 0] - y).pow(2).mean())


def test_an_output_dir_under_a_read_only_folder_is_one_clear_error(read_only, capsys):
    trainer = _trainer(read_only / "run")
    with pytest.raises(OSError) as caught:  # from the output lock (taken first) or prepare_output_dir
        trainer.train()
    message = str(caught.value)
    assert f"output_dir={str(read_only / 'run')!r} cannot be written" in message
    assert ("Read-only file system" in message or "Permission denied" in message) and "--output_dir" in message
    assert is_user_error(caught.value)
    with pytest.raises(SystemExit) as exited:  # what a script ending with run_main prints: one paragraph
        run_main(lambda argv: _trainer(read_only / "run").train(), [])
    assert exited.value.code == 1 and "Traceback" not in capsys.readouterr().err


def test_an_output_dir_under_a_file_is_one_clear_error(tmp_path):
    (tmp_path / "notes.txt").write_text("a file")
    with pytest.raises(OSError, match=r"notes.txt/run' cannot be written: Not a directory") as caught:
        _trainer(tmp_path / "notes.txt" / "run").train()
    assert is_user_error(caught.value) and "--output_dir" in str(caught.value)


SCRIPT = '''
import torch
from torch.utils.data import TensorDataset
from braeburn.trainer import Trainer, TrainingConfig

def collate(samples):
    raise ValueError("my collate_fn has a bug")

def main(argv):
    if argv:
        raise ValueError("--data_dir is missing: pass the folder of the data")  # the script's own check
    data = TensorDataset(torch.randn(8, 4), torch.randn(8))
    config = TrainingConfig(output_dir=OUT, max_steps=1, use_cpu=True, mixed_precision="no",
                            compile="false", save_strategy="no")
    Trainer(torch.nn.Linear(4, 1), config, train_dataset=data, collate_fn=collate,
            loss_fn=lambda out, y: out.sum()).train()
'''


def test_a_bug_in_the_users_collate_fn_keeps_its_traceback_and_the_scripts_own_check_does_not(tmp_path, capsys):
    path = tmp_path / "user_script.py"
    path.write_text(textwrap.dedent(SCRIPT).replace("OUT", repr(str(tmp_path / "out"))))
    spec = importlib.util.spec_from_file_location("user_script", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["user_script"] = module
    try:
        spec.loader.exec_module(module)
        with pytest.raises(ValueError, match="my collate_fn has a bug") as caught:  # re-raised: the traceback shows
            run_main(module.main, [])
        assert caught.traceback[-1].name == "collate"  # down to the line that raised
        with pytest.raises(SystemExit) as exited:  # a check the script makes itself stays one line
            run_main(module.main, ["--oops"])
        assert exited.value.code == 1 and "--data_dir is missing" in capsys.readouterr().err
    finally:
        del sys.modules["user_script"]
