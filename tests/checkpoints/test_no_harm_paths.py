"""braeburn writes nothing outside its folders, and follows no link it did not create.

A shared scratch folder can hold links planted under the names braeburn writes: every writer either
refuses such a link (naming it and the fix) or replaces the link itself; the file it points to is never
changed. The output lock guards the folder actually written (the state folder of ``save_state``, not its
parent), leaves no lock file behind after a normal end, and a lock left by a dead process (or another user)
is taken over.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.checkpoints import no_follow

from braeburn.checkpoints import output_lock
from braeburn.accelerator.core import Accelerator
from braeburn.checkpoints.output_lock import LOCK_FILE, OutputDirBusyError
from braeburn.accelerator.trackers import JSONLinesTracker
from braeburn import Trainer, TrainingConfig
from braeburn.trainer.metrics_log import METRICS_FILE, MetricsLogCallback, read_metrics
from braeburn.trainer.plots import PLOT_FILE, plot_history
from braeburn.trainer.state import STATE_FILE, TrainerState

pytestmark = pytest.mark.usefixtures("no_launcher_env")
SRC = Path(__file__).resolve().parents[2] / "src"
PRECIOUS = "a line of someone's file\nthe last line, not ended"


def victim(tmp_path: Path, name: str = "precious.txt") -> Path:
    """A file outside the run that a planted link points to."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    path = outside / name
    path.write_text(PRECIOUS)
    return path


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAEBURN_", "TORCHELASTIC_"))}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")])), OMP_NUM_THREADS="1")
    return env


# -- item 2: planted links -----------------------------------------------------------------------
def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_kept(tmp_path):
    target = victim(tmp_path)
    link = plant(tmp_path / "run" / LOCK_FILE, target)
    with pytest.raises(OSError, match="is a symbolic link") as error:
        output_lock.acquire(tmp_path / "run")
    assert str(link) in str(error.value) and "Remove the link" in str(error.value)
    assert target.read_text() == PRECIOUS and link.is_symlink()
    assert not output_lock.held_over(tmp_path / "run")


def test_save_state_writes_through_no_planted_link(tmp_path):
    """The state folder's lock, its staging folder and the parent's lock, each a planted link."""
    target, elsewhere = victim(tmp_path), tmp_path / "outside" / "folder"
    (elsewhere / "keep").mkdir(parents=True)
    plant(tmp_path / "jobs" / ".state.partial", elsewhere)  # the staging folder of save_state(jobs/state)
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(2, 2))
    plant(tmp_path / "jobs" / f".state{LOCK_FILE}", target)
    with pytest.raises(OSError, match="is a symbolic link .*Remove the link"):
        accelerator.save_state(tmp_path / "jobs" / "state")
    (tmp_path / "jobs" / f".state{LOCK_FILE}").unlink()
    accelerator.save_state(tmp_path / "jobs" / "state")  # the staging link is replaced, its target kept
    accelerator.end_training()
    assert target.read_text() == PRECIOUS and (elsewhere / "keep").is_dir()
    assert (tmp_path / "jobs" / "state" / "model.safetensors").is_file()


def test_metrics_log_refuses_a_planted_link_and_training_goes_on(tmp_path, capsys):
    target = victim(tmp_path)
    link = plant(tmp_path / "run" / METRICS_FILE, target)
    logger, state = MetricsLogCallback(tensorboard=False), TrainerState()
    trainer = type("T", (), {"is_main_process": True, "output_dir": tmp_path / "run"})()
    logger.on_train_begin(trainer, state)
    logger.on_log(trainer, state, {"loss": 1.0})
    logger.on_train_end(trainer, state)
    assert target.read_text() == PRECIOUS  # not cut at its last line, nothing appended
    err = capsys.readouterr().err
    assert f"cannot write {link} ({link} is a symbolic link" in err and "Training goes on" in err


