"""braeburn.lightning.Trainer's refusals: the one error it raises on purpose (every problem, each with its fix),
and the checks of a fit's data and scheduler that run before anything is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, RandomSampler

from ...trainer.scheduler_interval import is_plateau
from .callbacks import OWN_TRAINER


class LightningArgumentError(ValueError):
    """Lightning Trainer arguments (or module hooks) braeburn does not do: every one, with its fix."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("braeburn.lightning.Trainer cannot do what was asked:\n  - " + "\n  - ".join(errors))


class LightningAttributeError(LightningArgumentError, AttributeError):
    """A name of Lightning's Trainer that braeburn.lightning.Trainer lacks: the refusal, and an AttributeError too, so
    that hasattr() and getattr(trainer, name, default) in code that probes a Trainer answer as for any missing name."""


def not_here(what: str, why: str) -> LightningArgumentError:
    return LightningArgumentError([f"{what} is not in braeburn.lightning.Trainer (in Lightning it {why}); "
                                   f"{OWN_TRAINER}"])


def check_sized(loader: Any, argument: str, hook: str, call: str = "fit") -> None:
    """Refuse, before anything is written, a loader braeburn cannot count: one over an IterableDataset (a stream,
    which Lightning's Trainer takes), or anything else without a length."""
    if loader is None:
        return
    dataset = getattr(loader, "dataset", None) if isinstance(loader, DataLoader) else loader
    if isinstance(dataset, IterableDataset):
        what = f"a DataLoader over {type(dataset).__name__}, an IterableDataset"
    else:
        try:
            len(loader)
            return
        except (TypeError, NotImplementedError) as error:
            what = f"a {type(loader).__name__} without a length ({error})"
    raise LightningArgumentError([
        f"{call}({argument}=...) (or the module's {hook}) is {what}: braeburn.lightning counts the batches of an "
        "epoch, shards them over the processes and resumes mid-epoch by sample index, which a stream has none of. "
        "Give the DataLoader a map-style Dataset (with __len__ and __getitem__), or run this script with "
        "Lightning's own Trainer (from lightning import Trainer)"])


def check_unshuffled(loader: Any) -> None:
    """Refuse a shuffled training DataLoader: Lightning draws its order from torch's random state as the run goes,
    braeburn from its own seeded order (so that a resumed run sees the same batches): the batches would differ."""
    if isinstance(loader, DataLoader) and isinstance(loader.sampler, RandomSampler):
        raise LightningArgumentError([
            "fit(train_dataloaders=...) is shuffled (DataLoader(shuffle=True)): Lightning's Trainer takes each "
            "epoch's order from torch's random state as the run goes, braeburn.lightning.Trainer from its own seeded "
            "order (so that a resumed run sees the same batches), so the batches and the losses would differ from "
            f"the first step; pass shuffle=False, or {OWN_TRAINER}"])


def check_interval(interval: float, batches: int, val_loader: Any) -> None:
    """An int val_check_interval past the epoch's batches: Lightning's ValueError, refused the same."""
    if val_loader is not None and isinstance(interval, int) and interval > batches:
        raise LightningArgumentError([
            f"Trainer(val_check_interval={interval}) is more than the {batches} training batches of an epoch, so no "
            "validation would run (Lightning raises a ValueError for it too): pass val_check_interval <= "
            f"{batches}, or a fraction of the epoch such as 0.5"])


def check_plateau(scheduler: Any, val_loader: Any, options: Any) -> None:
    inner = scheduler.get("scheduler") if isinstance(scheduler, Mapping) else scheduler
    if is_plateau(inner) and val_loader is None:
        raise LightningArgumentError([
            "configure_optimizers() returned a ReduceLROnPlateau, which braeburn steps after each validation, on "
            "the value its 'monitor' names (logged with self.log in validation_step); fit() has no validation "
            "data (or Trainer(limit_val_batches=0)), so its learning rate would never change. Pass val_dataloaders= "
            "to fit() (or define val_dataloader()), or return another scheduler"])
    if is_plateau(inner) and options.val_every_n_epochs > 1:
        raise LightningArgumentError([
            f"configure_optimizers() returned a ReduceLROnPlateau with Trainer(check_val_every_n_epoch="
            f"{options.val_every_n_epochs}): Lightning steps it at the end of every epoch on the monitored value, "
            "which an epoch without validation does not have (Lightning raises there, or steps on an earlier epoch's "
            f"value); pass check_val_every_n_epoch=1, or {OWN_TRAINER}"])
    if is_plateau(inner) and options.val_check_interval != 1.0:
        raise LightningArgumentError([
            f"configure_optimizers() returned a ReduceLROnPlateau with Trainer(val_check_interval="
            f"{options.val_check_interval!r}): braeburn steps it after each validation, Lightning at its interval "
            f"(once an epoch by default) on the latest value; remove val_check_interval, or {OWN_TRAINER}"])


__all__ = ["LightningArgumentError", "check_interval", "check_plateau", "check_sized", "check_unshuffled", "not_here"]
