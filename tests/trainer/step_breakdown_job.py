"""A 2-process Trainer job for tests/trainer/test_step_breakdown.py: 30 optimizer steps of a small MLP, so that
step_breakdown=auto profiles steps 25-29 (gloo on the CPU, or NCCL with one GPU per process).

    braeburn launch --num-processes 2 tests/trainer/step_breakdown_job.py OUT
"""

from __future__ import annotations

import sys

import torch
from torch.utils.data import TensorDataset

from braeburn import Trainer, TrainingConfig


def main(out: str) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 64, generator=generator)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    config = TrainingConfig(output_dir=out, overwrite_output_dir=True, max_steps=30, per_device_train_batch_size=16,
                            save_strategy="no", logging_steps=10, disable_tqdm=True)
    Trainer(model, config, train_dataset=TensorDataset(x, x.sum(1, keepdim=True)),
            loss_fn=torch.nn.functional.mse_loss).train()


if __name__ == "__main__":
    main(sys.argv[1])
