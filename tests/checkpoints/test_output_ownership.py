"""braeburn moves, replaces or deletes only what it can prove it wrote (braeburn.checkpoints.ownership).

An output folder may be a project, a home folder or a data folder. A run there writes only its own
names; a rerun sets aside, into previous-run-N/, only the entries braeburn's record (or a checkpoint's
manifest) vouches for, all of them or none; a foreign entry at a name the run writes refuses the run in
one line before anything changes. A resume says what was set aside, and that the data set changed size.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.checkpoints import ownership
from braeburn.checkpoints.output_lock import LOCK_FILE
from braeburn import Trainer, TrainingConfig
from braeburn.trainer.checkpoint import CheckpointError

pytestmark = pytest.mark.usefixtures("cpu_only")
OURS = {ownership.MARKER, LOCK_FILE}


def trainer(out: Path | str, samples: int = 16, **options) -> Trainer:
    options = {"max_steps": 2, "save_strategy": "steps", "save_steps": 1, "logging_steps": 1, "per_device_train_batch_size": 4,
               "report_to": "none", "disable_tqdm": True, **options}
    x = torch.randn(samples, 4, generator=torch.Generator().manual_seed(samples))
    return Trainer(torch.nn.Linear(4, 2), TrainingConfig(output_dir=str(out), **options),
                   train_dataset=TensorDataset(x, (x.sum(1) > 0).long()), loss_fn=torch.nn.functional.cross_entropy)


def run(out: Path | str, **options) -> Trainer:
    """A whole job: train, then save the final model (into output_dir, as Transformers' scripts do)."""
    trained = trainer(out, **options)
    trained.train()
    trained.save_model()
    return trained


def listing(root: Path, only: set[str] | None = None) -> dict[str, tuple]:
    """Every entry below ``root`` (links not followed): its kind, mode, and sha256 or link target."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            relative = path.relative_to(root).as_posix()
            if only is not None and relative.split("/")[0] not in only:
                continue
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                found[relative] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                found[relative] = ("folder", stat.S_IMODE(info.st_mode))
            else:
                found[relative] = ("file", stat.S_IMODE(info.st_mode), hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def project(tmp_path: Path) -> Path:
    """A folder braeburn did not make: .git with files, dot-files, a read-only sub-folder, a link to a file
    outside, the user's data."""
    out, outside = tmp_path / "project", tmp_path / "outside"
    (out / ".git" / "objects" / "ab").mkdir(parents=True)
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (out / ".git" / "objects" / "ab" / "cdef").write_bytes(os.urandom(64))
    (out / ".env").write_text("TOKEN=secret\n")
    (out / ".config").mkdir()
    (out / ".config" / "settings.toml").write_text("a = 1\n")
    (out / "readonly").mkdir()
    (out / "readonly" / "kept.txt").write_text("read-only\n")
    (out / "readonly").chmod(0o555)
    outside.mkdir()
    (outside / "precious.txt").write_text("outside the run\n")
    (out / "link-out").symlink_to(outside / "precious.txt")
    (out / "data.csv").write_text("x,y\n1,2\n")
    (out / "notes").mkdir()
    (out / "notes" / "todo.md").write_text("- train\n")
    return out


# -- the goal: nothing that is not braeburn's changes ----------------------------------------------
def test_two_runs_in_a_project_folder_change_nothing_that_is_not_braeburns(tmp_path):
    out = project(tmp_path)
    users, outside = listing(out), listing(tmp_path / "outside")
    run(out)
    run(out)  # the rerun sets the first run aside
    assert listing(out, only={p.split("/")[0] for p in users}) == users
    assert listing(tmp_path / "outside") == outside
    assert (out / "previous-run-1" / "checkpoint-2").is_dir() and (out / "checkpoint-2").is_dir()
    assert not (out / "previous-run-1" / ".git").exists() and not (out / "previous-run-1" / "data.csv").exists()


def test_a_rerun_sets_aside_exactly_braeburns_files(tmp_path, capsys):
    out = project(tmp_path)
    users = set(os.listdir(out))
    run(out)
    written = set(os.listdir(out)) - users - OURS
    assert written == {"checkpoint-1", "checkpoint-2", "metrics.jsonl", "training_curves.png", "model.safetensors",
                       "training_args.bin"}
    first = listing(out, only=written)
    run(out)
    aside = out / "previous-run-1"
    assert set(os.listdir(aside)) == written | {ownership.MARKER}
    assert listing(aside, only=written) == first  # moved whole: the same bytes
    assert set(ownership.recorded(aside)) == written
    note = [line for line in capsys.readouterr().out.splitlines() if "held an earlier run" in line]
    assert len(note) == 1 and "moved to previous-run-1/" in note[0]
    assert f"--resume_from_checkpoint {aside / 'checkpoint-2'}" in note[0]
    assert f"The {len(users)} other entries, not braeburn's, stay where they are" in note[0]  # .git among them


@pytest.mark.parametrize("users", [0, 1, 2])
def test_a_rerun_after_a_killed_save_model_counts_only_the_users_entries(tmp_path, capsys, users):
    """A kill inside save_model() leaves its staging folder (braeburn's: its record names it). The rerun removes it
    and counts only the entries that are not braeburn's, in a sentence that fits the count."""
    out = tmp_path / "out"
    out.mkdir()
    for i in range(users):
        (out / f"users-{i}.txt").write_text("the user's\n")
    trainer(out).train()
    killed = ownership.staged(out, "save_model() writes the final model under that name")
    (killed.__enter__() / "config.json").write_text("{}")  # never exited: what a kill leaves
    assert ownership.owns(out, ownership.STAGING)
    capsys.readouterr()
    trainer(out).train()
    note = [line for line in capsys.readouterr().out.splitlines() if "held an earlier run" in line]
    assert len(note) == 1 and not (out / ownership.STAGING).exists(), note
    said = {0: "", 1: "The 1 other entry, not braeburn's, stays where it is.",
            2: "The 2 other entries, not braeburn's, stay where they are."}[users]
    assert (said in note[0]) and ("other entr" in note[0]) == bool(users), note[0]


def test_a_checkpoint_of_transformers_trainer_that_cannot_be_read_is_refused_in_one_line(tmp_path):
    """What Transformers' Trainer writes in a checkpoint (no manifest.json: braeburn's mark), its files unreadable,
    handed to a resume: not "manifest.json is missing ... incomplete", but that it is Transformers', which file
    cannot be read, and what to do (a readable one resumes: tests/compat/transformers/test_checkpoint_folders.py)."""
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
        (folder / name).write_bytes(b"written by Transformers")
    (folder / "trainer_state.json").write_text('{"global_step": 2, "log_history": [], "stateful_callbacks": {}}')
    with pytest.raises(CheckpointError) as error:
        trainer(tmp_path / "out").train(resume_from_checkpoint=str(folder))
    message = str(error.value)
    assert message.startswith(f"{folder} is a checkpoint of Transformers' Trainer") and "\n" not in message
    assert "model.safetensors cannot be read" in message and f"from_pretrained({str(folder)!r})" in message
    assert "incomplete" not in message and not (tmp_path / "out" / "checkpoint-4").exists()


def test_the_record_survives_a_copy_of_the_folder(tmp_path):
    out = project(tmp_path)
    run(out)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(out), str(copy)], check=True)
    users = listing(copy, only=set(os.listdir(tmp_path / "project")) - set(ownership.recorded(out)) - OURS)
    run(copy)
    assert (copy / "previous-run-1" / "checkpoint-2").is_dir() and (copy / "previous-run-1" / "metrics.jsonl").is_file()
    assert listing(copy, only={p.split("/")[0] for p in users}) == users


