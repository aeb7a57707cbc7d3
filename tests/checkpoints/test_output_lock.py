"""One writer per output directory (src/braeburn/checkpoints/output_lock.py): a second run is refused at once, by name.

The process tests use real processes: a first Trainer run (tests/checkpoints/output_lock_job.py) that stops at three
points (output_dir locked but nothing else written, half-way through a checkpoint's save, just after a
checkpoint), a second run started at each of them, and a lone run of the same job to compare with.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from braeburn.checkpoints import output_lock
from braeburn.accelerator.core import Accelerator
from braeburn.checkpoints.output_lock import LOCK_FILE, OutputDirBusyError, OutputLockUnsupportedError

pytestmark = pytest.mark.usefixtures("no_launcher_env")
JOB = Path(__file__).with_name("output_lock_job.py")
SRC = Path(__file__).resolve().parents[2] / "src"
TIMING = {"samples_per_second", "memory_bytes", "train_runtime", "train_samples_per_second",
          "train_steps_per_second"}  # the only values two identical runs may differ in (the summary's timings too)


def job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAEBURN_", "TORCHELASTIC_"))}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")])), OMP_NUM_THREADS="1")
    return env


# The braeburn package without its __init__ (which imports torch): output_lock and no_follow only.
LONE_LOCK = ("import os, sys, types; package = types.ModuleType('braeburn'); "
             "package.__path__ = [os.path.dirname(os.path.dirname(sys.argv[1]))]; sys.modules['braeburn'] = package\n")
HOLDER = LONE_LOCK + "import time; import braeburn.checkpoints.output_lock as lock\n" \
                     "lock.acquire(sys.argv[2]); print('held', flush=True); time.sleep(120)\n"


def hold_in_another_process(folder: Path) -> subprocess.Popen:
    """A process (no torch: it starts fast) that holds ``folder``'s lock until killed."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, output_lock.__file__, str(folder)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


# -- the lock itself ------------------------------------------------------------------------------
def test_a_live_holder_is_named_and_a_dead_one_never_blocks(tmp_path):
    holder = hold_in_another_process(tmp_path)
    try:
        with pytest.raises(OutputDirBusyError) as error:
            output_lock.acquire(tmp_path)
        message = str(error.value)
        assert f"output_dir={str(tmp_path)!r} is in use by another run (pid {holder.pid} on {socket.gethostname()}, "\
               "training started " in message
        assert " -c " in message and "Pass another --output_dir, or wait for that run to end" in message
        assert "\n" not in message
    finally:
        holder.send_signal(signal.SIGKILL)  # no chance to clean up: the kernel drops its lock
        holder.wait()
    assert output_lock.acquire(tmp_path) == tmp_path.resolve()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    output_lock.release(tmp_path)
    assert not (tmp_path / LOCK_FILE).exists()  # released: deleted (while still held), nothing left behind


def test_one_process_shares_its_own_lock_and_the_last_release_drops_it(tmp_path):
    output_lock.acquire(tmp_path)
    output_lock.acquire(tmp_path)  # a Trainer and the Accelerator it drives, say
    output_lock.release(tmp_path)
    assert output_lock.held_over(tmp_path / "checkpoint-3")
    output_lock.release(tmp_path)
    assert not output_lock.held_over(tmp_path)
    output_lock.ensure_free(tmp_path)  # nobody holds it


def test_a_file_system_without_working_locks_is_explained_not_trusted(tmp_path, monkeypatch):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(output_lock, "fcntl", SimpleNamespace(flock=no_locks, LOCK_EX=2, LOCK_NB=4, LOCK_UN=8))
    with pytest.raises(OutputLockUnsupportedError, match="file locks do not work .*No locks available.*local disk"):
        output_lock.acquire(tmp_path / "a")
    # A file system that grants every lock (to this process and to another one) guards nothing either.
    monkeypatch.setattr(output_lock, "fcntl", SimpleNamespace(flock=lambda fd, op: None, LOCK_EX=2, LOCK_NB=4, LOCK_UN=8))
    with pytest.raises(OutputLockUnsupportedError, match="granted the same lock to two processes"):
        output_lock.acquire(tmp_path / "b")
    assert not output_lock.held_over(tmp_path)


def test_without_fcntl_it_imports_and_explains(tmp_path):
    """Windows has no fcntl: the module imports there (msvcrt locks), and with neither lock says so."""
    code = (LONE_LOCK + "sys.modules['fcntl'] = None; sys.modules['msvcrt'] = None\n"
            "import braeburn.checkpoints.output_lock as lock\n"
            "try:\n    lock.acquire(sys.argv[2])\nexcept lock.OutputLockUnsupportedError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", code, output_lock.__file__, str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "this platform has no file locks" in done.stdout


def test_save_state_refuses_a_folder_inside_another_runs_output_dir(tmp_path, capsys):
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    holder = hold_in_another_process(tmp_path)
    try:
        with pytest.raises(OutputDirBusyError, match=f"save_state.*is the output_dir of another live run .pid "
                                                     f"{holder.pid}.*Pass a folder outside it to save_state"):
            accelerator.save_state(tmp_path / "state")
        assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE]  # nothing written
    finally:
        holder.kill()
        holder.wait()
    accelerator.save_state(tmp_path / "state")
    assert output_lock.held_over(tmp_path / "state")  # held until the end of training
    accelerator.end_training()
    assert not output_lock.held_over(tmp_path) and model is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # no lock file left behind


