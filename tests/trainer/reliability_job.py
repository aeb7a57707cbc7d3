"""A Trainer run with gradient accumulation that hurts itself on request (tests/trainer/test_reliability_faults.py).

    python reliability_job.py OUTPUT_DIR RESULT_FILE [--resume] [--kill-at-step N]
        [--kill-mid-accumulation-after N] [--kill-after-save N] [--kill-inside-save N] [--full-disk FROM:TO]
        [--full-determinism]

It trains on the device BRAEBURN_DEVICE names (the tests pin cpu; the GPU lane asks for cuda).

120 samples, batches of 8, 2 micro-batches per optimizer step: 8 steps an epoch, 32 in 4 epochs,
a checkpoint every 5 steps and at the end. Every fault is real: SIGKILL sent to this process (no
chance to clean up), and a file-size limit (RLIMIT_FSIZE, what a full disk looks like to a writer)
that makes the save of a checkpoint fail with EFBIG. Writes the final parameters to RESULT_FILE.
"""

from __future__ import annotations

import io
import os
import resource
import signal
import sys

import torch
from torch.utils.data import TensorDataset, default_collate

import braeburn.checkpoints.state as state_io
from braeburn.trainer import Callback, Trainer, TrainingConfig

FULL_DISK_BYTES = 8192  # below the RNG-state file (~16 KB): every save fails, the metrics log still fits


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


class Faults(Callback):
    def __init__(self, argv: list[str]):
        self.kill_at = int(option(argv, "--kill-at-step") or -1)
        self.kill_after_save = int(option(argv, "--kill-after-save") or -1)
        full = option(argv, "--full-disk")
        self.full_from, self.full_to = map(int, full.split(":")) if full else (-1, -1)

    def on_step_end(self, trainer, state):
        if state.global_step == self.kill_at:
            die()
        if state.global_step == self.full_from:  # from now on no file may grow past FULL_DISK_BYTES
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_DISK_BYTES, resource.RLIM_INFINITY))
            print(f"job: disk full after step {state.global_step}", flush=True)
        if state.global_step == self.full_to:
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            print(f"job: disk freed after step {state.global_step}", flush=True)

    def on_save(self, trainer, state, checkpoint_dir):
        if state.global_step == self.kill_after_save:
            print(f"job: killed right after saving {checkpoint_dir}", flush=True)
            die()


def tear_saves_at(step: int, trainer: Trainer) -> None:
    """SIGKILL in the middle of writing model.safetensors of checkpoint-``step``: half its bytes are on disk."""
    original = state_io.save_model_state

    def save_model_state(state, directory, index, model=None):
        if trainer.state.global_step == step:
            with state_io.capture_writes() as files:  # the bytes the save would write
                original(state, directory, index, model)
            (name, data), = files.items()
            with open(directory / name, "wb") as handle:
                handle.write(data[: len(data) // 2])
                handle.flush()
                os.fsync(handle.fileno())
            print(f"job: killed while writing {directory / name}", flush=True)
            die()
        return original(state, directory, index, model)

    state_io.save_model_state = save_model_state  # the Accelerator looks it up on every save


def main(argv: list[str]) -> None:
    output_dir, result = argv[0], argv[1]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(120, 8)
    y = (x[:, :4].sum(1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 2))
    kill_mid = int(option(argv, "--kill-mid-accumulation-after") or -1)
    trainer: Trainer

    def collate(samples):
        # Gradients present while a batch is fetched = half-way through an accumulation window
        # (the Trainer sets them to None after every optimizer step).
        if 0 <= kill_mid <= trainer.state.global_step and any(p.grad is not None for p in model.parameters()):
            print(f"job: killed mid-accumulation after step {trainer.state.global_step}", flush=True)
            die()
        return default_collate(samples)

    config = TrainingConfig(output_dir=output_dir, per_device_train_batch_size=8, gradient_accumulation_steps=2,
                            num_train_epochs=4, learning_rate=1e-2, weight_decay=0.01, warmup_steps=3,
                            logging_steps=4, save_strategy="steps", save_steps=5, seed=7,
                            save_in_background=False,  # the faults are timed against saves on the loop's thread
                            full_determinism="--full-determinism" in argv,
                            resume_from_checkpoint="latest" if "--resume" in argv else None)
    trainer = Trainer(model, config, train_dataset=TensorDataset(x, y), collate_fn=collate,
                      loss_fn=torch.nn.functional.cross_entropy, callbacks=[Faults(argv)])
    if option(argv, "--kill-inside-save"):
        tear_saves_at(int(option(argv, "--kill-inside-save")), trainer)
    trainer.train()
    torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, result)


if __name__ == "__main__":
    main(sys.argv[1:])