def test_a_home_folder_as_output_dir_trains_twice_and_moves_nothing_of_the_users(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    (home / ".ssh").chmod(0o700)
    (home / ".bashrc").write_text("export PATH\n")
    (home / "Documents").mkdir()
    (home / "Documents" / "thesis.tex").write_text("\\begin{document}\n")
    monkeypatch.setenv("HOME", str(home))
    users = listing(home)
    run("~")
    run("~")
    assert listing(home, only={p.split("/")[0] for p in users}) == users
    assert sorted(os.listdir(home / "previous-run-1")) == sorted([ownership.MARKER, "checkpoint-1", "checkpoint-2",
                                                                  "metrics.jsonl", "model.safetensors",
                                                                  "training_args.bin", "training_curves.png"])


# -- refusals ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["rerun", "overwrite_output_dir", "resume"])
def test_a_foreign_file_at_a_name_the_run_writes_is_refused_in_one_line(tmp_path, how):
    """resume: a run folder copied without its dot-files (cp -r run/* elsewhere): the checkpoints are still
    braeburn's by their manifests, and metrics.jsonl by the records they logged, but nothing proves the final
    model's files that save_model() wrote into output_dir: all of them named at once."""
    out = project(tmp_path)
    if how == "resume":
        run(out)
        (out / ownership.MARKER).unlink()
    else:
        (out / "metrics.jsonl").write_text("the user's own log\n")
    before = listing(out)
    options = {"overwrite_output_dir": how == "overwrite_output_dir",
               "resume_from_checkpoint": "latest" if how == "resume" else None}
    with pytest.raises(ownership.ForeignFileError) as error:
        trainer(out, **options).train()
    message = str(error.value)
    assert listing(out) == before  # nothing moved, nothing written, no lock file left
    if how == "resume":  # the checkpoints' manifests and logged records prove metrics.jsonl; the final model's
        assert "\n" not in message and message.startswith(f"2 entries of {out} are not braeburn's")  # files: nothing
        assert "metrics.jsonl" not in message and "model.safetensors (no record" in message
        assert f"move model.safetensors, training_args.bin out of {out}." in message
        return
    assert "\n" not in message and message.startswith(f"{out / 'metrics.jsonl'} is not braeburn's (no record")
    assert "this run appends its metrics log to it" in message
    assert f"Pass another --output_dir, or move metrics.jsonl out of {out}." in message


def test_a_record_that_braeburn_did_not_write_is_refused_and_never_trusted(tmp_path):
    """A record naming .git (or a link at its name) vouches for nothing: the run is refused, nothing moves."""
    out = project(tmp_path)
    (out / ownership.MARKER).write_text('{"written_by": "braeburn", "entries": {".git": "folder"}}')
    before = listing(out)
    with pytest.raises(ownership.ForeignFileError, match="it is not a record that braeburn wrote"):
        trainer(out).train()
    assert listing(out) == before
    assert ownership.movable(out) == {}


def test_a_mount_point_is_never_set_aside_even_when_recorded(tmp_path, monkeypatch):
    out = tmp_path / "run"
    run(out)
    assert "checkpoint-1" in ownership.movable(out)
    monkeypatch.setattr(ownership, "_mount_points", lambda folder: {"checkpoint-1"})
    assert "checkpoint-1" not in ownership.movable(out)
    assert ownership.why_not(out, "checkpoint-1") == "it is a mount point"


# -- the set-aside is all or nothing ------------------------------------------------------------------
def fail_rename(monkeypatch, name: str, code: int, back_too: str | None = None) -> None:
    """os.rename fails for ``name`` moving into previous-run-1 (and for ``back_too`` moving back out)."""
    real = os.rename

    def rename(source, target, *args, **kwargs):
        source, target = Path(source), Path(target)
        if (source.name == name and target.parent.name == "previous-run-1") or (
                source.name == back_too and source.parent.name == "previous-run-1"):
            raise OSError(code, os.strerror(code), str(source))
        return real(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)


@pytest.mark.parametrize("code, hint", [(errno.EBUSY, "metrics.jsonl is in use"),
                                        (errno.EACCES, "metrics.jsonl is read-only"),
                                        (errno.EPERM, "another user's")])
def test_a_move_that_fails_half_way_leaves_the_folder_as_it_was(tmp_path, monkeypatch, code, hint):
    out = project(tmp_path)
    run(out)
    before = {k: v for k, v in listing(out).items() if k != LOCK_FILE}
    fail_rename(monkeypatch, "metrics.jsonl", code)  # after checkpoint-1 and checkpoint-2 have moved
    with pytest.raises(OSError) as error:
        trainer(out).train()
    message = str(error.value)
    assert "\n" not in message and f"moving metrics.jsonl into previous-run-1/ failed: {os.strerror(code)}" in message
    assert hint in message and "Nothing was moved: the folder is as it was." in message
    assert "--resume_from_checkpoint latest" in message and "--overwrite_output_dir" in message
    assert listing(out) == before  # checkpoint-1 and -2 moved back, previous-run-1 gone, the record as it was


def test_a_move_back_that_fails_says_where_each_entry_is(tmp_path, monkeypatch):
    out = tmp_path / "run"
    run(out)
    fail_rename(monkeypatch, "metrics.jsonl", errno.EBUSY, back_too="checkpoint-1")
    with pytest.raises(OSError) as error:
        trainer(out).train()
    assert f"1 of the entries moved could not be moved back and are in {out / 'previous-run-1'}: checkpoint-1" in \
        str(error.value)
    assert ownership.owns(out, "previous-run-1") and ownership.owns(out / "previous-run-1", "checkpoint-1")
    assert (out / "checkpoint-2").is_dir() and (out / "metrics.jsonl").is_file()


# -- what a resume says ------------------------------------------------------------------------------
def test_latest_after_a_rerun_names_the_run_set_aside_and_how_to_resume_it(tmp_path, capsys):
    out = tmp_path / "run"
    run(out, max_steps=4)  # checkpoints up to step 4
    run(out, save_strategy="no")  # a mistaken rerun: no checkpoint of its own
    with pytest.raises(CheckpointError) as error:
        trainer(out, max_steps=6, resume_from_checkpoint="latest").train()
    earlier = out / "previous-run-1" / "checkpoint-4"
    assert f"The earlier run set aside in previous-run-1/ has checkpoint-4: resume it with --resume_from_checkpoint " \
           f"{earlier}" in str(error.value)
    run(out, max_steps=2)  # the rerun saves step 2: 'latest' resumes it, and says the earlier run went further
    capsys.readouterr()
    trainer(out, max_steps=3, resume_from_checkpoint="latest").train()
    said = capsys.readouterr().out
    assert f"resumed from {out / 'checkpoint-2'}" in said
    warning = next(line for line in said.splitlines() if "was set aside in" in line)
    assert "an earlier run that went further, to step 4, was set aside in previous-run-1/" in warning
    assert f"To continue that run instead: --resume_from_checkpoint {earlier}" in warning
    resumed = trainer(out, max_steps=6, resume_from_checkpoint=str(earlier))
    resumed.train()  # and it continues from there
    assert resumed.state.global_step == 6 and (out / "checkpoint-6").is_dir()


@pytest.mark.parametrize("samples, says", [
    (24, "training goes on from batch 2 of the 6 that epoch 0 now has, in the order of 24 samples"),
    (4, "the checkpoint had trained 2 batches of epoch 0, and the epoch now has 1: epoch 0 ends there, and "
        "training goes on with epoch 1")])
def test_a_resume_on_a_data_set_of_another_size_says_so_in_one_line(tmp_path, capsys, samples, says):
    out = tmp_path / "run"
    trainer(out, samples=16).train()  # 4 batches an epoch; saved after 2
    capsys.readouterr()
    resumed = trainer(out, samples=samples, max_steps=4, resume_from_checkpoint="latest")
    resumed.train()
    lines = [line for line in capsys.readouterr().out.splitlines() if "train_dataset" in line]
    assert len(lines) == 1 and lines[0].startswith(f"braeburn: warning: train_dataset 16 -> {samples} samples since "
                                                   "the checkpoint: ")
    assert says in lines[0] and "Resume with the same train_dataset to continue exactly" in lines[0]
    assert resumed.state.global_step == 4 and resumed.state.train_samples == samples


# -- the Accelerator's save_state -----------------------------------------------------------------------
def test_save_state_replaces_only_a_state_it_saved_or_an_empty_folder(tmp_path):
    """save_state(folder) replaces the folder whole: a folder of the user's there (or a state with a file of the
    user's added) is refused in one line, never deleted."""
    from braeburn.accelerator.core import Accelerator

    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(2, 2))
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("x,y\n")
    before = listing(tmp_path)
    with pytest.raises(ownership.ForeignFileError) as error:
        accelerator.save_state(data)
    assert "\n" not in str(error.value) and str(data) in str(error.value) and "save_state() replaces" in str(error.value)
    assert listing(tmp_path) == before
    (tmp_path / "empty").mkdir()
    accelerator.save_state(tmp_path / "empty")  # an empty folder holds nothing to lose
    accelerator.save_state(tmp_path / "empty")  # and a state braeburn saved is replaced by the next save
    (tmp_path / "empty" / "notes.txt").write_text("the user's")
    with pytest.raises(ownership.ForeignFileError, match="no record of braeburn's"):
        accelerator.save_state(tmp_path / "empty")
    assert (tmp_path / "empty" / "notes.txt").read_text() == "the user's"
    accelerator.end_training()


