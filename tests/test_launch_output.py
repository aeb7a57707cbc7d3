"""The processes' output under `braeburn launch`: a full temp folder never ends a rank, and the launcher
removes the log folder it made, keeping it (and naming it) only when the job failed."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from braeburn.cli.rank_output import OUTPUT_DIR_VAR, SAY_ONCE_VAR
from tests.full_disk import _mount_tmpfs
from tests.test_launch import ALL_REDUCE, finish, launcher, script

ROOM = 64 * 1024  # what the small temp folder holds

# Rank 1 prints about 210 KB (its standard output goes to a file in the temp folder), then meets rank 0 in
# an all-reduce and says on standard error that it got to the end.
FILLS_ITS_OUTPUT = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    for i in range(3000):
        print(f"rank 1 line {i} " + "x" * 60)
t = torch.tensor([1.0])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} done: sum={t.item():.0f}", file=sys.stderr, flush=True)
dist.destroy_process_group()
"""


@pytest.fixture
def small_temp_folder(tmp_path):
    """(TMPDIR, what to run before the job starts): a 64 KB tmpfs where this process may mount one, so that
    writes past it fail with ENOSPC; elsewhere a plain folder and a 64 KB file-size limit on the job, so that
    writes past it fail with EFBIG (the same failed write, without root)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    if _mount_tmpfs(folder, size="64k"):
        yield folder, None
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=10)
        return

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (ROOM, ROOM))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal (Python ignores it too)

    yield folder, limit


def test_a_full_temp_folder_under_launch_ends_no_rank_and_is_said_once(tmp_path, clean_env, small_temp_folder):
    """On a 64 KB temp folder, rank 1's prints failed with ENOSPC and the job ended with rc 1."""
    temp, limit = small_temp_folder
    code, out = finish(launcher("--cpu", "--num-processes", "2", str(script(tmp_path, "fill.py", FILLS_ITS_OUTPUT)),
                                env={"TMPDIR": str(temp)}, xdg=str(tmp_path), preexec_fn=limit), timeout=280)
    assert code == 0, out
    assert "rank 0 done: sum=2" in out and "rank 1 done: sum=2" in out  # rank 1 lived to the end
    folder = out.split("goes to ")[1].split()[0]
    assert Path(folder).parent == temp
    assert out.count("could not write its standard output") == 1, out
    note = next(line for line in out.splitlines() if "could not write its standard output" in line)
    assert f"rank 1 could not write its standard output to a file in {folder} (" in note
    assert " free of " in note and "the job goes on" in note and "TMPDIR" in note
    assert "Traceback" not in out
    assert os.listdir(temp) == []  # the job ended well: the launcher removed its folder


EXITS_WITH_ITS_ARGUMENT = ALL_REDUCE + "import sys\nsys.exit(int(sys.argv[1]))\n"


def test_the_log_folder_is_removed_after_a_clean_job_and_kept_and_named_after_a_failed_one(tmp_path, clean_env):
    """The quiet ranks' files: rank 0 speaks, rank 1's output is in the named folder; the folder was never
    removed (every job left one in the temp folder)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    target = str(script(tmp_path, "ar.py", EXITS_WITH_ITS_ARGUMENT))
    code, out = finish(launcher("--cpu", "--num-processes", "2", target, "0", env={"TMPDIR": str(temp)},
                                xdg=str(tmp_path)))
    assert code == 0, out
    assert "rank 0 of 2: sum=3" in out and "rank 1 of 2" not in out
    assert "OMP_NUM_THREADS" not in out and "*****" not in out  # torchrun's banner
    assert Path(out.split("goes to ")[1].split()[0]).parent == temp
    assert os.listdir(temp) == [], "a clean job leaves nothing in the temp folder"

    code, out = finish(launcher("--cpu", "--num-processes", "2", target, "3", env={"TMPDIR": str(temp)},
                                xdg=str(tmp_path)))
    assert code != 0
    folder = out.split("goes to ")[1].split()[0]
    assert f"the job ended with exit status {code}; its processes' standard output and torchrun's error files " \
           f"are kept in {folder}" in out
    kept = [path.read_text() for path in Path(folder).rglob("stdout.log")]
    assert any("rank 1 of 2: sum=3" in text for text in kept), kept
    assert "ar.py FAILED" in out  # torchrun names the user's script, not the wrapper each rank starts in


def test_every_process_prints_leaves_no_folder_of_torchrun_in_the_temp_folder(tmp_path, clean_env):
    """Without a --log-dir torchrun made a torchelastic_* folder in the temp folder at every start, and never
    removed it."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    code, out = finish(launcher("--cpu", "--num-processes", "2", "--every-process-prints",
                                str(script(tmp_path, "ar.py", ALL_REDUCE)), env={"TMPDIR": str(temp)},
                                xdg=str(tmp_path)))
    assert code == 0, out
    assert "rank 1 of 2: sum=3" in out
    assert os.listdir(temp) == []