def test_the_plot_replaces_planted_links_and_never_writes_through_them(tmp_path):
    """The picture is drawn under a fresh temporary name: a link planted at the old fixed one is left alone."""
    temporary_target, final_target = victim(tmp_path, "a.txt"), victim(tmp_path, "b.txt")
    plant(tmp_path / f".{PLOT_FILE}.tmp", temporary_target)
    plant(tmp_path / PLOT_FILE, final_target)
    assert plot_history([{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}], tmp_path / PLOT_FILE)
    assert temporary_target.read_text() == PRECIOUS and final_target.read_text() == PRECIOUS
    assert not (tmp_path / PLOT_FILE).is_symlink() and (tmp_path / PLOT_FILE).read_bytes()[:4] == b"\x89PNG"
    assert os.readlink(tmp_path / f".{PLOT_FILE}.tmp") == str(temporary_target)  # not braeburn's: untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{PLOT_FILE}.tmp", "outside", PLOT_FILE]


def test_whole_file_writes_replace_a_planted_link(tmp_path, capsys):
    """trainer_state.json: the link is replaced; the tracker's config.json and metrics.jsonl: left alone (links
    braeburn did not make), each skipped with a warning."""
    targets = [victim(tmp_path, f"{i}.txt") for i in range(3)]
    plant(tmp_path / STATE_FILE, targets[0])
    TrainerState(global_step=3).save(tmp_path)
    plant(tmp_path / "jsonl" / "run" / "config.json", targets[1])
    plant(tmp_path / "jsonl" / "run" / "metrics.jsonl", targets[2])
    tracker = JSONLinesTracker("run", tmp_path / "jsonl")
    tracker.store_init_configuration({"lr": 0.1})
    tracker.log({"loss": 1.0}, step=1)
    tracker.finish()
    assert all(t.read_text() == PRECIOUS for t in targets)
    assert json.loads((tmp_path / STATE_FILE).read_text())["global_step"] == 3
    assert all((tmp_path / "jsonl" / "run" / n).is_symlink() for n in ("config.json", "metrics.jsonl"))
    assert capsys.readouterr().err.count("symbolic link") == 2


def test_a_training_run_in_a_folder_with_planted_links_harms_nothing(tmp_path, capsys):
    """Links at the names the run writes (the plot, the final model) refuse it before it starts, all named in one
    error; links at the names of the summaries written on request are left as they are, each skipped with a
    warning. No link is followed, replaced or removed: braeburn did not make them."""
    refusing = {name: victim(tmp_path, f"r{i}.txt") for i, name in enumerate([PLOT_FILE, "model.safetensors",
                                                                               "training_args.bin"])}
    skipped = {name: victim(tmp_path, f"s{i}.txt") for i, name in
               enumerate([f".{PLOT_FILE}.tmp", "all_results.json", "train_results.json", STATE_FILE, "README.md"])}
    run = tmp_path / "run"
    for name, target in {**refusing, **skipped}.items():
        plant(run / name, target)
    x = torch.randn(16, 4)
    config = TrainingConfig(output_dir=str(run), overwrite_output_dir=True, max_steps=4, logging_steps=1,
                            per_device_train_batch_size=4, save_strategy="no", use_cpu=True, report_to="none")

    def trainer():
        return Trainer(torch.nn.Linear(4, 2), config, train_dataset=TensorDataset(x, (x.sum(1) > 0).long()),
                       loss_fn=torch.nn.functional.cross_entropy)

    with pytest.raises(OSError, match=f"3 entries of {run} are not braeburn's") as error:
        trainer().train()  # all of them in one error: one fix, not one per try
    assert "\n" not in str(error.value)
    for name in refusing:
        assert f"{name} (it is a symbolic link, and braeburn never makes one" in str(error.value)
        (run / name).unlink()  # the user's fix: the run then starts
    trained = trainer()
    metrics = trained.train().metrics
    trained.save_metrics("train", metrics)
    trained.save_state()
    trained.save_model()
    trained.create_model_card()
    assert all(target.read_text() == PRECIOUS for target in {**refusing, **skipped}.values())
    assert all(os.readlink(run / name) == str(target) for name, target in skipped.items())
    assert capsys.readouterr().err.count("braeburn: warning:") == 4  # one per summary skipped
    assert (run / PLOT_FILE).read_bytes()[:4] == b"\x89PNG" and (run / "model.safetensors").is_file()
    assert not (run / LOCK_FILE).exists()  # item 5: no lock file left behind


# -- hard links: O_NOFOLLOW does not stop them -------------------------------------------------------
def hard_link(name: Path, target: Path) -> Path:
    name.parent.mkdir(parents=True, exist_ok=True)
    os.link(target, name)
    return name


