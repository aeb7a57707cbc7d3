"""The processes' output under `braeburn launch`: a full temp folder never ends a rank nor a child of it, the
launcher removes the log folder it made, keeping it (and naming it) only when the job failed or was stopped, and
the wrapper each quiet rank starts in runs the script as `python script.py` would."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from braeburn.cli.launch import python_running
from braeburn.cli.rank_output import OUTPUT_DIR_VAR, SAY_ONCE_VAR
from tests.full_disk import _mount_tmpfs
from tests.cli.test_launch import ALL_REDUCE, finish, launcher, script, wait_for_pids

ROOM = 64 * 1024  # what the small temp folder holds

# Rank 1 starts a child that prints 100 KB, then prints about 210 KB itself (its standard output goes to a file in
# the temp folder), then meets rank 0 in an all-reduce and says on standard error that it got to the end.
FILLS_ITS_OUTPUT = """
import subprocess, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    subprocess.run([sys.executable, "-c", "print('child ' * 20_000)"], check=True)  # as a DataLoader worker prints
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


@pytest.mark.slow  # a braeburn launch job (21 s on a loaded machine)
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


@pytest.mark.slow  # two braeburn launch jobs (19 s)
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
    assert "(removed after a clean job; kept when a rank fails or the job is stopped;" in out  # said up front
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


@pytest.mark.slow  # braeburn launch with 2 processes (10 s)
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


def start_rank(tmp_path: Path, target: list[str], local_rank: str, token: Path | None = None, env=None, **kwargs):
    """A quiet rank as the launcher starts it (python_running), without torchrun or torch."""
    env = {**os.environ, "LOCAL_RANK": local_rank, "RANK": local_rank, OUTPUT_DIR_VAR: str(tmp_path), **(env or {})}
    if token is not None:
        env[SAY_ONCE_VAR] = str(token)
    return subprocess.run([*python_running("braeburn.cli.rank_output", "-u"), *target], env=env, text=True,
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


# -- every writer of a quiet rank, children included, goes through the copier ------------------------------

CHILDREN_PRINT = """
import json, multiprocessing, os, subprocess, sys

def child():
    print("spawned child " + "y" * 100_000, flush=True)

if __name__ == "__main__":
    done = subprocess.run([sys.executable, "-c", "print('subprocess ' + 'x' * 100_000)"]).returncode
    spawned = multiprocessing.get_context("spawn").Process(target=child)  # as a DataLoader worker starts
    spawned.start()
    spawned.join()
    os.write(1, b"z" * 100_000)  # the rank itself, at the descriptor
    print(f"rank line", file=sys.stderr if "--stderr" in sys.argv else sys.stdout)
    with open(sys.argv[1], "w") as out:
        json.dump({"subprocess": done, "spawned": spawned.exitcode}, out)
"""


@pytest.mark.slow  # child processes on a full file (6 s on a loaded machine)
def test_children_that_print_to_a_full_output_file_live_and_the_rank_says_so_once(tmp_path):
    """A DataLoader worker (any child) that printed died on a full temp folder: only the rank's sys.stdout was
    guarded, and children write to descriptor 1 themselves."""
    target = script(tmp_path, "children.py", CHILDREN_PRINT)
    record = tmp_path / "record.json"
    with unwritable_output() as stdout:
        done = start_rank(tmp_path, [str(target), str(record)], "1", stdout=stdout)
    assert done.returncode == 0, done.stderr
    assert json.loads(record.read_text()) == {"subprocess": 0, "spawned": 0}
    assert done.stderr.count("could not write its standard output") == 1, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow  # a braeburn launch job (7 s on a loaded machine)
def test_standard_error_redirected_to_a_full_file_ends_no_rank_either(tmp_path):
    """`braeburn launch ... 2>file` on a full disk: descriptor 2 is a file too, and guarded the same way (a 4 KB
    file-size limit stands in for the full disk: writes past it fail with EFBIG)."""
    target = script(tmp_path, "children.py", CHILDREN_PRINT.replace("print(\"spawned child", "print(\"spawned\", "
                                                                    "file=sys.stderr); print(\"spawned child"))
    record = tmp_path / "record.json"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    code = "import sys; print('e' * 100_000, file=sys.stderr)"
    body = target.read_text().replace("done = subprocess.run(", f"subprocess.run([sys.executable, '-c', {code!r}])"
                                      "\n    done = subprocess.run(")
    target.write_text(body)
    with open(tmp_path / "out.log", "wb") as out, open(tmp_path / "err.log", "wb") as err:
        done = subprocess.run([*python_running("braeburn.cli.rank_output", "-u"), str(target), str(record),
                               "--stderr"], env={**os.environ, "LOCAL_RANK": "1", "RANK": "1",
                                                 OUTPUT_DIR_VAR: str(tmp_path)},
                              stdout=out, stderr=err, preexec_fn=limit, timeout=60)
    assert done.returncode == 0, (tmp_path / "err.log").read_bytes()[-2000:]
    assert json.loads(record.read_text()) == {"subprocess": 0, "spawned": 0}
    assert (tmp_path / "err.log").stat().st_size == 4096  # filled to the limit, then dropped


EVERY_WRITER = """
import atexit, os, subprocess, sys, threading, time
atexit.register(lambda: print("atexit line"))
print("first line")
subprocess.run([sys.executable, "-c", "print('child line')"])
sys.stdout.buffer.write(bytes(range(256)))
sys.stdout.flush()
def late():
    time.sleep(0.3)
    print("thread line")
threading.Thread(target=late).start()
print("last line of the script")
"""


def test_nothing_is_lost_or_reordered_on_a_clean_run(tmp_path):
    target = script(tmp_path, "writers.py", EVERY_WRITER)
    with open(tmp_path / "out.log", "wb") as out:
        done = start_rank(tmp_path, [str(target)], "1", stdout=out)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.log").read_bytes() == (b"first line\nchild line\n" + bytes(range(256)) +
                                                   b"last line of the script\nthread line\natexit line\n")


