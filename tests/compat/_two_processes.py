"""Run a script on 2 CPU processes (torchrun, gloo) under Accelerate or braeburn, and read what each rank wrote.

The script gets ``lib`` and an output prefix, and writes ``<prefix>.<rank>.json``. Both libraries run on the CPU:
with one GPU visible, Accelerate would put two processes on it with NCCL."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# A peer's teardown leaves torch's abort at exit open (a gloo worker taking the GIL in a finalizing interpreter:
# docs/reliability.md); it aborted an Accelerate run of this suite in a CI soak. Every script
# ends as braeburn's teardown does, so that what is compared is the numbers, not torch's exit race.
SAFE_EXIT = """

import torch.distributed as _dist
from braeburn.distributed.backend_threads import wait_until_parked as _wait_until_parked
if _dist.is_initialized():
    _dist.destroy_process_group()
_wait_until_parked(10.0)
"""


def run_two_processes(source: str, name: str, lib: str, directory) -> list[dict]:
    script = directory / name
    script.write_text(source + SAFE_EXIT)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BRAEBURN_", "ACCELERATE_"))}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", ACCELERATE_USE_CPU="true",
               PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(_free_port()), str(script), lib, str(directory / lib)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [json.loads((directory / f"{lib}.{rank}.json").read_text()) for rank in (0, 1)]
