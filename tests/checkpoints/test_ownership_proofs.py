"""What proves an entry braeburn's, and what braeburn never does to an entry it cannot prove it wrote:
a manifest copied into a folder, a FIFO or a device at a record's name, a tracker's names in a user's folder,
a rerun of an Accelerator script, a mount point inside a folder braeburn removes, its own leftovers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from braeburn import Accelerator
from braeburn.checkpoints import no_follow, ownership
from braeburn.compat.accelerate.api import ProjectConfiguration
from braeburn.accelerator.trackers import JSONLinesTracker

from tests.checkpoints.test_output_ownership import run, trainer


def test_a_first_run_sets_aside_no_folder_of_the_users_whose_manifest_checks_out(tmp_path):
    """A save_state() folder of the user's and a copied checkpoint both carry a manifest that checks out: a manifest
    proves a checkpoint whole, not that braeburn wrote it in this folder, so a first run moves neither."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.save_state(str(project / "my_state"))
    trainer(elsewhere).train()
    shutil.copytree(elsewhere / "checkpoint-2", project / "best-model")
    shutil.copytree(elsewhere / "checkpoint-1", project / "checkpoint-7")  # even under a checkpoint's name
    assert not ownership.owns(project, "best-model") and not ownership.owns(project, "checkpoint-7")
    with pytest.raises(ownership.ForeignFileError, match="checkpoint-7 is not braeburn's"):
        trainer(project).train()
    shutil.rmtree(project / "checkpoint-7")
    run(project)
    assert not (project / "previous-run-1").exists()
    assert (project / "my_state" / "manifest.json").is_file() and (project / "best-model" / "manifest.json").is_file()
    accelerator.save_state(str(project / "my_state"))  # save_state() of that very folder still replaces it


def test_a_fifo_or_a_device_at_a_record_or_manifest_name_is_refused_without_blocking(tmp_path):
    """A FIFO at .braeburn-files.json or at a sub-folder's manifest.json hung train(); a link to /dev/zero there read
    until memory ran out. Each is refused (or not braeburn's) at once."""
    (tmp_path / "a").mkdir()
    os.mkfifo(tmp_path / "a" / ownership.MARKER)
    (tmp_path / "b" / "checkpoint-1").mkdir(parents=True)
    os.mkfifo(tmp_path / "b" / "checkpoint-1" / "manifest.json")
    (tmp_path / "c" / "checkpoint-1").mkdir(parents=True)
    os.symlink("/dev/zero", tmp_path / "c" / "checkpoint-1" / "manifest.json")
    (tmp_path / "b" / ownership.MARKER).write_text(json.dumps({"written_by": "braeburn", "entries": {}}))
    result: dict[str, object] = {}

    def check() -> None:
        result["a"] = ownership.why_not(tmp_path / "a", ownership.MARKER)
        result["b"] = ownership.why_not(tmp_path / "b", "checkpoint-1")
        result["c"] = ownership.why_not(tmp_path / "c", "checkpoint-1")
        with pytest.raises(no_follow.NotARegularFileError, match="a FIFO"):
            no_follow.read_capped(tmp_path / "a" / ownership.MARKER, 10)

    worker = threading.Thread(target=check, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "a FIFO blocked the check"
    assert "a FIFO, not a regular file" in result["a"]
    assert result["b"] and result["c"]  # not braeburn's
    with pytest.raises(ownership.ForeignFileError, match="a FIFO"):
        trainer(tmp_path / "a").train()


def test_the_jsonl_tracker_leaves_a_users_config_and_metrics_alone(tmp_path, capsys):
    """init_trackers('bert', config) in a project whose bert/ holds the user's model config and logs: both stay."""
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text('{"model_type": "bert"}')
    (bert / "metrics.jsonl").write_text('{"user": 1}\n')
    accelerator = Accelerator(cpu=True, project_dir=str(tmp_path), log_with="jsonl")
    accelerator.init_trackers("bert", config={"lr": 0.1})
    accelerator.log({"loss": 1.0}, step=1)
    accelerator.end_training()
    assert (bert / "config.json").read_text() == '{"model_type": "bert"}'
    assert (bert / "metrics.jsonl").read_text() == '{"user": 1}\n'
    assert capsys.readouterr().err.count("braeburn: warning:") == 2
    fresh = JSONLinesTracker("run", tmp_path / "logs")  # braeburn's own names: written, and rewritten on a rerun
    fresh.store_init_configuration({"lr": 0.2})
    fresh.finish()
    JSONLinesTracker("run", tmp_path / "logs").store_init_configuration({"lr": 0.3})
    assert json.loads((tmp_path / "logs" / "run" / "config.json").read_text()) == {"lr": 0.3}


def test_a_rerun_of_an_automatic_naming_script_refuses_instead_of_replacing(tmp_path):
    def script() -> Accelerator:
        accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
            project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2))
        accelerator.prepare(torch.nn.Linear(2, 2))
        return accelerator

    first = script()
    for _ in range(3):  # checkpoint_0 rotated away: a rerun's first save would be, then run 1's replaced
        first.save_state()
    before = {p.name: (p / "manifest.json").read_bytes() for p in (tmp_path / "checkpoints").glob("checkpoint_*")}
    rerun = script()
    rerun.load_state()  # (does not move the iteration, as in Accelerate: the refusal used to advise it)
    with pytest.raises(FileExistsError, match=r"checkpoint_2' already exists at or after this save's iteration 0"
                       r".*iteration = 3 before the first save_state\(\) \(load_state\(\) does not change it") as raised:
        rerun.save_state()
    assert "or load_state() the earlier run first" not in str(raised.value)
    assert sorted(before) == ["checkpoint_1", "checkpoint_2"]
    assert {p.name: (p / "manifest.json").read_bytes() for p in (tmp_path / "checkpoints").glob("checkpoint_*")} == before
    rerun.project_configuration.iteration = 3  # the way out the refusal names works
    rerun.save_state()
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("checkpoint_*")) == ["checkpoint_2", "checkpoint_3"]


