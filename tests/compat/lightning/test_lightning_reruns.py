"""A Lightning script run again into the same default_root_dir: each fit() writes into a new
lightning_logs/version_N, as Lightning's loggers do, and no file of an earlier run changes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from braeburn.compat.lightning import trainer as lightning_compat
from braeburn.compat.lightning.runs import JOB_FILE, claim_run_folder, job_identity, restarted_run_folder
from braeburn.lightning import LightningArgumentError, Trainer

from .lightning_modules import Regression, listing, regression_data


@pytest.fixture(autouse=True)
def _cpu(cpu_only, one_thread):
    pass


def _fit(root: Path, ckpt_path: str | None = None, **options) -> Trainer:
    settings = dict(accelerator="cpu", devices=1, max_epochs=1, enable_progress_bar=False, default_root_dir=str(root))
    trainer = Trainer(**{**settings, **options})
    trainer.fit(Regression(), regression_data(), ckpt_path=ckpt_path)
    return trainer


def test_a_rerun_writes_a_new_version_and_changes_no_file_of_the_first(tmp_path, capsys):
    first = _fit(tmp_path)
    before = listing(tmp_path)
    second = _fit(tmp_path)  # the same script again: the same steps, the same checkpoint name
    after = listing(tmp_path)
    assert {name: after[name] for name in before} == before  # nothing of the first run replaced, moved or deleted
    assert "lightning_logs/version_0/checkpoint-6/model.safetensors" in before
    assert "lightning_logs/version_1/checkpoint-6/model.safetensors" in after
    assert {name.split("/")[1] for name in after} == {"version_0", "version_1"}
    assert (first.log_dir, second.log_dir) == (str(tmp_path / "lightning_logs" / "version_0"),
                                               str(tmp_path / "lightning_logs" / "version_1"))
    out = capsys.readouterr()
    assert "does not delete" not in out.out + out.err  # no warning about another run's checkpoints: there is none


def test_a_resumed_run_writes_beside_the_run_it_resumes(tmp_path):
    _fit(tmp_path, max_epochs=1)
    before = listing(tmp_path)
    resumed = _fit(tmp_path, max_epochs=2, ckpt_path="last")
    assert resumed.global_step == 12 and resumed.log_dir.endswith("version_1")
    after = listing(tmp_path)
    assert {name: after[name] for name in before} == before
    assert "lightning_logs/version_1/checkpoint-12/manifest.json" in after


def test_versions_are_never_reused_and_nothing_named_version_n_is_touched(tmp_path):
    logs = tmp_path / "lightning_logs"
    logs.mkdir()
    (logs / "version_3").write_text("a file of the user's")
    (logs / "version_x").mkdir()
    job = {"torchrun_agent_folder": "/tmp/torchelastic_x/none_y"}
    assert claim_run_folder(logs, job) == logs / "version_4"
    assert claim_run_folder(logs, {"SLURM_JOB_ID": "7"}) == logs / "version_5"
    assert (logs / "version_3").read_text() == "a file of the user's"
    assert restarted_run_folder(logs, job) == logs / "version_4"  # a restarted worker takes its own job's
    assert restarted_run_folder(logs, job, fit=2) is None  # ... for the same fit() of the script
    assert restarted_run_folder(logs, None) is None  # a job that cannot be told from others takes none
    assert json.loads((logs / "version_4" / JOB_FILE).read_text())["job"] == job


def test_a_root_that_cannot_hold_a_run_folder_is_one_error_in_lightnings_words(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError) as caught:
        _fit(tmp_path / "a-file")
    message = str(caught.value)
    assert f"Trainer(default_root_dir={str(tmp_path / 'a-file')!r})" in message and "--" not in message


def test_ckpt_path_last_without_a_checkpoint_starts_afresh_with_a_warning(tmp_path, capsys):
    trainer = _fit(tmp_path, ckpt_path="last")  # Lightning: "set and forget" before the first run
    assert trainer.global_step == 6
    assert "fit(ckpt_path='last') is set, but" in capsys.readouterr().out


@pytest.mark.parametrize("ckpt_path,words", [("best", "Lightning's own ModelCheckpoint"),
                                             ("model.ckpt", "not other .ckpt files"),
                                             ("missing", "no such file or folder"),
                                             ("empty", "holds none")])
def test_ckpt_paths_braeburn_cannot_resume_are_refused_before_training(tmp_path, ckpt_path, words):
    (tmp_path / "model.ckpt").write_bytes(b"\x80\x04")
    (tmp_path / "empty").mkdir()
    path = ckpt_path if ckpt_path == "best" else str(tmp_path / ckpt_path)
    with pytest.raises(LightningArgumentError, match=words) as caught:
        _fit(tmp_path / "root", ckpt_path=path)
    assert f"fit(ckpt_path={path!r})" in str(caught.value)
    assert not (tmp_path / "root").exists()  # refused before any folder was made


def _torchrun_worker(monkeypatch, tmp_path: Path, agent: str, restart: int) -> None:
    """This process as torchrun's worker of the job whose agent folder is ``agent``, at ``restart``; a new process
    (its fit() calls counted from 1 again). torchrun's run id is its default, "none", for every job."""
    error_file = tmp_path / "torchelastic_tmp" / f"none_{agent}" / f"attempt_{restart}" / "0" / "error.json"
    for name, value in (("TORCHELASTIC_RUN_ID", "none"), ("TORCHELASTIC_MAX_RESTARTS", "3"),
                        ("TORCHELASTIC_RESTART_COUNT", str(restart)), ("TORCHELASTIC_ERROR_FILE", str(error_file))):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(lightning_compat, "_FITS", itertools.count(1))


