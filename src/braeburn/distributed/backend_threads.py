"""Waiting, at teardown, until gloo's worker threads have let go of their last collective (Linux).

Why (docs/reliability.md shows it happen on demand): a gloo worker thread releases a
collective's tensors after the caller has been woken, and releasing a tensor that Python has seen takes
the GIL (torch 2.13 does so on every release by another thread). If that thread is still waiting for the
GIL when the interpreter begins to finalize, and gets it there, Python ends the thread with pthread_exit,
and the forced unwind through a noexcept C++ destructor aborts the process with "terminate called without
an active exception" -- after the job's work is done. Once a DDP model has used the default group, its
worker threads live until the process ends, so they cannot be joined; they can be waited for.

A worker that has let go of its last collective is parked on its queue's condition variable: an untimed
FUTEX_WAIT_BITSET (how glibc waits on a condition variable). Waiting for the GIL, or inside a collective, is
a timed wait; locking a mutex (the GIL's own, on the way to the GIL) is a plain FUTEX_WAIT.
``/proc/self/task/<id>/syscall`` tells them apart. A worker must be seen parked twice in a row, a
millisecond apart; while this waits, the GIL is free for a worker that needs it.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

_WORKER_NAME = "pt_gloo_runloop"  # what torch names gloo's worker threads
_FUTEX = {"x86_64": 202, "aarch64": 98, "arm64": 98}  # the futex system call's number
_FUTEX_WAIT_BITSET = 9
_FUTEX_COMMAND = 0x7F  # without FUTEX_PRIVATE_FLAG (128) and FUTEX_CLOCK_REALTIME (256)
_TASKS = Path("/proc/self/task")


def _workers() -> list[Path]:
    found = []
    for task in _TASKS.iterdir():
        try:
            if (task / "comm").read_text().strip() == _WORKER_NAME:
                found.append(task)
        except OSError:  # the thread ended meanwhile
            continue
    return found


def _parked(task: Path, futex: int) -> bool:
    """True when the thread waits on a condition variable with no timeout (its queue's), or has ended."""
    try:
        fields = (task / "syscall").read_text().split()
    except OSError:
        return not task.exists()
    return (len(fields) > 4 and fields[0] == str(futex) and int(fields[2], 16) & _FUTEX_COMMAND == _FUTEX_WAIT_BITSET
            and int(fields[4], 16) == 0)


def wait_until_parked(timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` until every gloo worker of this process is parked; True when they are.

    Where the threads cannot be seen (not Linux, an unnamed or unknown architecture), the GIL is left
    free for a moment, so a worker already waiting for it finishes; False then."""
    futex = _FUTEX.get(platform.machine())
    if futex is None or not _TASKS.is_dir() or not os.access(_TASKS, os.R_OK):
        time.sleep(0.05)
        return False
    deadline, seen_parked = time.monotonic() + timeout_s, 0
    while True:
        seen_parked = seen_parked + 1 if all(_parked(task, futex) for task in _workers()) else 0
        if seen_parked == 2:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)  # the GIL is free meanwhile: a worker waiting for it takes it and finishes
