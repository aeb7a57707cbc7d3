"""`braeburn launch`: real child processes, real 2-process gloo jobs, signals and exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from braeburn.cli.launch import build_command, child_environment, plan_launch, process_tree, python_running
from braeburn.cli.main import main
from braeburn.cli.launch_config import ConfigError, LaunchSettings, resolve_settings
from tests.conftest import APPLE_M, CUDA_BOX, LINUX_CPU

ALL_REDUCE = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum={t.item():.0f} "
      f"device={os.environ['BRAEBURN_DEVICE']} strategy={os.environ['BRAEBURN_STRATEGY']}", flush=True)
dist.destroy_process_group()
"""

CRASH_RANK_1 = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    print(f"crashing at {time.time()}", flush=True)
    raise RuntimeError("rank 1 exploded on purpose")
time.sleep(120)  # rank 0 is busy (no collective that would notice): only the launcher can stop it
"""

# Records the environment a script sees before it imports torch: what libtorch reads when it loads.
RECORD_ENV = """
import json, os, sys
with open(sys.argv[1], "w") as out:
    json.dump({"env": dict(os.environ), "torch_loaded": "torch" in sys.modules, "argv": sys.argv[2:]}, out)
"""

PID_THEN_WAIT = """
import os, sys, time
open(os.path.join(sys.argv[1], f"pid{os.environ.get('RANK', '0')}"), "w").write(str(os.getpid()))
time.sleep(120)
"""


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def launcher(*args: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    full_env = {**os.environ, "XDG_CONFIG_HOME": kwargs.pop("xdg"), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "braeburn.cli.main", "launch", *args], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def finish(process: subprocess.Popen, timeout: float = 90) -> tuple[int, str]:
    out, _ = process.communicate(timeout=timeout)
    return process.returncode, out




@pytest.mark.slow  # braeburn launch with 2 gloo processes (13 s)
def test_two_cpu_processes_all_reduce_through_gloo(tmp_path, clean_env):
    code, out = finish(launcher("--cpu", "--num-processes", "2", "--every-process-prints",
                                str(script(tmp_path, "ar.py", ALL_REDUCE)), xdg=str(tmp_path)))
    assert code == 0, out
    for rank in (0, 1):
        assert f"rank {rank} of 2: sum=3 device=cpu strategy=ddp" in out


def test_quiet_output_is_torchruns_redirect_of_every_local_rank_but_0(tmp_path):
    many = resolve_settings({"num_processes": "8", "num_machines": "2", "main_process_ip": "10.1.2.3"},
                            {"XDG_CONFIG_HOME": str(tmp_path)}, None)
    joined = " ".join(build_command(many.settings, plan_launch(many, CUDA_BOX, env={}), "t.py", [], module=False,
                                    port=29500, quiet_output_dir="/logs"))
    wrapper = " ".join(python_running("braeburn.cli.rank_output", "-u"))
    assert f"--log-dir /logs --redirects 1:1,2:1,3:1 --no-python {wrapper} t.py" \
        in joined  # each rank starts in the wrapper that keeps a rank whose file cannot be written alive
    env = child_environment(plan_launch(many, CUDA_BOX, env={}), many.settings, {})
    assert int(env["OMP_NUM_THREADS"]) >= 1  # set, so torchrun prints no banner
    assert child_environment(plan_launch(many, CUDA_BOX, env={}), many.settings,
                             {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"


@pytest.mark.slow  # a braeburn launch job (16 s on a loaded machine)
def test_a_crashed_rank_ends_the_job_within_seconds_with_its_error(tmp_path, clean_env):
    # The budget that matters is from the crash to the end (below); starting three torch processes on a
    # loaded machine can take minutes, so the wait for the whole job is generous.
    code, out = finish(launcher("--cpu", "--num-processes", "2", "--every-process-prints",
                                str(script(tmp_path, "crash.py", CRASH_RANK_1)),
                                xdg=str(tmp_path)), timeout=280)
    ended = time.time()
    assert code != 0
    crashed = float(out.split("crashing at ")[1].split()[0])
    assert ended - crashed < 15  # the survivor sleeps 120 s: it was stopped, not waited for
    assert "RuntimeError: rank 1 exploded on purpose" in out
    assert "rank      : 1" in out  # torchrun's summary names the root-cause rank


@pytest.mark.slow  # a braeburn launch job restarted (12 s on a loaded machine)
def test_max_restarts_restarts_the_failed_group(tmp_path, clean_env):
    body = """
    import os, sys
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    print(f"attempt {attempt} rank {os.environ['RANK']}", flush=True)
    sys.exit(5 if attempt == 0 and os.environ["RANK"] == "1" else 0)
    """
    code, out = finish(launcher("--cpu", "--num-processes", "2", "--max-restarts", "1", "--every-process-prints",
                                str(script(tmp_path, "r.py", body)), xdg=str(tmp_path)))
    assert code == 0, out
    assert "attempt 1 rank 0" in out and "attempt 1 rank 1" in out


@pytest.mark.slow  # a braeburn launch job (8 s on a loaded machine)
def test_the_script_exit_code_and_arguments_come_through(tmp_path, clean_env):
    body = "import sys\nprint('args', sys.argv[1:])\nsys.exit(3)\n"
    code, out = finish(launcher(str(script(tmp_path, "x.py", body)), "--lr", "0.1", "-m", "y", xdg=str(tmp_path)))
    assert code == 3 and "args ['--lr', '0.1', '-m', 'y']" in out


@pytest.mark.slow  # a braeburn launch job (7 s on a loaded machine)
def test_a_module_runs_with_dash_m(tmp_path, clean_env):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "train.py").write_text("import sys\nprint('module ran', sys.argv[1:])\n")
    code, out = finish(launcher("-m", "mypkg.train", "a", xdg=str(tmp_path), cwd=tmp_path))
    assert code == 0 and "module ran ['a']" in out


@pytest.mark.slow  # signals to braeburn launch jobs (8-12 s on a loaded machine)
@pytest.mark.parametrize("signum, workers", [(signal.SIGTERM, 1), (signal.SIGINT, 2)])
def test_signals_stop_every_child(tmp_path, clean_env, signum, workers):
    path = script(tmp_path, "wait.py", PID_THEN_WAIT)
    process = launcher("--cpu", "--num-processes", str(workers), str(path), str(tmp_path), xdg=str(tmp_path))
    pids = wait_for_pids(tmp_path, workers, process)
    process.send_signal(signum)  # to the launcher only: it must pass the signal on
    code, out = finish(process, timeout=40)
    assert code == 128 + signum, out  # the shell's convention for "ended by a signal", with 1 or 2 workers
    assert "SignalException" not in out and "torch/distributed/run.py" not in out  # no traceback of torch's
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to read its status has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no /proc (macOS): kill(0) is the answer
        return True


def wait_for_pids(tmp_path: Path, workers: int, process: subprocess.Popen) -> list[int]:
    """The workers' pids once every worker runs. Starting takes seconds (three processes import torch, on
    a loaded machine much longer): wait as long as the launcher lives, up to a generous bound."""
    pid_files = [tmp_path / f"pid{rank}" for rank in range(workers)]
    deadline = time.monotonic() + 240
    while not all(f.exists() and f.read_text() for f in pid_files):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the workers did not start (launcher status {process.poll()}):\n{finish(process)[1]}")
        time.sleep(0.1)
    return [int(f.read_text()) for f in pid_files]


def ended_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(pid) for pid in pids)


@pytest.mark.slow  # SIGKILL to a braeburn launch job (5-10 s on a loaded machine)
@pytest.mark.parametrize("workers", [
    pytest.param(1, marks=pytest.mark.skipif(not sys.platform.startswith("linux"),
                                             reason="one process: the parent-death signal is Linux's prctl")),
    2])
def test_kill_9_of_the_launcher_ends_the_agent_and_every_worker(tmp_path, clean_env, workers):
    path = script(tmp_path, "wait.py", PID_THEN_WAIT)
    process = launcher("--cpu", "--num-processes", str(workers), str(path), str(tmp_path), xdg=str(tmp_path))
    workers_pids = wait_for_pids(tmp_path, workers, process)
    job = [pid for pid in process_tree(process.pid) if pid != process.pid]  # torchrun's agent and the workers
    assert set(workers_pids) <= set(job)
    process.kill()  # SIGKILL: no handler runs, what a scheduler's grace-period kill or the OOM killer does
    process.wait()
    assert ended_within(job, 15), [pid for pid in job if alive(pid)]


IGNORES_SIGINT = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a worker deep in C++ code (say gloo's rendezvous) behaves
open(os.path.join(sys.argv[1], f"pid{os.environ.get('RANK', '0')}"), "w").write(str(os.getpid()))
time.sleep(120)
"""


