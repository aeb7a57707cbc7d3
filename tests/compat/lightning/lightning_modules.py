"""Duck-typed LightningModules (plain nn.Modules: Lightning is not needed), the hand-written loop they must match,
and a listing of the files a run leaves."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset


def regression_data(samples: int = 24, batch_size: int = 4, seed: int = 0) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(samples, 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


class Regression(torch.nn.Module):
    """A LightningModule's methods on a plain nn.Module; ``schedule`` picks configure_optimizers' shape."""

    def __init__(self, schedule: str = "epoch", lr: float = 0.05):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.schedule, self.lr = schedule, lr
        self.losses: list[float] = []
        self.calls: list[str] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.losses.append(loss.item())
        self.log("train_mse", loss)
        self.log("train_mse_epoch", loss, on_step=False, on_epoch=True)
        return {"loss": loss} if self.schedule == "dict-return" else loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_mse", torch.nn.functional.mse_loss(self.layer(x), y), batch_size=len(x))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        if self.schedule == "none":
            return optimizer
        if self.schedule == "bare":
            return [optimizer], [scheduler]
        interval = "step" if self.schedule == "step" else "epoch"
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": interval}}

    def on_train_start(self):
        self.calls.append("on_train_start")

    def on_train_epoch_start(self):
        self.calls.append(f"on_train_epoch_start:{self.current_epoch}")

    def on_train_epoch_end(self):
        self.calls.append(f"on_train_epoch_end:{self.global_step}")

    def on_validation_epoch_end(self):
        self.calls.append("on_validation_epoch_end")

    def on_train_end(self):
        self.calls.append("on_train_end")


def hand_loop(loader: DataLoader, epochs: int, interval: str, accumulate: int = 1, clip: float = 0.0) -> list[float]:
    """The same recipe written out: SGD(momentum), StepLR stepped per epoch or per optimizer step."""
    model = Regression()
    optimizer = torch.optim.SGD(model.parameters(), lr=model.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    losses = []
    for _ in range(epochs):
        for index, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model.layer(x), y)
            losses.append(loss.item())
            (loss / accumulate).backward()
            if (index + 1) % accumulate == 0 or index + 1 == len(loader):
                if clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                optimizer.zero_grad()
                if interval == "step":
                    scheduler.step()
        if interval == "epoch":
            scheduler.step()
    return losses


def listing(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root`` (relative path): its sha256 and inode, so that a file replaced by another with the
    same bytes shows too."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            found[path.relative_to(root).as_posix()] = (hashlib.sha256(path.read_bytes()).hexdigest(),
                                                        path.stat().st_ino)
    return found
