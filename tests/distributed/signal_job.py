"""One rank of a 2-process Trainer job (gloo on the CPU) that a test stops with a signal to one rank only
(tests/distributed/test_distributed_signals.py). The test starts both ranks itself (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, as torchrun would set them) so that it can signal one of them by its pid.

    python signal_job.py OUT [cpu|gpu]      (gpu: one GPU per rank, NCCL; the stop flag still goes over gloo)

Trains a tiny model for up to 400 optimizer steps (a few milliseconds each), saving no checkpoint but
the stop one; writes OUT/ready-RANK after the first step, and OUT/result-RANK.json (the step it
stopped at and its exit status) on the way out.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from braeburn import Trainer, TrainingConfig
from braeburn.trainer.callbacks import Callback


class Pace(Callback):
    """Marks the first step done (the test signals after it) and makes each step last a few ms."""

    def __init__(self, out: Path):
        self.out = out

    def on_step_end(self, trainer, state) -> None:
        if state.global_step == 1:
            (self.out / f"ready-{trainer.accelerator.process_index}").touch()
        time.sleep(0.004)


def main(out: Path, device: str) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64))
    config = TrainingConfig(output_dir=str(out / "run"), per_device_train_batch_size=4, max_steps=400,
                            logging_steps=1000, save_strategy="steps", save_steps=100_000, mixed_precision="no",
                            compile="false", use_cpu=device == "cpu", learning_rate=1e-3)
    trainer = Trainer(nn.Linear(4, 1), config, train_dataset=data, loss_fn=lambda out, y: ((out[:, 0] - y) ** 2).mean(),
                      callbacks=[Pace(out)])
    status = 0
    try:
        trainer.train()
    except SystemExit as stop:
        status = stop.code
        raise
    finally:
        rank = trainer.accelerator.process_index
        result = {"step": trainer.state.global_step, "status": status, "checkpoint": trainer.state.last_checkpoint}
        (out / f"result-{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "cpu")