def test_a_file_appended_to_or_cut_in_place_is_refused_when_another_name_shares_it(tmp_path, capsys):
    """A hard link at metrics.jsonl (to an outside file whose last line has no newline): the torn-line repair would
    cut it and the log would append to it; both are refused, the outside file keeps its bytes, training goes on.
    The same for the Accelerator's JSON-lines tracker and the output lock's record."""
    target = victim(tmp_path)
    log = hard_link(tmp_path / "run" / METRICS_FILE, target)
    for opener in (no_follow.open_append, no_follow.open_update):
        with pytest.raises(no_follow.SharedFileError, match=f"{log} is a hard link: 2 names share that file"):
            opener(log)
    logger, state = MetricsLogCallback(tensorboard=False), TrainerState()
    trainer = type("T", (), {"is_main_process": True, "output_dir": tmp_path / "run"})()
    logger.on_train_begin(trainer, state)
    logger.on_log(trainer, state, {"loss": 1.0})
    logger.on_train_end(trainer, state)
    assert f"cannot write {log} ({log} is a hard link" in capsys.readouterr().err
    hard_link(tmp_path / "logs" / "run" / METRICS_FILE, target)
    tracker = JSONLinesTracker("run", tmp_path / "logs")  # not braeburn's file: skipped with a warning, or refused
    tracker.log({"loss": 1.0})
    tracker.finish()
    hard_link(tmp_path / "locked" / LOCK_FILE, target)
    with pytest.raises(no_follow.SharedFileError, match=r"is a hard link.*Remove it \(rm "):
        output_lock.acquire(tmp_path / "locked")
    assert not output_lock.held_over(tmp_path / "locked")
    assert target.read_text() == PRECIOUS and os.stat(target).st_nlink == 4


def test_resuming_a_copy_made_with_hard_links_is_refused_and_leaves_the_original_run_as_it_was(tmp_path):
    """``cp -al run1 run2`` then a resume in run2: its metrics.jsonl is run1's file. Refused in one line before
    anything is written; once made a file of its own (the fix the line gives), the resume runs and run1 is kept."""
    x = torch.randn(16, 4)

    def trainer(out: Path, steps: int) -> Trainer:
        return Trainer(torch.nn.Linear(4, 2), TrainingConfig(
            output_dir=str(out), max_steps=steps, logging_steps=1, per_device_train_batch_size=4, save_steps=2,
            use_cpu=True, report_to="none", disable_tqdm=True), train_dataset=TensorDataset(x, (x.sum(1) > 0).long()),
            loss_fn=torch.nn.functional.cross_entropy)

    run1, run2 = tmp_path / "run1", tmp_path / "run2"
    trainer(run1, 2).train()
    subprocess.run(["cp", "-al", str(run1), str(run2)], check=True)
    before = {p: p.read_bytes() for p in run1.rglob("*") if p.is_file()}
    with pytest.raises(no_follow.SharedFileError) as error:
        trainer(run2, 4).train(resume_from_checkpoint="latest")
    assert "\n" not in str(error.value) and str(run2 / METRICS_FILE) in str(error.value)
    log = run2 / METRICS_FILE
    subprocess.run(f"cp '{log}' '{log}.copy' && mv '{log}.copy' '{log}'", shell=True, check=True)
    trainer(run2, 4).train(resume_from_checkpoint="latest")
    assert {p: p.read_bytes() for p in run1.rglob("*") if p.is_file()} == before
    assert len(read_metrics(run2)) > len(read_metrics(run1))


# -- item 5: the lock of save_state, its removal, stale locks --------------------------------------
SAVER = ("import sys, time, torch\nfrom braeburn.accelerator.core import Accelerator\n"
         "a = Accelerator(cpu=True); a.prepare(torch.nn.Linear(2, 2)); a.save_state(sys.argv[1])\n"
         "print('saved', flush=True)\nif sys.argv[2] == 'wait': time.sleep(120)\n")


def save_in_another_process(folder: Path, wait: bool) -> subprocess.Popen:
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(folder), "wait" if wait else "exit"], env=job_env(),
                             stdout=subprocess.PIPE, text=True)
    lines = []
    while not lines or lines[-1] != "saved":  # (after the Accelerator's line about the device)
        line = saver.stdout.readline()
        assert line, f"the saving process ended early: {lines}"
        lines.append(line.strip())
    return saver


