"""Lightning scripts as Lightning's docs write them, run under the real Lightning with and without braeburn's
extension (``callbacks=[Braeburn()]``), and what a user can see of each run (losses, metrics, files, results)."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("pytorch_lightning")

from tests.compat._tensorboard import shown, tensorboard_view  # noqa: E402
from tests.compat.catalogue import Observation  # noqa: E402


def classification_data(samples: int = 40, batch_size: int = 8, seed: int = 0, shuffle: bool = False) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 6, generator=generator)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=shuffle)


class Classifier(pl.LightningModule):
    """A small LightningModule with every step Lightning's docs show: training (logged per step and per epoch),
    validation, test and predict; ``dropout`` > 0 draws random numbers in each training step."""

    def __init__(self, lr: float = 0.1, dropout: float = 0.0, scheduler: str = "none"):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Dropout(dropout),
                                       torch.nn.Linear(16, 2))
        self.losses: list[float] = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.losses.append(loss.item())
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def _accuracy(self, batch):
        x, y = batch
        logits = self(x)
        return torch.nn.functional.cross_entropy(logits, y), (logits.argmax(-1) == y).float().mean()

    def validation_step(self, batch, batch_idx):
        loss, acc = self._accuracy(batch)
        self.log_dict({"val_loss": loss, "val_acc": acc})

    def test_step(self, batch, batch_idx):
        loss, acc = self._accuracy(batch)
        self.log_dict({"test_loss": loss, "test_acc": acc})

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch[0]).argmax(-1)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        if self.hparams.scheduler == "none":
            return optimizer
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.hparams.scheduler,
                                                         "monitor": "val_loss"}}


def quiet_trainer(root: Path, extension: bool, **kwargs: Any) -> Any:
    """Lightning's Trainer on the CPU, quiet, writing under ``root``; with braeburn's extension when asked."""
    callbacks = list(kwargs.pop("callbacks", []))
    if extension:
        from braeburn.lightning import Braeburn

        callbacks.append(Braeburn())
    options = dict(accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
                   default_root_dir=str(root), callbacks=callbacks)
    options.update(kwargs)
    return pl.Trainer(**options)


def files_under(root: Path) -> list[str]:
    """Every file a run wrote, relative to ``root`` (hparams and checkpoints by name, not content; a TensorBoard event
    file's name with its time and the writer's count named, as they differ between any two runs)."""
    return sorted(shown(path.relative_to(root).as_posix()) for path in root.rglob("*") if path.is_file())


def csv_metrics(root: Path) -> list[str]:
    """The CSVLogger's metrics.csv rows of every version under ``root``, as written."""
    return [line for path in sorted(root.rglob("metrics.csv")) for line in path.read_text().splitlines()]


def tensors(value: Any) -> Any:
    """Metrics as Python numbers (tensors compared bitwise as floats)."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {key: tensors(item) for key, item in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [tensors(item) for item in value]
    return value


def observe(root: Path, extension: bool, script: Callable[[Path, bool], dict[str, Any]]) -> tuple[Observation, str]:
    """Run ``script(root, extension)`` with a fixed seed; what it shows, and what it printed."""
    pl.seed_everything(0, verbose=False)
    printed = io.StringIO()
    observation = Observation()
    with contextlib.redirect_stdout(printed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            extra = script(root, extension)
        except Exception as error:  # noqa: BLE001  (an idiom's outcome: the same error both ways)
            observation.exit = f"{type(error).__name__}: {error}"
            extra = {}
    observation.losses = extra.pop("losses", [])
    observation.metrics = tensors(extra.pop("metrics", {}))
    observation.files = files_under(root) if root.exists() else []
    if root.exists() and any(root.rglob("events.out.tfevents.*")):  # Lightning's default logger with tensorboard
        extra["tensorboard"] = tensorboard_view(root)
    observation.extra = tensors(extra)
    return observation, printed.getvalue()


def both(tmp_path: Path, script: Callable[[Path, bool], dict[str, Any]]) -> tuple[Observation, Observation, str]:
    """The script under plain Lightning and under Lightning with braeburn's extension, each in its own folder."""
    plain, _ = observe(tmp_path / "lightning", False, script)
    ours, printed = observe(tmp_path / "braeburn", True, script)
    return plain, ours, printed