def test_no_tree_removal_crosses_a_mount_point(tmp_path, monkeypatch):
    """A mount inside a folder braeburn removes (a bind mount in a recorded checkpoint): nothing is removed, and
    one line says why. (The mount table is Linux's; here a folder is declared a mount point in it.)"""
    tree = tmp_path / "checkpoint-1"
    (tree / "extra").mkdir(parents=True)
    (tree / "extra" / "keep.txt").write_text("keep")
    (tree / "model.bin").write_text("x")
    monkeypatch.setattr(no_follow, "_mount_points", lambda: {os.path.realpath(tree / "extra")})
    with pytest.raises(no_follow.MountInsideError, match="is a mount point inside"):
        no_follow.remove_tree(tree)
    assert (tree / "extra" / "keep.txt").read_text() == "keep" and (tree / "model.bin").exists()
    assert not no_follow.remove_tree_quietly(tree) and (tree / "extra" / "keep.txt").exists()


def test_a_checkpoint_replaced_but_not_removed_stays_braeburns(tmp_path, monkeypatch):
    """Removing .checkpoint-N.tmp.old failed part-way: its name stays in the record, so later runs go on."""
    out = tmp_path / "out"
    trainer(out).train()
    real = no_follow.remove_tree_quietly
    monkeypatch.setattr("braeburn.trainer.checkpoint.remove_tree_quietly",
                        lambda p: False if Path(p).name.endswith(".tmp.old") else real(p))
    trainer(out, overwrite_output_dir=True).train()  # its saves replace checkpoint-1 and -2
    assert (out / ".checkpoint-1.tmp.old").is_dir()
    assert ownership.recorded(out)[".checkpoint-1.tmp.old"] == ownership.FOLDER
    monkeypatch.undo()
    trainer(out, overwrite_output_dir=True).train()  # not refused about braeburn's own leftover


def test_the_record_at_a_folder_or_unwritable_says_which_file_and_what_to_do(tmp_path, monkeypatch):
    (tmp_path / "a" / ownership.MARKER).mkdir(parents=True)
    with pytest.raises(ownership.ForeignFileError) as refused:
        trainer(tmp_path / "a").train()
    assert "a folder, not a regular file" in str(refused.value) and f"move {ownership.MARKER} out of" in str(refused.value)

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(no_follow, "create_temporary", full)
    (tmp_path / "b").mkdir()
    with pytest.raises(OSError) as failed:
        ownership.claim(tmp_path / "b", {"x": ownership.FILE})
    message = str(failed.value)
    assert message.count("\n") == 0 and repr(str(tmp_path / "b" / ownership.MARKER)) in message
    assert "Free disk space" in message and failed.value.__cause__ is None and failed.value.__suppress_context__


def test_a_record_write_killed_half_way_leaves_no_temporary_for_good(tmp_path):
    """A SIGKILL while the record is written left ..braeburn-files.json.<pid>.<hex>.tmp in the folder forever."""
    code = ("import sys, os; from braeburn.checkpoints import no_follow; from pathlib import Path; "
            "h, t = no_follow.create_temporary(Path(sys.argv[1]) / '.braeburn-files.json'); h.write(b'{'); h.flush(); "
            "os.kill(os.getpid(), 9)")
    child = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env={**os.environ, "PYTHONPATH": "src"})
    assert child.returncode == -9
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    (tmp_path / "user.tmp").write_text("mine")
    ownership.claim(tmp_path, {"metrics.jsonl": ownership.FILE})
    assert sorted(p.name for p in tmp_path.iterdir()) == [ownership.MARKER, "user.tmp"]
