"""Your own training loop, on the best device here, with braeburn's Accelerator.

    python examples/custom_loop.py                 # CUDA, MPS or CPU, whichever is best here
    braeburn launch --cpu --num-processes 2 examples/custom_loop.py   # two CPU processes (gloo)
    braeburn check examples/custom_loop.py         # the accelerator's numbers against the CPU's

A small classifier on a synthetic task (is the sum of the first four features positive?) that
trains in seconds anywhere; the loop is the one docs/accelerator.md walks through.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from braeburn import Accelerator


def data(samples: int = 4096, features: int = 16):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=generator)
    y = (x[:, :4].sum(dim=1) > 0).long()
    split = samples * 7 // 8
    return TensorDataset(x[:split], y[:split]), TensorDataset(x[split:], y[split:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--checkpoint", default=None, help="save the state here after each epoch")
    args = parser.parse_args()

    accelerator = Accelerator(gradient_accumulation_steps=2, seed=0)
    train_set, valid_set = data()
    train = DataLoader(train_set, batch_size=64, shuffle=True)
    valid = DataLoader(valid_set, batch_size=256)
    model = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(train) // 2)
    model, optimizer, train, valid, scheduler = accelerator.prepare(model, optimizer, train, valid, scheduler)

    for epoch in range(args.epochs):
        model.train()
        for inputs, labels in train:  # batches arrive on accelerator.device
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(inputs), labels)
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for inputs, labels in valid:
                predictions, labels = accelerator.gather_for_metrics((model(inputs).argmax(dim=1), labels))
                correct += int((predictions == labels).sum())
                total += labels.numel()
        accelerator.print(f"epoch {epoch}: loss {loss.item():.3f}, accuracy {correct / total:.3f} "
                          f"on {accelerator.device} ({accelerator.precision})")
        if args.checkpoint:
            accelerator.save_state(args.checkpoint)
    accelerator.end_training()


if __name__ == "__main__":  # needed where DataLoader workers start by spawn (macOS)
    main()