@pytest.mark.slow  # a child process SIGKILLed while it holds the lock (13 s on a loaded machine)
def test_save_state_to_a_sibling_folder_is_not_refused_but_the_same_folder_is(tmp_path):
    other = save_in_another_process(tmp_path / "job_a", wait=True)
    try:
        accelerator = Accelerator(cpu=True)
        accelerator.prepare(torch.nn.Linear(2, 2))
        accelerator.save_state(tmp_path / "job_b")  # an unrelated job beside it: no conflict
        with pytest.raises(OutputDirBusyError) as error:
            accelerator.save_state(tmp_path / "job_a")
        message = str(error.value)
        assert message.startswith(f"save_state({str((tmp_path / 'job_a').resolve())!r}): that folder is being saved "
                                  f"to by another process (pid {other.pid} "), message
        assert "Pass another folder to save_state()" in message and "--output_dir" not in message
        accelerator.end_training()
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".job_a{LOCK_FILE}", "job_a", "job_b"]  # killed: its record


@pytest.mark.slow  # 10 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_no_lock_file_is_left_after_a_normal_end(tmp_path):
    save_in_another_process(tmp_path / "state", wait=False).wait(timeout=60)  # no end_training(): released at exit
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.save_state(tmp_path / "mine")
    accelerator.end_training()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "state"]


@pytest.mark.slow  # a child process SIGKILLed while it holds the lock (11 s on a loaded machine)
def test_a_lock_left_by_a_dead_process_or_another_user_is_taken_over(tmp_path, monkeypatch):
    dead = save_in_another_process(tmp_path / "state", wait=True)
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    lock_file = tmp_path / f".state{LOCK_FILE}"
    assert stat.S_IMODE(lock_file.stat().st_mode) == 0o666  # any user may take it once its holder is gone
    # Another user's file that this user may only read: flock needs no more than that.
    no_follow = output_lock.no_follow  # (imported here: the old code had no such module)
    real_open = no_follow.open_fd

    def read_only(path, flags, mode=0o644):
        if Path(path) == lock_file and flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, mode)

    monkeypatch.setattr(no_follow, "open_fd", read_only)
    output_lock.acquire(tmp_path / "state", purpose="save_state", state_folder=True)
    assert output_lock.held_over(tmp_path / "state")
    output_lock.release(tmp_path / "state")


def test_a_waiter_never_holds_a_deleted_lock_file(tmp_path):
    """The last release deletes the file: a process that opened it just before must not think it holds it."""
    output_lock.acquire(tmp_path)
    stale = os.open(tmp_path / LOCK_FILE, os.O_RDONLY)  # opened by a second taker before the release
    output_lock.release(tmp_path)
    try:
        assert not output_lock._still_named(stale, tmp_path / LOCK_FILE)
    finally:
        os.close(stale)
    output_lock.acquire(tmp_path)  # a new file, held for real
    assert (tmp_path / LOCK_FILE).exists()
    output_lock.release(tmp_path)


# -- item 12: "~" in output_dir ----------------------------------------------------------------------
def test_a_tilde_in_output_dir_is_the_home_folder_not_a_folder_named_tilde(tmp_path, monkeypatch):
    """As in a shell and in Transformers: a config file or a quoted flag reaches braeburn unexpanded."""
    from braeburn.trainer import parse_config

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    (config,) = parse_config(TrainingConfig, argv=["--output_dir", "~/runs/a", "--logging_dir", "~/tb"],
                             exit_on_error=False)
    assert (config.output_dir, config.logging_dir) == (str(home / "runs" / "a"), str(home / "tb"))
    x = torch.randn(8, 4)
    trainer = Trainer(torch.nn.Linear(4, 2), TrainingConfig(output_dir="~/runs/b", max_steps=1, use_cpu=True,
                                                             per_device_train_batch_size=4, report_to="none"),
                      train_dataset=TensorDataset(x, (x.sum(1) > 0).long()), loss_fn=torch.nn.functional.cross_entropy)
    trainer.train()
    assert list(cwd.iterdir()) == [] and (home / "runs" / "b").is_dir()
