"""Run a 2-process gloo job many times and count the runs that fail, to catch a rare abort at exit.

Issue 32, item 13: rank 1 of a 2-process gloo job sometimes died after its work was done with
"terminate called without an active exception" (SIGABRT), once in CI and in 2 of 82 runs of
tests/accelerator/test_accelerator_ddp.py's script. A retry hides such a fault; this loop measures it.

    python benchmarks/exit_soak.py --runs 100                 # the test's script, as the test runs it
    python benchmarks/exit_soak.py --runs 100 --load 2        # with 2 CPU burners beside it
    python benchmarks/exit_soak.py --runs 100 --out soak/     # keep the logs (and core files) of failed runs
    python benchmarks/exit_soak.py --runs 100 --job trainer   # Trainer: train(), evaluate(), predict(), then exit
    python benchmarks/exit_soak.py --runs 100 --job race      # the abort made certain (exit_abort_job.py)
    python benchmarks/exit_soak.py --runs 20 --job race-torch # the same torn down by torch alone: every run aborts

Every run is a fresh `python -m torch.distributed.run --nproc_per_node 2` on a free port, in its own folder.
Core dumps are switched on for the workers; for a run that died of a signal, the backtrace of every thread
(gdb, where installed) is written beside its log, so a failure seen once is a failure explained.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _test_script() -> str:
    """The 2-process script of tests/accelerator/test_accelerator_ddp.py, verbatim."""
    source = (ROOT / "tests" / "accelerator" / "test_accelerator_ddp.py").read_text()
    found = re.search(r"SCRIPT = textwrap\.dedent\('''(.*?)'''\)", source, re.S)
    if not found:
        raise SystemExit("exit_soak: SCRIPT not found in tests/accelerator/test_accelerator_ddp.py")
    return textwrap.dedent(found.group(1))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(i * i for i in range(10_000))


def _allow_core_dumps() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


def _backtraces(folder: Path) -> None:
    """gdb's backtrace of every thread, for each core file a dead worker left in ``folder``."""
    if shutil.which("gdb") is None:
        return
    for core in folder.glob("core*"):
        done = subprocess.run(["gdb", "-batch", "-ex", "thread apply all bt", sys.executable, str(core)],
                              capture_output=True, text=True, timeout=300)
        (folder / f"{core.name}.backtrace.txt").write_text(done.stdout + done.stderr)


def _job_arguments(job: str, folder: Path) -> list[str]:
    if job.startswith("race"):  # exit_abort_job.py: the abort made certain, torn down by braeburn or torch
        return ["torch" if job == "race-torch" else "braeburn"]
    if job == "trainer":  # eval_after_train_job.py OUT: the group is torn down at exit, every rank meeting
        return [str(folder)]
    return ["4", str(folder / "two.pt"), str(folder / "state")]  # the test's (batch, out, state_dir)


def run_once(script: Path, folder: Path, env: dict[str, str], job: str = "accelerator") -> tuple[int, str]:
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(_free_port()), str(script), *_job_arguments(job, folder)]
    done = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True, timeout=600,
                          preexec_fn=_allow_core_dumps)
    return done.returncode, done.stdout + done.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="how many jobs to run (default 100)")
    parser.add_argument("--load", type=int, default=0, help="CPU burners to run beside the jobs (default 0)")
    parser.add_argument("--job", choices=("accelerator", "trainer", "race", "race-torch"), default="accelerator",
                        help="accelerator: tests/accelerator/test_accelerator_ddp.py's script (end_training() tears "
                             "the group down); trainer: tests/trainer/eval_after_train_job.py (torn down at exit); "
                             "race: tests/distributed/exit_abort_job.py, the abort at exit made certain, braeburn's "
                             "teardown; race-torch: the same with torch's own teardown (every run aborts)")
    parser.add_argument("--script", type=Path, default=None,
                        help="a script taking the job's arguments instead of the job's own")
    parser.add_argument("--out", type=Path, default=None, help="where to keep failed runs (default: a temp folder)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="braeburn-exit-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    jobs = {"trainer": "trainer/eval_after_train_job.py", "race": "distributed/exit_abort_job.py",
            "race-torch": "distributed/exit_abort_job.py"}
    script = args.script or (ROOT / "tests" / jobs[args.job] if args.job in jobs else out / "train_ddp.py")
    if args.script is None and args.job == "accelerator":
        script.write_text(_test_script())
    env = {key: value for key, value in os.environ.items() if not key.startswith("BRAEBURN_")}
    env.update(OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")])))
    burners = [multiprocessing.Process(target=_burn, args=(10**9,), daemon=True) for _ in range(args.load)]
    for burner in burners:
        burner.start()
    failed, started = [], time.monotonic()
    try:
        for index in range(1, args.runs + 1):
            folder = out / f"run-{index}"
            code, log = run_once(script, folder, env, args.job)
            if code == 0:
                shutil.rmtree(folder, ignore_errors=True)
            else:
                failed.append(index)
                (folder / "log.txt").write_text(log)
                _backtraces(folder)
                tail = [line for line in log.splitlines() if "terminate" in line or "exitcode" in line][:4]
                print(f"run {index}: exit status {code}; {'; '.join(tail)} (log: {folder / 'log.txt'})", flush=True)
            if index % 10 == 0 or index == args.runs:
                print(f"{index} runs, {len(failed)} failed, {time.monotonic() - started:.0f} s", flush=True)
    finally:
        for burner in burners:
            burner.terminate()
    print(f"exit_soak: {args.runs} runs, {len(failed)} failed{': ' + str(failed) if failed else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
