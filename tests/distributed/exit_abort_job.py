"""The abort at exit of a 2-process gloo job, made certain, and braeburn's protection.

A gloo worker thread lets go of a collective's tensors after the caller has been woken, and that takes the
GIL. A DDP model keeps the default group, and so its worker threads, alive until the process ends (torch
2.13). Here rank 0's all-reduce completes only when rank 1 joins, half a second late, while rank 0 is already
in its exit handlers, holding the GIL (a long switch interval and a busy loop) until the interpreter begins to
finalize. During finalization it releases the GIL (a module-level object whose finalizer sleeps, as any
destructor that releases the GIL would): the worker wakes in a finalizing interpreter, and Python ends it with
pthread_exit, whose forced unwind through a noexcept C++ destructor aborts the process: "terminate called
without an active exception". On a loaded machine the same happens by chance, when a worker is descheduled
at the wrong moment.

    python -m torch.distributed.run --nproc_per_node 2 tests/distributed/exit_abort_job.py torch     # rank 0 aborts
    python -m torch.distributed.run --nproc_per_node 2 tests/distributed/exit_abort_job.py braeburn  # exits 0

``torch`` makes the process group with torch.distributed; ``braeburn`` with braeburn (as the Accelerator and the
Trainer do), which tears it down at exit and first waits, with the GIL free, until gloo's workers have parked.
"""

import atexit
import sys
import time

import torch
import torch.distributed as dist

from braeburn.distributed import process_group as pg


def hold_the_gil_until_finalization():
    sys.setswitchinterval(100)  # a thread that wants the GIL now waits 100 s before asking for it
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        pass


class ReleasesTheGilWhenFinalized:
    def __del__(self):
        time.sleep(0.1)


finalized_late = ReleasesTheGilWhenFinalized()
atexit.register(hold_the_gil_until_finalization)  # registered first: runs after braeburn's exit handler
if sys.argv[1] == "torch":
    dist.init_process_group("gloo")
else:
    pg.init_process_group("gloo", pg.world_from_env())
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))  # keeps the group alive in C++ to the end
if rank == 1:
    time.sleep(1.0)  # rank 0 is in its exit handlers by now
tensor = torch.ones(4)
work = dist.all_reduce(tensor, async_op=True)
if rank == 1:
    work.wait()
del tensor, work  # as a blocking collective does on return: the worker then holds the last reference
