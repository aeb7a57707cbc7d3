"""The Trainer reads nothing from the device on a step that does not log: on a small MPS model a
``loss.item()`` every step cost about 6 ms of a 10 ms step.

Counted on the CPU with a TorchDispatchMode: every read of a device value by the host goes through one of the
ops below (``.item()``, ``float(t)``, ``bool(t)``, ``if t:`` call ``aten._local_scalar_dense``; ``nonzero`` and
``equal`` must learn a size or an answer on the host), whichever Python or C++ code asks, torch's own included.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import TensorDataset

from braeburn.trainer.callbacks import Callback
from tests.devices.test_mac import fake_mac  # noqa: F401  (a fixture)

HOST_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default,
              torch.ops.aten.equal.default, torch.ops.aten.is_nonzero.default}


class CountHostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in HOST_READS:
            self.count += 1
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class ReadsPerStep(Callback):
    def __init__(self, mode: CountHostReads):
        self.mode, self.last, self.per_step = mode, 0, {}

    def on_step_end(self, trainer, state) -> None:
        self.per_step[state.global_step] = self.mode.ops[self.last:]
        self.last = self.mode.count


def reads_per_quiet_step(tmp_path, **options) -> dict[int, list[str]]:
    """The device reads of each step of a 12-step run that logs every 4th, but for step 1 and the logs."""
    from braeburn import Trainer, TrainingConfig

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=12, per_device_train_batch_size=4, logging_steps=4,
                            save_strategy="no", disable_tqdm=True, **options)
    mode = CountHostReads()
    counter = ReadsPerStep(mode)
    trainer = Trainer(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1)),
                      config, train_dataset=data, loss_fn=torch.nn.functional.mse_loss, callbacks=[counter])
    with mode:
        trainer.train()
    # step 1 checks the labels against the outputs once; steps 4, 8 and 12 log (on_step_end comes before the log,
    # so a log's reads show at the step after it)
    assert counter.per_step[5], "the counter sees the log's reads"
    return {step: ops for step, ops in counter.per_step.items() if step not in (1, 5, 9)}


@pytest.mark.parametrize("options", [{}, {"mixed_precision": "bf16"}, {"max_grad_norm": 0.0},
                                     {"gradient_accumulation_steps": 2}])
def test_a_step_that_does_not_log_reads_nothing_from_the_device(tmp_path, cpu_only, options):
    quiet = reads_per_quiet_step(tmp_path, **options)
    assert all(not ops for ops in quiet.values()), quiet


def test_the_same_on_a_faked_mac(tmp_path, fake_mac):
    quiet = reads_per_quiet_step(tmp_path, mixed_precision="auto")
    assert all(not ops for ops in quiet.values()), quiet


def test_fp16_reads_one_value_per_step_the_grad_scalers_verdict(tmp_path, cpu_only):
    # Whether the step overflowed decides whether the LR schedule moves (as in Transformers): GradScaler reads it
    # on the host. It was read twice (the scale before and after); now once, against the last update's scale.
    quiet = reads_per_quiet_step(tmp_path, mixed_precision="fp16")
    assert all(len(ops) == 1 for ops in quiet.values()), quiet