def test_automatic_checkpoint_rotation_deletes_only_states_braeburn_saved(tmp_path):
    from braeburn import ProjectConfiguration
    from braeburn import Accelerator

    users = tmp_path / "checkpoints" / "checkpoint_1"  # the user's, numbered below braeburn's
    users.mkdir(parents=True)
    (users / "notes.txt").write_text("the user's")
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=1, iteration=5))
    accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.save_state()
    accelerator.save_state()
    accelerator.end_training()
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["checkpoint_1", "checkpoint_6"]
    assert (users / "notes.txt").read_text() == "the user's"


def test_save_model_replaces_its_own_files_and_refuses_a_folder_of_foreign_ones(tmp_path):
    trained = trainer(tmp_path / "run", save_strategy="no")
    trained.train()
    final = tmp_path / "final"
    trained.save_model(str(final))
    trained.save_model(str(final))  # braeburn's own files: replaced
    assert set(ownership.recorded(final)) == {"model.safetensors", "training_args.bin"}
    other = tmp_path / "other"
    other.mkdir()
    (other / "training_args.bin").write_bytes(b"the user's")
    before = listing(other)
    with pytest.raises(ownership.ForeignFileError) as error:
        trained.save_model(str(other))
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{other / 'training_args.bin'} is not braeburn's")
    assert f"Pass save_model() another folder, or move it out of {other}." in message
    assert listing(other) == before  # nothing written, not even braeburn's record
