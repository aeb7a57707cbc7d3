"""A small Trainer job for the distributed tests (tests/distributed/test_distributed_trainer.py), run by torchrun
(`braeburn launch`) with 1 or 2 processes, on the CPU with gloo or on GPUs with NCCL.

    python tests/distributed/distributed_job.py OUT RUN [RUN...]       RUN = name:strategy:batch[:resume[:kill_at]]

Each RUN trains the same tiny residual MLP for MAX_STEPS optimizer steps (2 micro-batches of
`batch` samples per process per step), checkpointing every SAVE_STEPS, and rank 0 writes
OUT/<name>.pt with the final parameters, the logged loss curve and the evaluation metrics.
`resume` is a checkpoint folder (relative to OUT) to start from; `kill_at` makes rank 1 SIGKILL
itself at that step on the first attempt (TORCHELASTIC_RESTART_COUNT=0) only.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from braeburn import Trainer, TrainingConfig
from braeburn.distributed import fsdp
from braeburn.distributed.elastic import restart_count
from braeburn.trainer.callbacks import Callback

MAX_STEPS, SAVE_STEPS, ACCUMULATION = 18, 4, 2  # 96 samples / 8 per step: 12 steps an epoch, so 1.5 epochs


class Block(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(self.norm(x))))


class Net(nn.Module):
    """Blocks in a ModuleList hold most parameters: FSDP makes each block one unit."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)  # the same initial weights in every process and every run
        self.inp, self.head = nn.Linear(6, 16), nn.Linear(16, 1)
        self.blocks = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h).sum(-1)  # not squeeze(): FSDP warns about a module returning a view


def dataset(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=generator)
    return TensorDataset(x, torch.sin(x @ torch.linspace(-1, 1, 6)))


def count_and_mse(prediction) -> dict[str, float]:
    """Computed from gathered predictions: padded duplicates would change both numbers."""
    return {"n": float(len(prediction.label_ids)),
            "mse": float(((prediction.predictions - prediction.label_ids) ** 2).mean())}


class KillRank1(Callback):
    """SIGKILL (no cleanup, no save) on rank 1 at ``step``, only in the first attempt of the job."""

    def __init__(self, step: int | None):
        self.step = step

    def on_step_end(self, trainer, state) -> None:
        if (self.step is not None and state.global_step == self.step and restart_count() == 0
                and trainer.accelerator.process_index == 1):
            os.kill(os.getpid(), signal.SIGKILL)


def full_parameters(model: nn.Module) -> list[torch.Tensor]:
    """Whole parameters on the CPU (FSDP shards are gathered: a collective, so every rank calls it)."""
    return [fsdp.full_value(p.detach()).cpu().clone() for p in model.parameters()]


def run(out: Path, name: str, strategy: str, batch: int, resume: str | None, kill_at: int | None) -> None:
    config = TrainingConfig(
        output_dir=str(out / name), per_device_train_batch_size=batch, per_device_eval_batch_size=2,
        gradient_accumulation_steps=ACCUMULATION, max_steps=MAX_STEPS, learning_rate=0.02, weight_decay=0.01,
        warmup_steps=2, logging_steps=1, eval_strategy="steps", eval_steps=9, save_strategy="steps",
        save_steps=SAVE_STEPS, seed=0, mixed_precision="no", compile="false", strategy=strategy,
        resume_from_checkpoint=str(out / resume) if resume else None)
    trainer = Trainer(Net(), config, train_dataset=dataset(96, 0), eval_dataset=dataset(11, 1),
                      loss_fn=nn.functional.mse_loss, compute_metrics=count_and_mse, callbacks=[KillRank1(kill_at)])
    trainer.train()
    accelerator = trainer.accelerator
    result = {"params": full_parameters(trainer.model), "processes": accelerator.num_processes,
              "strategy": accelerator.plan.strategy, "restarts": restart_count(),
              "losses": [(r["step"], r["loss"]) for r in trainer.state.log_history if "loss" in r],
              "evals": [{k: v for k, v in r.items() if not k.endswith(("runtime", "per_second"))}
                        for r in trainer.state.log_history if "eval_n" in r],
              "checkpoints": sorted(p.name for p in (out / name).glob("checkpoint-*")),
              "sharded": any((out / name).glob("checkpoint-*/sharded"))}
    if accelerator.is_main_process:
        torch.save(result, out / f"{name}.pt")


def main(argv: list[str]) -> None:
    from braeburn import Accelerator

    # Joins the process group first (gloo or nccl, as the device says), so that it outlives the
    # Trainers below: each of them finds it open and leaves it open.
    keeper = Accelerator(mixed_precision="no")
    out = Path(argv[0])
    for spec in argv[1:]:
        name, strategy, batch, *rest = spec.split(":")
        resume = rest[0] if rest and rest[0] else None
        kill_at = int(rest[1]) if len(rest) > 1 else None
        run(out, name, strategy, int(batch), resume, kill_at)
    keeper.end_training()


if __name__ == "__main__":
    main(sys.argv[1:])
