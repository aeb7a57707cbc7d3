"""A small Trainer run for tests/checkpoints/test_output_lock.py: one run per output directory.

    python output_lock_job.py OUTPUT_DIR [--pause-dir DIR] [--overwrite] [--resume]

With --pause-dir the run stops at three points and waits: ``locked`` (output_dir locked, nothing else
written yet), ``saving`` (inside the first checkpoint's save, its staging folder half written) and
``saved`` (just after the second checkpoint). At each it creates DIR/<point>.reached and goes on when
DIR/<point>.go appears. Errors print as one line (``run_main``), as in the examples.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from braeburn.checkpoints import state as state_io
from braeburn.errors import run_main
from braeburn.trainer import Callback, Trainer, TrainingConfig


def pause(folder: Path | None, point: str) -> None:
    if folder is None:
        return
    (folder / f"{point}.reached").touch()
    deadline = time.monotonic() + 120
    while not (folder / f"{point}.go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"nobody released {point}")
        time.sleep(0.02)


class PauseAfterSecondSave(Callback):
    def __init__(self, folder: Path | None):
        self.folder, self.saves = folder, 0

    def on_save(self, trainer, state, checkpoint) -> None:
        self.saves += 1
        if self.saves == 2:
            pause(self.folder, "saved")


def install_pauses(folder: Path | None) -> None:
    if folder is None:
        return
    check_output_dir, publish = Trainer._check_output_dir, state_io.publish
    saves = []

    def checked(self, resume):
        check_output_dir(self, resume)
        pause(folder, "locked")

    def publishing(output_dir):
        if not saves:
            saves.append(output_dir)
            pause(folder, "saving")
        return publish(output_dir)

    Trainer._check_output_dir, state_io.publish = checked, publishing


def main(argv: list[str]) -> None:
    output_dir = argv[0]
    pauses = Path(argv[argv.index("--pause-dir") + 1]) if "--pause-dir" in argv else None
    install_pauses(pauses)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(64, 4)
    y = (x.sum(1) > 0).long()
    config = TrainingConfig(output_dir=output_dir, per_device_train_batch_size=4, max_steps=12, logging_steps=2,
                            save_strategy="steps", save_steps=4, seed=3, use_cpu=True,
                            save_in_background=False,  # paused inside a save, the whole run stands still
                            overwrite_output_dir="--overwrite" in argv,
                            resume_from_checkpoint="latest" if "--resume" in argv else None)
    trainer = Trainer(torch.nn.Linear(4, 2), config, train_dataset=TensorDataset(x, y),
                      loss_fn=torch.nn.functional.cross_entropy, callbacks=[PauseAfterSecondSave(pauses)])
    trainer.train()


if __name__ == "__main__":
    run_main(main)
