"""A Lightning script run again into the same default_root_dir: each fit() writes into a new
lightning_logs/version_N, as Lightning's loggers do, and no file of an earlier run changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from braeburn.compat.lightning.runs import claim_run_folder, restarted_run_folder
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
    assert claim_run_folder(logs) == logs / "version_4"
    assert claim_run_folder(logs) == logs / "version_5"
    assert (logs / "version_3").read_text() == "a file of the user's"
    assert restarted_run_folder(logs) == logs / "version_5"  # a restarted worker takes its first attempt's


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
                                             ("model.ckpt", "not Lightning's .ckpt files"),
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
