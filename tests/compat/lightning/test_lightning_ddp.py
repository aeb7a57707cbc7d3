"""braeburn.lightning.Trainer(devices=2) on 2 gloo processes (torchrun on CPU): DDP averages the two ranks'
gradients, so each step is the hand-written loop's step on the two ranks' batches together (to float rounding:
the mean is summed in another order)."""

from __future__ import annotations

import textwrap

import pytest

from tests.compat._two_processes import run_two_processes

from .lightning_modules import hand_loop, regression_data

pytestmark = pytest.mark.slow  # one torchrun with 2 gloo processes

SCRIPT = textwrap.dedent('''
    import json, sys

    import torch

    from braeburn.lightning import Trainer
    from tests.compat.lightning.lightning_modules import Regression, regression_data

    module = Regression("epoch")
    options = dict(accelerator="cpu", devices=2, max_epochs=2, enable_progress_bar=False,
                   default_root_dir=sys.argv[2] + "_out")
    Trainer(**options, max_steps=1).fit(Regression("epoch"), regression_data(samples=24, batch_size=4))
    trainer = Trainer(**options)  # a second run: version_1, the same folder on both processes
    trainer.fit(module, regression_data(samples=24, batch_size=4))
    with open(f"{sys.argv[2]}.{trainer.braeburn_trainer.accelerator.process_index}.json", "w") as out:
        json.dump({"losses": module.losses, "world_size": trainer.world_size,
                   "estimated": trainer.estimated_stepping_batches, "log_dir": trainer.log_dir}, out)
''')


def test_two_processes_train_as_one_with_the_batches_together(tmp_path):
    ranks = run_two_processes(SCRIPT, "lightning_ddp.py", "braeburn", tmp_path)
    assert [rank["world_size"] for rank in ranks] == [2, 2]
    assert [rank["estimated"] for rank in ranks] == [6, 6]  # each process's steps: 3 of the 6 batches, 2 epochs
    logs = tmp_path / "braeburn_out" / "lightning_logs"
    assert [rank["log_dir"] for rank in ranks] == [str(logs / "version_1")] * 2
    assert (logs / "version_0" / "checkpoint-1").is_dir() and (logs / "version_1" / "checkpoint-6").is_dir()
    together = [(a + b) / 2 for a, b in zip(ranks[0]["losses"], ranks[1]["losses"])]
    expected = hand_loop(regression_data(samples=24, batch_size=8), epochs=2, interval="epoch")
    assert together == pytest.approx(expected, rel=1e-5)