@pytest.mark.slow  # signals to a braeburn launch job (11 s on a loaded machine)
def test_a_second_ctrl_c_kills_a_job_that_does_not_stop(tmp_path, clean_env):
    path = script(tmp_path, "stuck.py", IGNORES_SIGINT)
    process = launcher("--cpu", "--num-processes", "2", str(path), str(tmp_path), xdg=str(tmp_path))
    pids = wait_for_pids(tmp_path, 2, process)
    process.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert all(alive(pid) for pid in pids)  # passed on, and ignored: torchrun would wait 30 s, then kill
    process.send_signal(signal.SIGINT)  # the impatient second Ctrl-C
    code, out = finish(process, timeout=20)
    assert code == 130, out
    assert ended_within(pids, 5)


def test_mps_fallback_is_in_the_environment_before_torch_loads(tmp_path, clean_env, fake_host, capsys):
    fake_host("apple")
    record = tmp_path / "env.json"
    code = main(["launch", "--mps-high-watermark-ratio", "1.0", "--mps-low-watermark-ratio", "0.8",
                 str(script(tmp_path, "rec.py", RECORD_ENV)), str(record), "--epochs", "1"])
    assert code == 0, capsys.readouterr().err
    seen = json.loads(record.read_text())
    assert seen["torch_loaded"] is False  # recorded before the script imported torch
    env = seen["env"]
    assert env["PYTORCH_ENABLE_MPS_FALLBACK"] == "1"
    assert env["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] == "1.0" and env["PYTORCH_MPS_LOW_WATERMARK_RATIO"] == "0.8"
    # the device the launcher chose; precision and compile as asked ("auto"), resolved in the child
    assert (env["BRAEBURN_DEVICE"], env["BRAEBURN_MIXED_PRECISION"], env["BRAEBURN_COMPILE"]) == ("mps", "auto", "auto")
    assert seen["argv"] == ["--epochs", "1"]


def test_a_value_the_user_set_is_never_overridden(tmp_path, clean_env, fake_host, monkeypatch):
    fake_host("apple")
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "0")
    monkeypatch.setenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "0.0")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    record = tmp_path / "env.json"
    assert main(["launch", "--mps-high-watermark-ratio", "1.5", str(script(tmp_path, "rec.py", RECORD_ENV)),
                 str(record)]) == 0
    env = json.loads(record.read_text())["env"]
    assert env["PYTORCH_ENABLE_MPS_FALLBACK"] == "0"
    assert env["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] == "0.0"
    assert env["NCCL_NVLS_ENABLE"] == "0"


def test_several_processes_on_mps_are_refused_with_the_alternatives(tmp_path, clean_env, fake_host, capsys):
    fake_host("apple")
    record = tmp_path / "env.json"
    code = main(["launch", "--num-processes", "2", "--mixed-precision", "fp8",
                 str(script(tmp_path, "rec.py", RECORD_ENV)), str(record)])
    err = capsys.readouterr().err
    assert code == 1 and not record.exists()
    assert "2 problems" in err  # both reported at once
    assert "no process-group backend" in err and "Run one mps process" in err and "--cpu" in err
    assert "flag --mixed-precision" in err


def test_gpu_ids_set_the_device_kinds_visibility_variable():
    settings = LaunchSettings(gpu_ids="1", num_processes=1)
    plan = plan_launch(resolve_settings({"gpu_ids": "1"}, {}, None), CUDA_BOX, env={})
    assert child_environment(plan, settings, {})["CUDA_VISIBLE_DEVICES"] == "1"
    # indices count within what the user already made visible
    assert child_environment(plan, settings, {"CUDA_VISIBLE_DEVICES": "4,6"})["CUDA_VISIBLE_DEVICES"] == "6"
    with pytest.raises(ConfigError, match="numbered 0 to 1; drop 5"):
        plan_launch(resolve_settings({"gpu_ids": "0,5"}, {}, None), CUDA_BOX, env={})
    with pytest.raises(ConfigError, match="no per-device selection"):
        plan_launch(resolve_settings({"gpu_ids": "0"}, {}, None), APPLE_M, env={})


def test_elastic_command_binds_to_localhost_unless_several_machines(tmp_path):
    one = resolve_settings({"num_processes": "2", "cpu": True}, {"XDG_CONFIG_HOME": str(tmp_path)}, None)
    command = build_command(one.settings, plan_launch(one, LINUX_CPU, env={}), "t.py", ["--x"], module=False,
                            port=1234)
    assert command[:2] == python_running("braeburn.cli.job_agent")  # torch.distributed.run, ended with the launcher
    joined = " ".join(command)
    assert "--nnodes 1 --nproc-per-node 2 --node-rank 0" in joined
    assert "--master-addr 127.0.0.1 --master-port 1234 --max-restarts 0 t.py --x" in joined
    many = resolve_settings({"num_processes": "8", "num_machines": "2", "machine_rank": "1",
                             "main_process_ip": "10.1.2.3"}, {"XDG_CONFIG_HOME": str(tmp_path)}, None)
    joined = " ".join(build_command(many.settings, plan_launch(many, CUDA_BOX, env={}), "pkg.train", [],
                                    module=True, port=29500))
    assert "--nnodes 2 --nproc-per-node 4 --node-rank 1" in joined and "--master-addr 10.1.2.3" in joined
    assert joined.endswith("-m pkg.train")
    single = resolve_settings({}, {"XDG_CONFIG_HOME": str(tmp_path)}, None)
    assert build_command(single.settings, plan_launch(single, LINUX_CPU, env={}), "t.py", [], module=False,
                         port=0) == [sys.executable, "t.py"]


def test_a_missing_script_is_named(tmp_path, clean_env, capsys):
    assert main(["launch", str(tmp_path / "nope.py")]) == 1
    assert "nope.py' was not found" in capsys.readouterr().err


def test_explicit_choices_reach_the_child_as_asked_and_auto_stays_auto():
    asked = LaunchSettings(mixed_precision="fp16", compile=False, num_processes=1)
    plan = plan_launch(resolve_settings({"mixed_precision": "fp16", "compile": False}, {}, None), CUDA_BOX, env={})
    env = child_environment(plan, asked, {})
    assert (env["BRAEBURN_DEVICE"], env["BRAEBURN_MIXED_PRECISION"], env["BRAEBURN_COMPILE"]) == ("cuda", "fp16", "false")
    auto = LaunchSettings(num_processes=1)
    env = child_environment(plan_launch(resolve_settings({}, {}, None), CUDA_BOX, env={}), auto, {})
    assert (env["BRAEBURN_MIXED_PRECISION"], env["BRAEBURN_COMPILE"]) == ("auto", "auto")


OUTER_JOB = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531",
             "TORCHELASTIC_RESTART_COUNT": "1"}  # a shell still inside an outer job's world

