"""Accelerate's process helpers on a real 2-process gloo run (torchrun on CPU), with Accelerate and braeburn:
the same values on every rank."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

from tests.compat._two_processes import run_two_processes

pytestmark = pytest.mark.slow  # one torchrun with 2 gloo processes per library

SCRIPT = textwrap.dedent('''
    import importlib, json, os, sys, time

    import torch

    lib = importlib.import_module(sys.argv[1])
    out = sys.argv[2]
    accelerator = lib.Accelerator(cpu=True)
    rank = accelerator.process_index
    result = {"distributed_type": str(getattr(accelerator.distributed_type, "value", accelerator.distributed_type)),
              "use_distributed": accelerator.use_distributed, "is_last_process": accelerator.is_last_process}
    with accelerator.split_between_processes(["a", "b", "c", "d", "e"]) as share:
        result["split"] = share
    with accelerator.split_between_processes(["a", "b", "c", "d", "e"], apply_padding=True) as share:
        result["split_padded"] = share
    with accelerator.split_between_processes(torch.arange(5)) as share:
        result["split_tensor"] = share.tolist()
    padded = accelerator.pad_across_processes(torch.full((rank + 1, 2), rank + 1), dim=0, pad_index=-1)
    result["padded"] = accelerator.gather(padded).tolist()
    first = accelerator.pad_across_processes(torch.full((2, rank + 1), 7), dim=1, pad_first=True)
    result["pad_first"] = first.tolist()
    marker = os.path.join(os.path.dirname(out), "main_was_here")
    with accelerator.main_process_first():
        if rank == 0:
            time.sleep(0.5)
            open(marker, "w").close()
        result["saw_main_first"] = os.path.exists(marker)
    if rank == 1:
        accelerator.set_trigger()
    result["trigger"] = accelerator.check_trigger()
    result["trigger_again"] = accelerator.check_trigger()

    @accelerator.on_process(process_index=1)
    def only_one():
        return "ran"

    @accelerator.on_last_process
    def only_last():
        return "last"

    result["on_process_1"] = only_one()
    result["on_last"] = only_last()
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    with accelerator.no_sync(model):
        model(torch.ones(1, 2)).sum().backward()
    grads = accelerator.gather(model.module.weight.grad if hasattr(model, "module") else model.weight.grad)
    result["no_sync_kept_local_grads"] = grads.shape[0] == 2
    with open(f"{out}.{rank}.json", "w") as handle:
        json.dump(result, handle)
    accelerator.wait_for_everyone()
    accelerator.end_training()
''')


def _run(lib: str, directory) -> list[dict]:
    return run_two_processes(SCRIPT, "helpers.py", lib, directory)


EXPECTED = [
    {"distributed_type": "MULTI_CPU", "use_distributed": True, "is_last_process": False, "split": ["a", "b", "c"],
     "split_padded": ["a", "b", "c"], "split_tensor": [0, 1, 2], "padded": [[1, 1], [-1, -1], [2, 2], [2, 2]],
     "pad_first": [[0, 7], [0, 7]], "saw_main_first": True, "trigger": True, "trigger_again": False,
     "on_process_1": None, "on_last": None, "no_sync_kept_local_grads": True},
    {"distributed_type": "MULTI_CPU", "use_distributed": True, "is_last_process": True, "split": ["d", "e"],
     "split_padded": ["d", "e", "e"], "split_tensor": [3, 4], "padded": [[1, 1], [-1, -1], [2, 2], [2, 2]],
     "pad_first": [[7, 7], [7, 7]], "saw_main_first": True, "trigger": True, "trigger_again": False,
     "on_process_1": "ran", "on_last": "last", "no_sync_kept_local_grads": True},
]


@pytest.mark.parametrize("lib", ["accelerate", "braeburn"])
def test_process_helpers_on_two_processes(lib, tmp_path):
    if importlib.util.find_spec(lib) is None:
        pytest.skip(f"{lib} is not installed")
    assert _run(lib, tmp_path) == EXPECTED
