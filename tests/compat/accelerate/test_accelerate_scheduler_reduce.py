"""On two processes (a real gloo run), a prepared scheduler and ``reduce()`` give Accelerate's numbers: the
scheduler steps once per process per optimizer step (each step saw num_processes batches), and ``reduce()``
sums by default."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

from tests.compat._two_processes import run_two_processes

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


def _run(lib: str, directory) -> list[dict]:
    return run_two_processes(SCRIPT, "scheduler_reduce.py", lib, directory)


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
