"""A tiny CPU training run for the background-save tests.

    python background_save_job.py OUTPUT_DIR RESULT_FILE [--resume] [--kill-in-save N] [--foreground]
                                  [--sigterm-in-final-save]

``--kill-in-save N``: SIGKILL the process from the checkpoint thread once the first file of
``checkpoint-N`` is written, while the loop's thread trains on.
``--sigterm-in-final-save``: SIGTERM the process from the checkpoint thread while the last checkpoint
(step 24) is being written and the main thread already runs the ``on_train_end`` hooks (a scheduler's
wall-time signal in that window).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import torch
from torch.utils.data import TensorDataset

from braeburn.trainer import Callback, TrainingConfig, background_save
from braeburn.trainer.loop import Trainer


def kill_inside_background_save(step: int) -> None:
    original = background_save._Replay.save_state

    def save_state(self, output_dir):
        if not output_dir.endswith(f"checkpoint-{step}.tmp"):
            return original(self, output_dir)
        name, file = next(iter(self.snapshot.files.items()))
        staging = background_save.state_io.prepare_staging(output_dir)
        file.write(staging / name)  # one file of the checkpoint's staging written
        print(f"job: killed inside the background save of checkpoint-{step}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    background_save._Replay.save_state = save_state


class TrainEnded(Callback):
    """Registered after braeburn's own callbacks: its on_train_end runs after theirs."""

    def __init__(self) -> None:
        self.reached = threading.Event()

    def on_train_end(self, trainer, state) -> None:
        self.reached.set()


def sigterm_inside_final_save(step: int, train_ended: TrainEnded) -> None:
    original = background_save._Replay.save_state

    def save_state(self, output_dir):
        if output_dir.endswith(f"checkpoint-{step}.tmp"):
            assert train_ended.reached.wait(timeout=60), "on_train_end never ran"
            print(f"job: SIGTERM inside the background save of checkpoint-{step}", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, output_dir)

    background_save._Replay.save_state = save_state


def main(argv: list[str]) -> None:
    output_dir, result = argv[0], argv[1]
    torch.manual_seed(0)
    x, y = torch.randn(96, 6), torch.randint(0, 3, (96,))
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    if "--kill-in-save" in argv:
        kill_inside_background_save(int(argv[argv.index("--kill-in-save") + 1]))
    train_ended = TrainEnded()
    if "--sigterm-in-final-save" in argv:
        sigterm_inside_final_save(24, train_ended)
    config = TrainingConfig(output_dir=output_dir, use_cpu=True, per_device_train_batch_size=8, num_train_epochs=2,
                            learning_rate=1e-2, logging_steps=4, save_strategy="steps", save_steps=3, seed=3,
                            save_in_background="--foreground" not in argv,
                            resume_from_checkpoint="latest" if "--resume" in argv else None)
    trainer = Trainer(model, config, train_dataset=TensorDataset(x, y), loss_fn=torch.nn.functional.cross_entropy,
                      callbacks=[train_ended])
    trainer.train()
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, result)


if __name__ == "__main__":
    main(sys.argv[1:])