# -- two training runs -------------------------------------------------------------------------------
def wait_for(path: Path, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def files(folder: Path) -> dict[str, bytes]:
    """Every file but TensorBoard's (its background thread may flush while the run is paused)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "tensorboard" not in p.parts}


def same_values(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    return a == b


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


def assert_same_run(run: Path, lone: Path) -> None:
    mine, theirs = files(run), files(lone)
    assert mine.keys() == theirs.keys()
    for name in mine:
        if name.endswith(".pt"):
            assert same_values(torch.load(run / name, weights_only=True), torch.load(lone / name, weights_only=True)), name
        elif name.endswith(".safetensors"):  # the weights: the same bytes
            assert mine[name] == theirs[name], name
        elif name.endswith("metrics.jsonl"):
            assert without_timing([json.loads(line) for line in mine[name].splitlines()]) == \
                   without_timing([json.loads(line) for line in theirs[name].splitlines()])
        elif name.endswith("trainer_state.json"):
            a, b = json.loads(mine[name]), json.loads(theirs[name])
            a["log_history"], b["log_history"] = without_timing(a["log_history"]), without_timing(b["log_history"])
            a["best_checkpoint"] = a["last_checkpoint"] = b["best_checkpoint"] = b["last_checkpoint"] = None
            assert a.pop("run_id") != b.pop("run_id"), name  # two runs: each records its own id
            assert a == b, name
        elif name.endswith("manifest.json"):
            a, b = (json.loads(text)["files"] for text in (mine[name], theirs[name]))
            assert a.keys() == b.keys(), name  # (trainer_state.json holds the folder's path and timings)
            assert all(a[n] == b[n] for n in a if n.endswith((".pt", ".safetensors"))), name  # the same bytes


@pytest.mark.slow  # Trainer runs as subprocesses beside each other (8-18 s)
def test_a_second_run_is_refused_before_during_and_after_a_save(tmp_path):
    run, lone, pauses = tmp_path / "run", tmp_path / "lone", tmp_path / "pauses"
    pauses.mkdir()
    python = [sys.executable, str(JOB)]
    lone_run = subprocess.Popen(python + [str(lone)], env=job_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = subprocess.Popen(python + [str(run), "--pause-dir", str(pauses)], env=job_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    seen = []
    for point, flags in (("locked", []), ("saving", ["--overwrite"]), ("saved", ["--resume"])):
        wait_for(pauses / f"{point}.reached", first)
        before = files(run)
        if point == "saving":
            assert (run / "..checkpoint-4.tmp.partial").is_dir()  # half-way through the first save
        second = subprocess.run(python + [str(run), *flags], env=job_env(), capture_output=True, text=True, timeout=180)
        errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert second.returncode == 1 and len(errors) == 1, second.stderr
        assert errors[0].startswith(f"error: output_dir={str(run.resolve())!r} is in use by another run (pid "
                                    f"{first.pid} on {socket.gethostname()}, training started "), errors[0]
        assert "output_lock_job.py" in errors[0] and "Pass another --output_dir, or wait" in errors[0]
        assert files(run) == before, point  # the second run wrote nothing, not even a log line
        seen.append(point)
        (pauses / f"{point}.go").touch()
    out, err = first.communicate(timeout=180)
    assert first.returncode == 0, err
    assert lone_run.wait(timeout=180) == 0, lone_run.stderr.read()
    assert seen == ["locked", "saving", "saved"]
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-12", "checkpoint-4", "checkpoint-8"]
    assert_same_run(run, lone)
    assert not (run / LOCK_FILE).exists()  # released at the end, and deleted


@pytest.mark.slow  # a 2-process braeburn launch job (17 s on a loaded machine)
def test_every_rank_of_a_distributed_run_stops_when_output_dir_is_taken(tmp_path):
    """Rank 0 is refused; the other rank learns it through the process group and stops too (no hang)."""
    holder = hold_in_another_process(tmp_path / "run")
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "braeburn.cli.main", "launch", "--cpu", "--num-processes", "2",
                               str(JOB), str(tmp_path / "run")], env=job_env(), capture_output=True, text=True,
                              timeout=300)
        assert done.returncode != 0
        text = done.stdout + done.stderr
        assert f"is in use by another run (pid {holder.pid}" in text, text[-3000:]
        assert "could not be locked by rank 0" in text, text[-3000:]
        assert time.monotonic() - started < 240
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [LOCK_FILE]



def test_an_output_dir_that_cannot_be_created_is_one_clear_line(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")  # (root writes into read-only folders; this fails for all)
    with pytest.raises(OSError, match=r"output_dir=.*cannot be written: .*Pass --output_dir in a folder you can "):
        output_lock.acquire(tmp_path / "a-file" / "run")