ACCELERATOR_WORLD = """
from braeburn.accelerator.core import Accelerator
accelerator = Accelerator()
print(f"world {accelerator.num_processes} rank {accelerator.process_index}", flush=True)
"""


@pytest.mark.slow  # a braeburn launch job (11 s on a loaded machine)
def test_one_process_does_not_inherit_an_outer_jobs_world(tmp_path, clean_env):
    record = tmp_path / "env.json"
    code, out = finish(launcher("--cpu", "--num-processes", "1", str(script(tmp_path, "rec.py", RECORD_ENV)),
                                str(record), env=OUTER_JOB, xdg=str(tmp_path)))
    assert code == 0, out
    seen = json.loads(record.read_text())["env"]
    assert not set(OUTER_JOB) & set(seen), {k: seen[k] for k in set(OUTER_JOB) & set(seen)}
    assert "not passing on WORLD_SIZE=2, RANK=0" in out and "inherited from an outer job" in out


@pytest.mark.slow  # a braeburn launch job (22 s on a loaded machine)
def test_one_process_under_an_outer_jobs_variables_trains_alone_instead_of_hanging(tmp_path, clean_env):
    started = time.monotonic()
    process = launcher("--cpu", "--num-processes", "1", str(script(tmp_path, "acc.py", ACCELERATOR_WORLD)),
                       env=OUTER_JOB, xdg=str(tmp_path))
    try:
        code, out = finish(process, timeout=60)  # (before: waited for rank 1 of the outer world, 30 minutes)
    finally:
        process.kill()
    assert code == 0 and "world 1 rank 0" in out, out
    assert time.monotonic() - started < 60