# -- the wrapper each quiet rank starts in, as a process of its own (no torch, no job) ----------------------

RECORDS = """
import json, os, sys
for i in range(3):
    print(f"line {i}")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "record.json"), "w") as out:
    json.dump({"argv": sys.argv, "name": __name__, "path0": sys.path[0],
               "braeburn_loaded": any(m.split(".")[0] == "braeburn" for m in sys.modules),
               "env": sorted(k for k in os.environ if k.startswith("BRAEBURN_RANK"))}, out)
"""


def unwritable_output():
    """A standard output whose every write fails: /dev/full (ENOSPC), else a pipe nobody reads (EPIPE)."""
    if os.path.exists("/dev/full"):
        return open("/dev/full", "w")
    read, write = os.pipe()
    os.close(read)
    return os.fdopen(write, "w")


def start_rank(tmp_path: Path, target: list[str], local_rank: str, token: Path | None = None, **kwargs):
    env = {**os.environ, "LOCAL_RANK": local_rank, "RANK": local_rank, OUTPUT_DIR_VAR: str(tmp_path)}
    if token is not None:
        env[SAY_ONCE_VAR] = str(token)
    return subprocess.run([sys.executable, "-u", "-mbraeburn.cli.rank_output", *target], env=env, text=True,
                          stderr=subprocess.PIPE, timeout=60, **kwargs)


def test_a_rank_whose_output_cannot_be_written_runs_its_script_to_the_end_and_says_so_once(tmp_path):
    (tmp_path / "s").mkdir()
    target = script(tmp_path / "s", "rec.py", RECORDS)
    token = tmp_path / "say-once"
    token.touch()
    with unwritable_output() as stdout:
        first = start_rank(tmp_path, [str(target), "a", "--b"], "1", token, stdout=stdout)
        second = start_rank(tmp_path, [str(target), "a", "--b"], "2", token, stdout=stdout)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count("could not write its standard output") == 1, first.stderr
    assert f"rank 1 could not write its standard output to a file in {tmp_path} (" in first.stderr
    assert not token.exists()
    assert second.returncode == 0 and "could not write" not in second.stderr  # said once, by the first rank
    record = json.loads((tmp_path / "s" / "record.json").read_text())
    assert record == {"argv": [str(target), "a", "--b"], "name": "__main__", "path0": str(tmp_path / "s"),
                      "braeburn_loaded": False, "env": []}  # as `python rec.py a --b` would see it


def test_the_wrapper_keeps_a_scripts_exit_status_traceback_and_module_form(tmp_path):
    failing = script(tmp_path, "fails.py", "def f():\n    raise ValueError('on purpose')\nf()\n")
    done = start_rank(tmp_path, [str(failing)], "0")
    assert done.returncode == 1
    assert done.stderr.splitlines()[1].startswith(f'  File "{failing}", line 3')  # the script's frame first
    assert "ValueError: on purpose" in done.stderr and "runpy" not in done.stderr
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(textwrap.dedent("""
        import sys
        print("module", __name__, sys.argv[1:])
        sys.exit(5)
    """))
    done = start_rank(tmp_path, ["-m", "pkg.main", "x"], "1", cwd=tmp_path, stdout=subprocess.PIPE)
    assert done.returncode == 5
    assert done.stdout == "module __main__ ['x']\n"