def test_what_a_rank_wrote_before_it_was_killed_reaches_its_file(tmp_path):
    """The copier is a process of its own: a rank killed by a signal (torchrun stops the others when one fails)
    loses none of what it wrote before."""
    target = script(tmp_path, "killed.py", "import os, signal\nprint('before the kill ' + 'k' * 50_000)\n"
                                           "os.kill(os.getpid(), signal.SIGKILL)\n")
    with open(tmp_path / "out.log", "wb") as out:
        done = start_rank(tmp_path, [str(target)], "1", stdout=out)
    assert done.returncode == -signal.SIGKILL
    expected = b"before the kill " + b"k" * 50_000 + b"\n"
    deadline = time.monotonic() + 10
    while (tmp_path / "out.log").stat().st_size < len(expected) and time.monotonic() < deadline:
        time.sleep(0.05)  # the copier finishes on its own once the rank is gone
    assert (tmp_path / "out.log").read_bytes() == expected


def test_a_failure_other_than_a_full_disk_is_named_for_what_it_is(tmp_path):
    """Every failed write was reported as a full disk, with advice about free space."""
    read, write = os.pipe()
    os.close(read)  # nobody reads: EPIPE
    with os.fdopen(write, "w") as stdout:
        done = start_rank(tmp_path, [str(script(tmp_path, "p.py", "print('x' * 100_000)\n"))], "1", stdout=stdout)
    assert done.returncode == 0, done.stderr
    note = done.stderr.strip()
    assert note.startswith(f"braeburn launch: warning: rank 1 could not write its standard output to a file in "
                           f"{tmp_path} (Broken pipe): its further standard output is dropped")
    assert "free" not in note and "TMPDIR" not in note
    with unwritable_output() as stdout:  # /dev/full: ENOSPC, where free space is the point
        done = start_rank(tmp_path, [str(script(tmp_path, "p.py", "print('x' * 100_000)\n"))], "1", stdout=stdout)
    assert " free of " in done.stderr and "TMPDIR" in done.stderr


# -- the script runs as `python script.py` (or `python -m module`) would ---------------------------------------

PROBE = """
import atexit, json, os, pickle, sys, threading, warnings

class Result:
    pass

facts = {"argv": sys.argv, "name": __name__, "file": __file__, "spec": repr(__spec__), "path": sys.path,
         "builtins": type(__builtins__).__name__, "main_is_me": sys.modules["__main__"].__dict__ is globals(),
         "loader": type(__loader__).__name__, "cached": globals().get("__cached__", "absent"),
         "package": __package__, "safe_path": getattr(sys.flags, "safe_path", None)}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    warnings.warn("probe")
facts["warning_file"] = caught[0].filename

def after_the_last_line():  # an asynchronous checkpoint writer, say
    import time
    time.sleep(0.3)
    facts["thread_pickles"] = pickle.loads(pickle.dumps(Result())).__class__ is Result

def at_exit():
    facts["atexit_pickles"] = pickle.loads(pickle.dumps(Result())).__class__ is Result
    facts["last_value"] = repr(getattr(sys, "last_value", None))
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump(facts, out, sort_keys=True)

atexit.register(at_exit)
threading.Thread(target=after_the_last_line).start()
if sys.argv[1:] == ["raise"]:
    raise ValueError("on purpose")
"""


def _facts(out: Path) -> dict:
    facts = json.loads(out.read_text())
    facts["spec"] = re.sub(r" at 0x[0-9a-f]+", "", facts["spec"])
    return facts


@pytest.mark.parametrize("form, env", [("script", {}), ("script raising", {}), ("module", {}),
                                       ("script", {"PYTHONSAFEPATH": "1"}), ("module", {"PYTHONSAFEPATH": "1"})])