@pytest.mark.slow  # a braeburn launch job (9 s on a loaded machine)
def test_the_launchers_own_port_in_use_is_one_line_not_a_traceback(tmp_path, clean_env):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, out = finish(launcher("--cpu", "--num-processes", "2", "--main-process-port", str(port),
                                    str(script(tmp_path, "ar.py", ALL_REDUCE)), xdg=str(tmp_path)), timeout=120)
    assert code != 0 and "Traceback" not in out, out
    assert f"error: --main-process-port={port}: the job's rendezvous port cannot be opened on this machine" in out
    assert "Pass another --main-process-port" in out


@pytest.mark.parametrize("flag", ["--nproc_per_node", "--nproc-per-node", "--nproc"])
def test_torchruns_process_count_flags_are_understood(tmp_path, clean_env, capsys, flag):
    """docs/accelerator.md and docs/migrating.md users type torchrun's spelling from habit."""
    target = tmp_path / "t.py"
    target.write_text("print('hi')\n")
    assert main(["launch", "--cpu", flag, "2", "--dry-run", str(target)]) == 0
    assert "--nproc-per-node 2" in capsys.readouterr().out
    assert main(["launch", "--cpu", "--num-machines", "2", "--machine-rank", "1", "--main-process-ip", "10.0.0.1",
                 flag, "2", "--dry-run", str(target)]) == 0
    assert "--nnodes 2 --nproc-per-node 2" in capsys.readouterr().out  # per machine: 4 in all


