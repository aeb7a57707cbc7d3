"""On two processes (a real gloo run), a prepared scheduler and ``reduce()`` give Accelerate's numbers: the
scheduler steps once per process per optimizer step (each step saw num_processes batches), and ``reduce()``
sums by default."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # one torchrun with 2 gloo processes per library (a few seconds)

SCRIPT = textwrap.dedent('''
    import importlib, json, sys

    import torch

    lib = importlib.import_module(sys.argv[1])
    accelerator = lib.Accelerator(cpu=True)


    def rates(once_per_step=None):
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
        model, optimizer = accelerator.prepare(model, optimizer)
        if once_per_step is None:
            scheduler = accelerator.prepare(scheduler)
        else:
            scheduler = accelerator.prepare_scheduler(scheduler, once_per_step=once_per_step)
        seen = []
        for _ in range(3):
            model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            seen.append(scheduler.get_last_lr()[0])
        return seen


    value = torch.tensor([accelerator.process_index + 1.0])
    result = {"rates": rates(), "reduce": accelerator.reduce(value).tolist(),
              "mean": accelerator.reduce(value, "mean").tolist(),
              "max": accelerator.reduce(value, reduction="max").tolist()}
    if sys.argv[1] == "braeburn":
        result["once_per_step"] = rates(once_per_step=True)  # what the Trainer uses: lr per optimizer step
    with open(f"{sys.argv[2]}.{accelerator.process_index}.json", "w") as handle:
        json.dump(result, handle)
    accelerator.wait_for_everyone()
    accelerator.end_training()
''')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(lib: str, directory) -> list[dict]:
    script = directory / "scheduler_reduce.py"
    script.write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BRAEBURN_", "ACCELERATE_"))}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", ACCELERATE_USE_CPU="true",
               PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(_free_port()), str(script), lib, str(directory / lib)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return [json.loads((directory / f"{lib}.{rank}.json").read_text()) for rank in (0, 1)]


# LambdaLR 1/(step+1), 3 optimizer steps on 2 processes: the schedule moves 2 steps per optimizer step.
EXPECTED = {"rates": [1 / 3, 1 / 5, 1 / 7], "reduce": [3.0], "mean": [1.5], "max": [2.0]}


@pytest.mark.parametrize("lib", ["accelerate", "braeburn"])
def test_scheduler_and_reduce_on_two_processes(lib, tmp_path):
    if importlib.util.find_spec(lib) is None:
        pytest.skip(f"{lib} is not installed")
    for result in _run(lib, tmp_path):
        for key, expected in EXPECTED.items():
            assert result[key] == pytest.approx(expected), key
        if lib == "braeburn":
            assert result["once_per_step"] == pytest.approx([1 / 2, 1 / 3, 1 / 4])
