"""What a user's code reads or sets on ``braeburn.lightning.Trainer`` that Lightning's Trainer has: each of Lightning's
names it does not hold is refused by name (never a bare AttributeError), and ``trainer.should_stop = True`` from a
validation or epoch-end hook stops the run there, as Lightning's Trainer stops it. And what a LightningModule reads
from itself during a run (``self.trainer``, ``self.log``, ``self.optimizers()``, ``self.print`` ...).

Lightning is not imported: its Trainer's public names (2.6) are listed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .checks import LightningArgumentError, LightningAttributeError, not_here

# Lightning's Trainer's public attributes, methods and properties (pytorch-lightning 2.6), those braeburn.lightning's
# Trainer lacks reaching __getattr__.
LIGHTNING_NAMES = frozenset((
    "accelerator", "accumulate_grad_batches", "barebones", "check_val_every_n_epoch", "ckpt_path", "datamodule",
    "device_ids", "distributed_sampler_kwargs", "early_stopping_callbacks", "enable_autolog_hparams",
    "enable_validation", "evaluating", "fast_dev_run", "fit_loop", "global_rank", "gradient_clip_algorithm",
    "gradient_clip_val", "init_module", "interrupted", "is_last_batch", "lightning_module", "limit_predict_batches",
    "limit_test_batches", "limit_train_batches", "limit_val_batches", "local_rank", "log_every_n_steps",
    "lr_scheduler_configs", "min_epochs", "min_steps", "model", "node_rank", "num_devices", "num_nodes",
    "num_predict_batches", "num_sanity_val_batches", "num_sanity_val_steps", "num_test_batches",
    "num_training_batches", "num_val_batches", "optimizers", "overfit_batches", "precision", "precision_plugin",
    "predict_dataloaders", "predict_loop", "predicting", "print", "profiler", "progress_bar_callback",
    "progress_bar_metrics", "received_sigterm", "reload_dataloaders_every_n_epochs", "scaler", "state",
    "test_dataloaders", "test_loop", "testing", "train_dataloader", "training", "val_check_batch",
    "val_check_interval", "val_dataloaders", "validate_loop", "validating"))
HAS = ("current_epoch, global_step, callback_metrics, logged_metrics, should_stop, sanity_checking, max_epochs, "
       "max_steps, estimated_stepping_batches, world_size, is_global_zero, device, log_dir, default_root_dir, "
       "checkpoint_callback, callbacks, logger")
# The hooks from which trainer.should_stop = True stops the run as Lightning's does (after this epoch's end, or at
# the validation part way through an epoch); Lightning's EarlyStopping sets it from the validation's end too.
STOP_HOOKS = ("on_validation_end", "on_validation_epoch_end", "on_train_epoch_end")


class LightningAttributes:
    """A mixin of braeburn.lightning.Trainer: Lightning's names it lacks, refused; ``should_stop``."""

    _hook: str | None = None  # the Lightning hook being called now (set by Trainer._call)

    def __getattr__(self, name: str) -> Any:
        if name in LIGHTNING_NAMES:
            refusal = not_here(f"trainer.{name}", f"is an attribute of Lightning's Trainer; braeburn.lightning.Trainer "
                               f"has {HAS}")
            raise LightningAttributeError(refusal.errors)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def should_stop(self) -> bool:
        run = self._run
        return bool(run is not None and run.state.should_stop)

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        if not value:
            if self.should_stop:
                raise LightningArgumentError(["trainer.should_stop = False after it was set True: braeburn.lightning "
                                              "does not take a stop back; set it True only once the run should stop"])
            return
        if self._run is None or self._hook not in STOP_HOOKS or self.sanity_checking:
            where = "during the sanity check" if self.sanity_checking else f"in {self._hook or 'no hook'}"
            raise LightningArgumentError([
                f"trainer.should_stop = True {where}: braeburn.lightning stops a run as Lightning does only when it is "
                f"set in {', '.join(STOP_HOOKS)} (a callback's or the module's, after training began); set it there, "
                "or bound the run with Trainer(max_epochs=N, max_steps=N)"])
        self._run.state.request_stop("trainer.should_stop = True")


class ModuleAttributes:
    """What a LightningModule reads from itself during a run: put in front of the module's class for the run."""

    @property
    def trainer(self) -> Any:
        return self.__dict__["_braeburn_lightning"]

    @property
    def current_epoch(self) -> int:
        return self.trainer.current_epoch

    @property
    def global_step(self) -> int:
        return self.trainer.global_step

    @property
    def device(self) -> torch.device:
        return self.trainer.device

    @property
    def logger(self) -> None:
        """None with Trainer(logger=False), as Lightning's; Lightning's logger object is not here: refused."""
        if self.trainer._no_logger:
            return None
        raise not_here("self.logger (in the LightningModule)", "is the Trainer's logger, a CSVLogger or "
                       "TensorBoardLogger; braeburn writes every self.log value to metrics.jsonl in trainer.log_dir")

    @property
    def loggers(self) -> list:
        return [] if self.trainer._no_logger else [self.logger]

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Lightning's self.print: printed by the main process only."""
        if self.trainer.is_global_zero:
            print(*args, **kwargs)

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizer configure_optimizers() returned (Lightning wraps it in a LightningOptimizer, whose
        param_groups and state are the same)."""
        return self._trainer_part(0, "self.optimizers()")

    def lr_schedulers(self) -> Any:
        """The scheduler configure_optimizers() returned (None without one), as Lightning's."""
        scheduler = self._trainer_part(1, "self.lr_schedulers()")
        return scheduler.get("scheduler") if isinstance(scheduler, Mapping) else scheduler

    def _trainer_part(self, index: int, call: str) -> Any:
        part = self.trainer._optimizers
        if part[0] is None:
            raise LightningArgumentError([f"{call} outside fit(): there is no optimizer yet (Lightning has none "
                                          "either); call it from training_step or a hook of fit()"])
        return part[index]

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        self.trainer.logger.log(name, value, *args, **kwargs)

    def log_dict(self, values: Mapping[str, Any], *args: Any, **kwargs: Any) -> None:
        self.trainer.logger.log_dict(values, *args, **kwargs)


__all__ = ["LIGHTNING_NAMES", "LightningAttributes", "ModuleAttributes"]