def test_torchruns_process_count_and_num_processes_together_are_one_clear_error(tmp_path, clean_env, capsys):
    target = tmp_path / "t.py"
    target.write_text("print('hi')\n")
    assert main(["launch", "--cpu", "--nproc_per_node", "2", "--num-processes", "2", str(target)]) == 1
    assert "Pass one of them" in capsys.readouterr().err
    assert main(["launch", "--cpu", "--nproc_per_node", "two", str(target)]) == 1
    assert "--nproc-per-node='two'" in capsys.readouterr().err


ANNOUNCE = """
from braeburn import Accelerator
Accelerator()
"""


@pytest.mark.slow  # a braeburn launch job (13 s on a loaded machine)
def test_the_childs_device_reason_is_what_the_launcher_was_asked(tmp_path, clean_env, fake_host, capfd):
    """Nobody set BRAEBURN_DEVICE: the child says the launcher chose its device by auto, not that a variable did."""
    fake_host("linux_cpu")  # the launcher's choice; the child then trains on it on any machine
    assert main(["launch", str(script(tmp_path, "announce.py", ANNOUNCE))]) == 0
    out = capfd.readouterr().out
    assert "training on cpu (auto: braeburn launch chose the best usable device here (" in out, out
    assert "BRAEBURN_DEVICE" not in out


def test_the_device_reason_names_the_flag_the_file_or_the_users_own_variable(tmp_path, clean_env):
    from braeburn.cli.launch import launch_device_reason
    from braeburn.plan.envvars import env_device_reason

    def reason(flags, env=None, text=None):
        path = tmp_path / "launch.toml"
        if text is not None:
            path.write_text(text)
        resolved = resolve_settings(flags, env or {}, path if text is not None else None)
        plan = plan_launch(resolved, LINUX_CPU, env=env or {})
        child = child_environment(plan, resolved.settings, env or {}, launch_device_reason(resolved, env or {}))
        return env_device_reason(child)

    assert reason({"cpu": True}) == "--cpu passed to braeburn launch"
    assert reason({}, text="cpu = true\n") == f"cpu = true in {tmp_path / 'launch.toml'}, read by braeburn launch"
    assert reason({}) == "auto: braeburn launch chose the best usable device here"
    assert reason({}, env={"BRAEBURN_DEVICE": "cpu", "BRAEBURN_DEVICE_REASON": "cpu: stale"}) is None  # the user's own
    assert env_device_reason({"BRAEBURN_DEVICE": "cuda", "BRAEBURN_DEVICE_REASON": "cpu: --cpu"}) is None  # changed


@pytest.mark.parametrize("host, lines", [("linux_cpu", 2), ("cuda", 2), ("apple", 0)])
def test_settings_for_another_device_are_said_to_have_no_effect_here(tmp_path, clean_env, fake_host, capsys,
                                                                     host, lines):
    fake_host(host)
    target = script(tmp_path, "t.py", "print('hi')\n")
    assert main(["launch", "--mps-high-watermark-ratio", "1.2", "--no-mps-fallback", "--dry-run", str(target)]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "has no effect here" in line]
    assert len(said) == lines, said
    if lines:
        assert said[1].startswith("braeburn launch: --mps-high-watermark-ratio 1.2 applies only to Apple-silicon "
                                  "GPUs (mps) and has no effect here, where this job trains on ")
        assert said[0].startswith("braeburn launch: --no-mps-fallback applies only to Apple-silicon GPUs (mps)")
