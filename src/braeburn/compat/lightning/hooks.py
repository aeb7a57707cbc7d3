"""braeburn.lightning.Trainer's bridge to a LightningModule's hooks: Lightning's training hooks called from braeburn's
callback moments (LightningHooks), and the module bound to its Trainer for a run (bound: self.log, self.trainer ...),
refusing up front the hooks braeburn.lightning never calls."""

from __future__ import annotations

import math
from typing import Any

import torch

from ...trainer.callbacks import Callback
from .attributes import ModuleAttributes as _LightningAttributes
from .checks import LightningArgumentError
from .module import HOOKS, unsupported_hooks


class LightningHooks(Callback):
    """Lightning's training hooks, called from braeburn's callback moments; none of them where a resumed run has
    nothing left to train (Lightning calls only on_fit_start and on_fit_end then)."""

    def __init__(self, lightning: Any, module: torch.nn.Module):
        self.lightning, self.module = lightning, module
        self.nothing_to_train = False
        self.epoch_finished = False  # the epoch ending now ran all its batches (not stopped by max_steps)
        self.replayed = False  # the epoch now is one a resumed run had finished (no batch left in it)

    def on_train_begin(self, trainer: Any, state: Any) -> None:
        self.nothing_to_train = state.global_step >= state.max_steps
        trainer.sanity_check()  # (a resumed run's too, as Lightning's, which skips it only resuming mid-validation)
        self.lightning.current_epoch = math.floor(state.epoch)  # a resumed run's, from on_train_start on (Lightning's)
        if not self.nothing_to_train:
            self.lightning._call("on_train_start", self.module)

    def on_epoch_begin(self, trainer: Any, state: Any) -> None:
        trainer.batch_idx = 0
        self.lightning.current_epoch = math.floor(state.epoch)
        # a run resumed at an epoch's end goes through that epoch again with no batch left: no hook of it, as Lightning
        self.replayed = state.epochs_ended > trainer.train_loader_epoch
        if not (self.nothing_to_train or self.replayed):
            self.lightning._call("on_train_epoch_start", self.module)

    def on_epoch_end(self, trainer: Any, state: Any) -> None:
        """(The core calls this before its epoch-end evaluation; Lightning validates first: train_epoch_end is
        called by the run's _evaluate_and_save, after the validation.)"""
        self.epoch_finished = state.epochs_ended > self.lightning.current_epoch and not self.replayed

    def train_epoch_end(self, trainer: Any) -> None:
        """on_train_epoch_end of the callbacks and the module, then the epoch's means logged (those of training_step
        in callback_metrics before the hooks run, as Lightning's)."""
        if self.nothing_to_train:
            return
        logger = self.lightning.logger
        means = logger.take_epoch_means()  # self.log(..., on_epoch=True) in training_step
        logger.epoch_end = True  # what on_train_epoch_end logs is the epoch's, as Lightning's defaults there
        try:
            self.lightning._call("on_train_epoch_end", self.module)
        finally:
            logger.epoch_end = False
        means.update(logger.take_epoch_means())
        if means:
            trainer.log(means)

    def on_train_end(self, trainer: Any, state: Any) -> None:
        self.lightning.current_epoch = math.ceil(state.epoch)  # before on_train_end, which reads it as Lightning's
        if not self.nothing_to_train:
            self.lightning._call("on_train_end", self.module)


class bound:
    """For the run, the module's class gains _LightningAttributes (self.log, self.trainer ...); restored after."""

    def __init__(self, module: torch.nn.Module, lightning: Any):
        hooks = unsupported_hooks(module) + [hook for c in lightning.callbacks for hook in unsupported_hooks(c)]
        errors = [f"{name} is defined, but braeburn.lightning never calls it (it calls {', '.join(HOOKS)}): move "
                  "its work into one of those, or port the loop to braeburn's Accelerator" for name in hooks]
        if getattr(module, "automatic_optimization", True) is False:
            errors.append(f"{type(module).__name__}.automatic_optimization is False: manual optimization is not "
                          "supported; write the loop with braeburn's Accelerator (prepare, backward, step)")
        if errors:
            raise LightningArgumentError(errors)
        self.module, self.lightning, self.original = module, lightning, type(module)

    def __enter__(self) -> None:
        cls = self.original
        self.module.__class__ = type(cls.__name__, (_LightningAttributes, cls), {"__module__": cls.__module__})
        self.module.__dict__["_braeburn_lightning"] = self.lightning

    def __exit__(self, *exc: Any) -> None:
        self.module.__class__ = self.original
        self.module.__dict__.pop("_braeburn_lightning", None)