@pytest.mark.slow  # 6 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_the_target_sees_what_a_direct_start_shows_it(tmp_path, form, env):
    """Code after the script's last line (a thread, an atexit handler) could not pickle the script's classes
    (runpy put the wrapper back as __main__); __file__ was relative; PYTHONSAFEPATH's sys.path was overwritten."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "probe.py").write_text(PROBE)
    target = ["-m", "pkg.probe", "a"] if form == "module" else \
        [os.path.join("pkg", "probe.py"), "raise" if "raising" in form else "a"]  # relative, as typed
    env = {**os.environ, **env}
    if form == "module" and "PYTHONSAFEPATH" in env:  # the working folder is not on sys.path: name it
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    direct = subprocess.run([sys.executable, "-u", *target], cwd=tmp_path, capture_output=True, text=True,
                            env={**env, "PROBE_OUT": str(tmp_path / "direct.json")}, timeout=60)
    wrapped = start_rank(tmp_path, target, "1", cwd=tmp_path, stdout=subprocess.PIPE,
                         env={**env, "PROBE_OUT": str(tmp_path / "wrapped.json")})
    assert wrapped.returncode == direct.returncode == (1 if "raising" in form else 0), wrapped.stderr
    assert _facts(tmp_path / "wrapped.json") == _facts(tmp_path / "direct.json")
    facts = _facts(tmp_path / "wrapped.json")
    assert facts["thread_pickles"] is True and facts["atexit_pickles"] is True
    assert os.path.isabs(facts["file"]) and facts["builtins"] == "module"
    assert wrapped.stderr == direct.stderr  # the traceback names the absolute file, from the script's frame on


WORKING_FOLDER_SHADOW = 'raise SystemExit("the working folder\'s {name} was imported in place of the standard one")\n'


@pytest.mark.slow  # braeburn launch jobs (27 s on a loaded machine)
def test_a_token_py_or_platform_py_in_the_working_folder_breaks_no_launch(tmp_path, clean_env):
    """`python -m` put the working folder first on sys.path for torchrun's agent and the rank wrapper: a project's
    token.py or platform.py was imported in place of the standard library's, and the launch died."""
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    for name in ("token.py", "platform.py"):
        (project / name).write_text(WORKING_FOLDER_SHADOW.format(name=name))
    target = script(project / "scripts", "ar.py", ALL_REDUCE)
    # started as the `braeburn` console script starts it: its own folder first on sys.path, not the working one
    as_console_script = "import sys; sys.path.pop(0); from braeburn.cli.main import main; sys.exit(main())"
    process = subprocess.Popen([sys.executable, "-c", as_console_script, "launch", "--cpu", "--num-processes", "2",
                                os.path.join("scripts", "ar.py")], cwd=project, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env={**os.environ,
                                                                          "XDG_CONFIG_HOME": str(tmp_path)})
    code, out = finish(process, timeout=280)
    assert code == 0, out
    assert "rank 0 of 2: sum=3" in out and "was imported in place" not in out
    assert target.exists()


PRINT_THEN_WAIT = """
import os, sys, time
print(f"rank {os.environ['RANK']} started", flush=True)
open(os.path.join(sys.argv[1], f"pid{os.environ['RANK']}"), "w").write(str(os.getpid()))
time.sleep(120)
"""


@pytest.mark.slow  # SIGHUP to a braeburn launch job (17 s on a loaded machine)
def test_sighup_stops_the_job_and_the_kept_folder_is_named(tmp_path, clean_env):
    """The launcher died of SIGHUP (a closed terminal or ssh session) and left its folder unnamed."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    process = launcher("--cpu", "--num-processes", "2", str(script(tmp_path, "wait.py", PRINT_THEN_WAIT)),
                       str(tmp_path), env={"TMPDIR": str(temp)}, xdg=str(tmp_path))
    pids = wait_for_pids(tmp_path, 2, process)
    process.send_signal(signal.SIGHUP)
    code, out = finish(process, timeout=60)
    assert code == 128 + signal.SIGHUP, out
    folder = out.split("goes to ")[1].split()[0]
    assert f"the job ended with exit status {code}; its processes' standard output and torchrun's error files are " \
           f"kept in {folder}" in out
    assert any("rank 1 started" in path.read_text() for path in Path(folder).rglob("stdout.log"))
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_dry_run_lists_every_variable_a_launch_adds(tmp_path, clean_env, capsys, monkeypatch):
    """--dry-run left out the rank wrapper's variables and the launcher's pipe."""
    from braeburn.cli import launch
    from braeburn.cli.main import main

    target = script(tmp_path, "t.py", "")
    assert main(["launch", "--cpu", "--num-processes", "2", "--dry-run", str(target)]) == 0
    said = capsys.readouterr().out.splitlines()
    listed = {line.strip().split("=")[0] for line in said[1:] if not line.strip().startswith("unset ")}
    started = {}

    class Started:  # what the launch hands to its child, without starting it
        def __init__(self, command, env, **kwargs):
            started["env"] = env

        def wait(self):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(launch.subprocess, "Popen", Started)
    assert main(["launch", "--cpu", "--num-processes", "2", str(target)]) == 0
    added = {name for name, value in started["env"].items() if os.environ.get(name) != value}
    assert listed == added
    assert {"BRAEBURN_RANK_OUTPUT_DIR", "BRAEBURN_RANK_OUTPUT_SAY_ONCE", "BRAEBURN_LAUNCHER_PIPE"} <= listed
    assert "  BRAEBURN_RANK_OUTPUT_DIR=<a new folder>" in said