def test_a_restarted_worker_goes_on_in_its_own_jobs_folder_and_never_takes_another_jobs(tmp_path, monkeypatch,
                                                                                      capsys):
    root, logs = tmp_path / "root", tmp_path / "root" / "lightning_logs"
    _torchrun_worker(monkeypatch, tmp_path, "jobA", 0)
    _fit(root)  # job A's first attempt writes version_0 (and then dies)
    _torchrun_worker(monkeypatch, tmp_path, "jobB", 0)
    _fit(root)  # another job in the same default_root_dir: version_1, newer
    before = listing(logs / "version_1")
    _torchrun_worker(monkeypatch, tmp_path, "jobA", 1)
    capsys.readouterr()
    restarted = _fit(root, max_epochs=2)
    assert restarted.log_dir == str(logs / "version_0") and restarted.global_step == 12
    assert f"resumed from {logs / 'version_0' / 'checkpoint-6'} at step 6" in capsys.readouterr().out
    assert listing(logs / "version_1") == before  # job B's checkpoint neither resumed, rotated nor rewritten


def test_a_restart_with_ckpt_path_last_goes_on_from_its_own_checkpoint_not_a_newer_jobs(tmp_path, monkeypatch):
    root, logs = tmp_path / "root", tmp_path / "root" / "lightning_logs"
    _torchrun_worker(monkeypatch, tmp_path, "jobA", 0)
    _fit(root, ckpt_path="last")  # job A's first attempt (a script that passes "last" from its first run)
    _torchrun_worker(monkeypatch, tmp_path, "jobB", 0)
    _fit(root, max_epochs=2)  # another job's newer version_1, at step 12: "last" would name it
    _torchrun_worker(monkeypatch, tmp_path, "jobA", 1)
    module = Regression()
    restarted = Trainer(accelerator="cpu", devices=1, max_epochs=2, enable_progress_bar=False,
                        default_root_dir=str(root))
    restarted.fit(module, regression_data(), ckpt_path="last")
    assert restarted.log_dir == str(logs / "version_0") and restarted.global_step == 12
    assert len(module.losses) == 6  # the second epoch trained from its own step 6 (job B's state holds 12)


def test_a_restart_that_finds_no_folder_of_its_own_job_starts_a_new_version(tmp_path, monkeypatch):
    root, logs = tmp_path / "root", tmp_path / "root" / "lightning_logs"
    _fit(root)  # a plain `python script.py`: no job braeburn can tell
    _torchrun_worker(monkeypatch, tmp_path, "jobB", 0)
    _fit(root)
    before = listing(logs)
    _torchrun_worker(monkeypatch, tmp_path, "jobA", 1)  # restarted, but its first attempt made no folder
    restarted = _fit(root)
    assert restarted.log_dir == str(logs / "version_2") and restarted.global_step == 6
    after = listing(logs)
    assert {name: after[name] for name in before} == before


def test_the_job_is_told_by_torchruns_agent_folder_its_run_id_or_a_schedulers_job_id():
    agent = "/tmp/torchelastic_ab/none_cd"
    first = {"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_ERROR_FILE": f"{agent}/attempt_0/3/error.json"}
    again = {**first, "TORCHELASTIC_ERROR_FILE": f"{agent}/attempt_2/3/error.json"}
    assert job_identity(first) == job_identity(again) == {"torchrun_agent_folder": agent}
    assert job_identity({"TORCHELASTIC_RUN_ID": "5f1c", "SLURM_JOB_ID": "991"}) == \
        {"TORCHELASTIC_RUN_ID": "5f1c", "SLURM_JOB_ID": "991"}
    assert job_identity({"TORCHELASTIC_RUN_ID": "none"}) is None and job_identity({}) is None
    assert job_identity({"SLURM_JOB_ID": "991"}) is None  # shared by every job started in one allocation


def test_ckpt_path_naming_the_folder_of_runs_points_at_last_or_one_run(tmp_path):
    _fit(tmp_path / "root")
    _fit(tmp_path / "root")
    logs = tmp_path / "root" / "lightning_logs"
    for asked in (logs, tmp_path / "root"):
        with pytest.raises(LightningArgumentError) as caught:
            _fit(tmp_path / "root", ckpt_path=str(asked))
        message = str(caught.value)
        assert "is a folder of runs, not of checkpoints" in message and "version_0, " in message, message
        assert f"ckpt_path={str(logs / 'version_1')!r}" in message and "or ckpt_path='last' for" in message
    with pytest.raises(LightningArgumentError, match=r"ckpt_path='last' with Trainer\(default_root_dir="):
        _fit(tmp_path / "elsewhere", ckpt_path=str(logs))  # another root: 'last' would look elsewhere
    assert sorted(path.name for path in logs.iterdir()) == ["version_0", "version_1"]  # refused before a folder


def test_a_ckpt_path_that_is_no_path_is_refused_in_one_line(tmp_path):
    with pytest.raises(LightningArgumentError, match=r"fit\(ckpt_path=123\): a path was expected"):
        _fit(tmp_path, ckpt_path=123)
