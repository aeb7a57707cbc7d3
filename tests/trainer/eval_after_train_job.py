"""`train()` then `evaluate()` and `predict()` on every process (the README's pattern), for
tests/trainer/test_no_harm_resume.py. Run by torchrun with 2 processes on the CPU (gloo):

    python tests/trainer/eval_after_train_job.py OUT

Rank 0 writes OUT/result.pt with the metrics and the prediction count after train() ended.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from braeburn import Trainer, TrainingConfig

SAMPLES = 11  # odd: one process's share (6) differs from the whole (11)


def dataset(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(-1))


def count(prediction) -> dict[str, float]:
    return {"n": float(len(prediction.label_ids))}


def main(out: Path) -> None:
    torch.manual_seed(0)
    config = TrainingConfig(output_dir=str(out / "run"), per_device_train_batch_size=4, per_device_eval_batch_size=2,
                            max_steps=2, save_strategy="no", mixed_precision="no", compile="false",
                            disable_tqdm=True)
    trainer = Trainer(nn.Linear(4, 1), config, train_dataset=dataset(16, 0), eval_dataset=dataset(SAMPLES, 1),
                      loss_fn=lambda outputs, labels: nn.functional.mse_loss(outputs.squeeze(-1), labels),
                      compute_metrics=count)
    trainer.train()
    metrics = trainer.evaluate()
    predicted = trainer.predict(dataset(SAMPLES, 2))
    if trainer.is_main_process:
        torch.save({"eval_n": metrics["eval_n"], "predictions": len(predicted.predictions),
                    "test_n": predicted.metrics["test_n"]}, out / "result.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
