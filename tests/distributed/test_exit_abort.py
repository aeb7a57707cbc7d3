"""The abort of a 2-process gloo job at exit, made certain by tests/distributed/exit_abort_job.py, and
braeburn's collectives kept clear of it. The repeated run of the suite's own job is benchmarks/exit_soak.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).resolve().parent / "exit_abort_job.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(collective: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("BRAEBURN_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(_free_port()), str(JOB), collective]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # two torchrun jobs of 2 gloo processes (~10 s on 2 cores)
def test_a_tensor_released_by_gloo_during_finalization_aborts_unless_braeburn_keeps_it():
    done = _run("braeburn")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "terminate called" not in done.stderr
    if sys.version_info < (3, 14):  # from 3.14 on, such a thread waits forever instead of ending the process
        control = _run("torch")  # the same job with torch's own all_reduce: the abort is real on this torch
        assert control.returncode != 0 and "terminate called without an active exception" in control.stderr, (
            control.stdout[-2000:] + control.stderr[-4000:])


def _task(tmp_path, name: str, syscall: str):
    task = tmp_path / name
    task.mkdir()
    (task / "comm").write_text("pt_gloo_runloop\n")
    (task / "syscall").write_text(syscall + "\n")
    return task


def test_a_worker_is_parked_only_in_an_untimed_futex_wait(tmp_path):
    from braeburn.distributed import backend_threads

    # as read from a live 2-process job on x86_64: its queue's condition variable, the GIL, a running thread
    parked = _task(tmp_path, "1", "202 0x557ab02a27f0 0x189 0x0 0x0 0x0 0xffffffff 0x7fb4f5511d10 0x7fb5156a3f16")
    on_the_gil = _task(tmp_path, "2", "202 0x7fb515d4e6f0 0x89 0x0 0x7fb4f5d12ce0 0x0 0xffffffff 0x7fb4f5d12bb0 0x0")
    in_a_collective = _task(tmp_path, "3", "202 0x7ff900009338 0x189 0x0 0x7ff90d012240 0x0 0xffffffff 0x0 0x0")
    on_a_mutex = _task(tmp_path, "4", "202 0x7fb515d4e6f8 0x80 0x2 0x0 0x0 0x0 0x0 0x0")  # FUTEX_WAIT: the GIL's mutex
    running = _task(tmp_path, "5", "running")
    assert backend_threads._parked(parked, 202)
    for busy in (on_the_gil, in_a_collective, on_a_mutex, running):
        assert not backend_threads._parked(busy, 202), busy.name
    assert backend_threads._parked(tmp_path / "6", 202)  # a thread that has ended


def test_waiting_for_workers_that_never_park_ends_at_its_timeout(tmp_path, monkeypatch):
    from braeburn.distributed import backend_threads

    _task(tmp_path, "1", "202 0x7fb515d4e6f0 0x89 0x0 0x7fb4f5d12ce0 0x0 0xffffffff 0x7fb4f5d12bb0 0x0")
    monkeypatch.setattr(backend_threads, "_TASKS", tmp_path)
    monkeypatch.setattr(backend_threads.platform, "machine", lambda: "x86_64")
    assert backend_threads.wait_until_parked(0.05) is False
    (tmp_path / "1" / "syscall").write_text("202 0x557ab02a27f0 0x189 0x0 0x0 0x0 0xffffffff 0x0 0x0\n")
    assert backend_threads.wait_until_parked(0.05) is True
