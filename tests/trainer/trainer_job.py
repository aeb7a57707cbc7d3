"""A small Trainer run for the process tests (tests/trainer/test_resume.py): kill, signal, resume.

    python trainer_job.py OUTPUT_DIR RESULT_FILE [--resume] [--kill-at STEP] [--signal-at STEP:NAME]

Writes the final parameters to RESULT_FILE. --kill-at sends this process SIGKILL after that step
(mid-epoch, no chance to save); --signal-at sends it SIGINT or SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys

import torch
from torch.utils.data import TensorDataset

from braeburn.trainer import Callback, Trainer, TrainingConfig


class SelfSignal(Callback):
    def __init__(self, step: int, signum: int):
        self.step, self.signum = step, signum

    def on_step_end(self, trainer, state):
        if state.global_step == self.step:
            os.kill(os.getpid(), self.signum)


def main(argv: list[str]) -> None:
    output_dir, result = argv[0], argv[1]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(120, 8)
    y = (x[:, :4].sum(1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 2))
    config = TrainingConfig(output_dir=output_dir, per_device_train_batch_size=8, num_train_epochs=3,
                            learning_rate=1e-2, weight_decay=0.01, warmup_steps=3, logging_steps=4,
                            save_strategy="steps", save_steps=5, gradient_accumulation_steps=1, seed=7,
                            resume_from_checkpoint="latest" if "--resume" in argv else None)
    callbacks = []
    if "--kill-at" in argv:
        callbacks.append(SelfSignal(int(argv[argv.index("--kill-at") + 1]), signal.SIGKILL))
    if "--signal-at" in argv:
        step, name = argv[argv.index("--signal-at") + 1].split(":")
        callbacks.append(SelfSignal(int(step), getattr(signal, name)))
    trainer = Trainer(model, config, train_dataset=TensorDataset(x, y), loss_fn=torch.nn.functional.cross_entropy,
                      callbacks=callbacks)
    trainer.train()
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, result)


if __name__ == "__main__":
    main(sys.argv[1:])
