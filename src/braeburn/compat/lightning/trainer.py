"""A LightningModule trained by braeburn's Trainer, with Lightning's ``Trainer(...).fit(...)`` spelled as there.

``braeburn.lightning.Trainer(accelerator="mps", devices=1, max_epochs=3).fit(module, train_loader, val_loader)``
drives any nn.Module with ``training_step`` and ``configure_optimizers`` (a real ``lightning.LightningModule`` or a
duck-typed one; Lightning is never imported). It maps onto braeburn's own Trainer: the module is wrapped in one
small nn.Module whose forward is ``training_step`` (so DDP and autocast wrap it as they wrap any model), the loss
goes through the Trainer's ``_batch_loss`` hook, validation through ``_evaluation_step`` and ``_evaluation_output``,
and the scheduler through the Trainer's Lightning scheduler dicts (scheduler_interval.py). Device, precision, DDP,
accumulation, clipping, metrics.jsonl, progress and checkpoints are the Trainer's. What is and is not covered:
docs/migrating.md, "Lightning".
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from ...checkpoints import state as state_io
from ...distributed import elastic
from ...distributed import process_group as pg
from ...errors import debug_requested, is_user_error, note_once
from ...plan.option_spelling import spelled
from ...trainer.checkpoint import CheckpointManager
from ...trainer.config import ConfigError, CoreTrainingConfig as TrainingConfig
from ...trainer.loop import CoreTrainer as BraeburnTrainer
from ...trainer.outputs import EvalLoopOutput
from ...trainer.phase_clock import EVALUATION
from ...trainer.write_faults import OutputDirError
from ...warn import warn
from ..accelerate.accelerator import Accelerator, accumulation_as_plugin
from ..accelerate.checkpointing import AccelerateCheckpointing
from .attributes import LightningAttributes
from .checks import (LightningArgumentError, check_interval, check_plateau, check_sized, check_unshuffled,
                     not_here)
from .ckpt_files import CheckpointSaving, CkptFiles, epoch_ckpt_of
from .hooks import LightningHooks as _LightningHooks, bound as _bound
from .module import StepLogger, batch_size_of, split_optimizers, step_loss
from .options import lightning_options
from .runs import (CheckpointPathError, check_ckpt_weights, checkpoint_to_resume, claim_run_folder, job_identity,
                   logs_folder, restarted_run_folder)
from .spelling import LightningSpelling


_PACKAGE = Path(__file__).resolve().parents[2]  # braeburn's own code: src/braeburn
_FITS = itertools.count(1)  # the fit() calls of this process that made a run folder: a restart replays them


# Nobody asks for compile=false here: it is this path's default, and the summary says so.
NO_COMPILE_REASON = ("compile=false, braeburn.lightning's default: Lightning's Trainer does not compile a module "
                     "by itself")


class Trainer(LightningAttributes, CheckpointSaving):
    """Lightning's Trainer, the common arguments (see lightning_options.py), run by braeburn's Trainer."""

    def __init__(self, **kwargs: Any):
        launched = os.environ.get("LOCAL_WORLD_SIZE") if "WORLD_SIZE" in os.environ else None
        options, errors = lightning_options(kwargs, int(launched) if launched else None)
        if errors:
            raise LightningArgumentError(errors)
        self.options = options
        # Lightning's default_root_dir: the working folder when not given (so log_dir is a full path, as there)
        options.root = os.path.normpath(os.path.expanduser(kwargs.get("default_root_dir") or os.getcwd()))
        self.callbacks = options.callbacks
        self.max_epochs, self.max_steps = kwargs.get("max_epochs"), kwargs.get("max_steps", -1)
        self._precision = kwargs.get("precision")  # as given, for messages (None: Lightning's default)
        self._no_logger = kwargs.get("logger") is False  # Lightning then writes into default_root_dir itself
        self.current_epoch = 0
        self.estimated_stepping_batches: int | float = math.inf
        self.logger = StepLogger()
        self.sanity_checking = False  # True while the validation batches before training run, as Lightning's
        self._run: _LightningRun | None = None
        self._run_folder: Path | None = None
        self._module: torch.nn.Module | None = None  # the last fit()'s, with its datamodule: save_checkpoint's
        self._datamodule: Any = None
        self._ckpts = CkptFiles()
        self._optimizers: tuple[Any, Any] = (None, None)  # configure_optimizers()'s optimizer and scheduler
        self._fitted = False  # a fit() trained (or began to): a second one is refused
        self._resumed_file: Path | None = None  # fit(ckpt_path=<an epoch .ckpt>): checked against the folder resumed
        self._ckpt_said = False

    # -- what a module reads from self.trainer -------------------------------------------------------
    @property
    def global_step(self) -> int:
        return self._run.state.global_step if self._run is not None else 0

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The latest value of each logged name, as Lightning's: a 0-d tensor (``.item()`` reads it)."""
        return {name: torch.tensor(value) for name, value in self.logger.callback_metrics.items()}

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """What went to the logger, as Lightning's: a name logged on_step and on_epoch as ``<name>_step`` and
        ``<name>_epoch`` only (its plain ``<name>`` is in callback_metrics alone; a validation's ``<name>_step`` is
        its last batch's, in logged_metrics alone), nothing logged with ``logger=False``."""
        logger = self.logger
        hidden = set(logger.forked_names) | {logger._plain_names.get(name, name) for name in logger.not_logged}
        steps = {name: torch.tensor(float(value)) for name, value in logger.validation_steps.items()}
        return {name: value for name, value in {**self.callback_metrics, **steps}.items()
                if name not in hidden and logger._plain_names.get(name, name) not in logger.not_logged}

    @property
    def is_global_zero(self) -> bool:
        return self._run is None or self._run.accelerator.is_main_process

    @property
    def world_size(self) -> int:
        return self._run.accelerator.num_processes if self._run is not None else 1

    @property
    def device(self) -> torch.device:
        return self._run.accelerator.device

    @property
    def default_root_dir(self) -> str:
        return self.options.root

    @property
    def log_dir(self) -> str | None:
        """The folder of the last fit() (``<default_root_dir>/lightning_logs/version_<N>``), as Lightning's."""
        return str(self._run_folder) if self._run_folder is not None else None

    @property
    def braeburn_trainer(self) -> BraeburnTrainer | None:
        """The braeburn Trainer of the last fit/validate: its state.log_history holds every logged value."""
        return self._run

    # -- the run -----------------------------------------------------------------------------------
    def fit(self, model: torch.nn.Module, train_dataloaders: Any = None, val_dataloaders: Any = None,
            datamodule: Any = None, ckpt_path: str | None = None) -> None:
        """Train ``model`` (Lightning's hooks, at Lightning's moments) into a new
        ``<default_root_dir>/lightning_logs/version_<N>``; ``ckpt_path`` resumes a braeburn checkpoint folder
        ("last": the latest of the newest version_<N> that holds one; lightning_runs.py)."""
        if self._fitted:
            raise LightningArgumentError([
                "trainer.fit() a second time on the same Trainer: Lightning's Trainer goes on from where its first "
                "fit() stopped (having reached max_epochs or max_steps, it trains nothing more), which "
                "braeburn.lightning.Trainer does not do. For a new run make a new Trainer; to train further, a new "
                "Trainer with a higher max_epochs and fit(model, ..., ckpt_path=trainer.checkpoint_callback."
                "best_model_path)"])
        train_loader, val_loader = _loaders(model, datamodule, "fit", train_dataloaders, val_dataloaders)
        if train_loader is None:
            raise ValueError("fit() needs training data: pass train_dataloaders=, a datamodule with "
                             "train_dataloader(), or define train_dataloader() on the module")
        check_sized(train_loader, "train_dataloaders", "train_dataloader()")
        check_sized(val_loader, "val_dataloaders", "val_dataloader()")
        check_unshuffled(train_loader)
        self._module, self._datamodule = model, datamodule
        with _bound(model, self), spelled(LightningSpelling(self.options.root, ckpt_path, self._precision)):
            _one_error(self._fit, model, train_loader, val_loader, ckpt_path)

    def _fit(self, model: torch.nn.Module, train_loader: Any, val_loader: Any, ckpt_path: Any) -> None:
        try:
            resume, warnings = checkpoint_to_resume(ckpt_path, self.options.root)
        except CheckpointPathError as error:
            raise LightningArgumentError([str(error)]) from None
        given = Path(ckpt_path).expanduser() if isinstance(ckpt_path, (str, os.PathLike)) else None
        self._resumed_file = given if resume and given is not None and given.is_file() else None
        if val_loader is not None and (len(val_loader) == 0 or not self.options.validates):
            val_loader = None  # Lightning skips a validation loader without batches, and all with limit_val_batches=0
        self._call("on_fit_start", model)
        if len(train_loader) == 0:  # as Lightning: a warning, nothing trained, and no run folder made
            self._run_folder = None
            if _rank_zero():
                warn("braeburn.lightning: the training DataLoader has no batches (Lightning: \"Total length of "
                     "`DataLoader` across ranks is zero. Please make sure this was your intention.\"): nothing is "
                     "trained, and no run folder is made")
            self._say("`Trainer.fit` stopped: No training batches.")
        else:
            self._run = self._build(model, train_loader, val_loader, new_run=True)
            self._fitted = True
            self._say_no_logger()
            if elastic.is_restarted() and CheckpointManager(self._run_folder).latest() is not None:
                resume, warnings = None, []  # a restart goes on from its own folder's checkpoint (the core's)
            for warning in warnings:
                self._run.accelerator.print(f"braeburn: warning: {warning}")
            # best_model_path names the resumed .ckpt until this run writes one, as Lightning's reloaded ModelCheckpoint
            self._ckpts.latest = epoch_ckpt_of(resume) if resume else None
            self._run.train(resume_from_checkpoint=resume)
            limit = self._limit_reached()
            if limit is not None:
                self._say(f"`Trainer.fit` stopped: {limit}")
        self._call("on_fit_end", model)

    def _limit_reached(self) -> str | None:
        """Lightning's words for the limit the run stopped at (None: it stopped short of both)."""
        steps = self.max_steps if self.max_steps is not None else -1
        if steps != -1 and self.global_step >= steps:
            return f"`max_steps={steps}` reached."
        epochs = self.max_epochs if self.max_epochs is not None else (1000 if steps == -1 else -1)
        return f"`max_epochs={epochs}` reached." if epochs != -1 and self.current_epoch >= epochs else None

    @staticmethod
    def _say(line: str) -> None:
        """``line`` once for the job (by rank 0), as Lightning's rank-zero messages."""
        if _rank_zero():
            print(line, flush=True)

    def validate(self, model: torch.nn.Module, dataloaders: Any = None, ckpt_path: str | None = None,
                 verbose: bool = True, datamodule: Any = None) -> list[dict]:
        """One pass of validation_step; returns [the epoch means of what it logged], as Lightning does."""
        if ckpt_path is not None:
            raise ValueError(f"validate(ckpt_path={ckpt_path!r}) is not supported: braeburn checkpoints are "
                             "resumed by fit(ckpt_path=...); validate the module after fit, or load its weights first")
        _, val_loader = _loaders(model, datamodule, "validate", None, dataloaders)
        if val_loader is None:
            raise ValueError("validate() needs data: pass dataloaders=, a datamodule with val_dataloader(), or "
                             "define val_dataloader() on the module")
        check_sized(val_loader, "dataloaders", "val_dataloader()", "validate")
        self.logger.reset()  # as Lightning's validate(): its metrics alone, from here on
        with _bound(model, self), spelled(LightningSpelling(self.options.root, precision=self._precision)):
            self._run = _one_error(self._build, model, None, val_loader)
            metrics = _one_error(self._run.evaluate)
        logged = {name[len("eval_"):]: value for name, value in metrics.items() if name.startswith("eval_")
                  and name[len("eval_"):] in self.logger.callback_metrics}
        if verbose:
            self._run.accelerator.print("validate: " + ", ".join(f"{k} {v:.6g}" for k, v in logged.items()))
        return [logged]

    # -- what Lightning's Trainer has and braeburn.lightning.Trainer does not: refused by name, with the way out --
    def test(self, *args: Any, **kwargs: Any) -> list[dict]:
        raise not_here("trainer.test()", "runs test_step over a test set with Lightning's loops")

    def predict(self, *args: Any, **kwargs: Any) -> list[Any]:
        raise not_here("trainer.predict()", "runs predict_step with Lightning's loops")

    @property
    def checkpoint_callbacks(self) -> Any:
        raise not_here("trainer.checkpoint_callbacks", "lists Lightning's ModelCheckpoint callbacks")

    @property
    def early_stopping_callback(self) -> Any:
        raise not_here("trainer.early_stopping_callback", "is Lightning's EarlyStopping")

    @property
    def loggers(self) -> Any:
        raise not_here("trainer.loggers",
                        "lists Lightning's loggers; braeburn writes metrics.jsonl in trainer.log_dir")

    @property
    def strategy(self) -> Any:
        raise not_here("trainer.strategy", "is Lightning's Strategy object")

    def _build(self, model: torch.nn.Module, train_loader: Any, val_loader: Any,
               new_run: bool = False) -> _LightningRun:
        """braeburn's Trainer for this fit (``new_run``: in a new run folder) or validate (no optimizer then, as
        Lightning calls none; nothing is written)."""
        # the user seeds; ACCELERATE_* variables act as on braeburn.Trainer's run (the accumulation is the config's)
        accelerator = _Accelerator(**accumulation_as_plugin({**self.options.config.accelerator_options(), "seed": None}))
        accelerator.plan = dataclasses.replace(accelerator.plan, compile_reason=NO_COMPILE_REASON)
        self.logger.reduce_mean = lambda value: accelerator.reduce(value, "mean")
        if accelerator.plan.precision == "fp16" and accelerator.device.type == "cpu" and accelerator.is_main_process:
            note_once("precision='16-mixed' on the CPU: braeburn autocasts to float16, as asked; Lightning switches "
                      "to bf16-mixed there (with a warning). Pass precision='bf16-mixed' for Lightning's numbers.")
        config = self._config_for(train_loader, val_loader, accelerator.num_processes)
        optimizer, scheduler = None, None
        if train_loader is not None:
            optimizer, scheduler = split_optimizers(model.configure_optimizers())  # reads estimated_stepping_batches
            self._optimizers = (optimizer, scheduler)  # the module's self.optimizers() and self.lr_schedulers()
            check_plateau(scheduler, val_loader, self.options)
            check_interval(self.options.val_check_interval, len(train_loader), val_loader)
        if new_run:  # last: a refusal above leaves no empty run folder behind
            self._run_folder = _run_folder(logs_folder(self.options.root), accelerator)
            config.output_dir = str(self._run_folder)
        if scheduler is not None and not isinstance(scheduler, Mapping):
            scheduler = {"scheduler": scheduler, "interval": "epoch"}  # Lightning steps a bare one per epoch
        return _LightningRun(self, model, config=config, train_dataset=train_loader, eval_dataset=val_loader,
                             optimizer=optimizer, lr_scheduler=scheduler, accelerator=accelerator)

    def _config_for(self, train_loader: Any, val_loader: Any, processes: int) -> TrainingConfig:
        """The run's config: batch sizes from the loaders, validation each epoch when there is a val loader, and
        the optimizer steps of this process (its share of the batches)."""
        config = TrainingConfig(**vars(self.options.config))
        config.per_device_train_batch_size = getattr(train_loader, "batch_size", None) or 1
        config.per_device_eval_batch_size = getattr(val_loader, "batch_size", None) or 1
        config.eval_strategy = "epoch" if val_loader is not None and train_loader is not None else "no"
        if train_loader is not None:
            per_epoch = math.ceil(math.ceil(len(train_loader) / processes) / config.gradient_accumulation_steps)
            if config.max_steps > 0 and self.max_epochs not in (None, -1):
                config.max_steps = min(config.max_steps, per_epoch * self.max_epochs)  # whichever comes first
            self.estimated_stepping_batches = config.max_steps if config.max_steps > 0 else \
                per_epoch * int(config.num_train_epochs)
        errors = config.validate()
        if errors:
            raise ConfigError(errors)
        return config

    def _call(self, hook: str, model: torch.nn.Module, *args: Any) -> None:
        """Each callback's hook (callbacks take (trainer, module)), then the module's: Lightning's order."""
        outer, self._hook = self._hook, hook  # (trainer.should_stop reads it)
        try:
            for callback in self.callbacks:
                method = getattr(callback, hook, None)
                if callable(method):
                    method(self, model, *args)
            method = getattr(model, hook, None)
            if callable(method):
                method(*args)
        finally:
            self._hook = outer


def _rank_zero() -> bool:
    return os.environ.get("RANK", "0") == "0"  # (a launcher sets RANK before any process group exists)


def _one_error(work: Any, *args: Any) -> Any:
    """``work(*args)``; braeburn's own refusal (an error it raised on purpose, whose message says the fix) comes out
    as that one error, without the frames of braeburn's Trainer it was raised in (BRAEBURN_DEBUG=1 keeps them).
    An error raised in the module's code (or in braeburn called from it), in torch, or a bug keeps its traceback."""
    try:
        return work(*args)
    except Exception as error:
        if debug_requested([]) or not (is_user_error(error) and _raised_by_braeburn_alone(error)):
            raise
        raise error.with_traceback(None) from None


def _raised_by_braeburn_alone(error: BaseException) -> bool:
    """Every frame between the caller and the raise is braeburn's: no module code, no torch on the way."""
    frames = traceback.extract_tb(error.__traceback__)[1:]  # [0]: _one_error itself
    return bool(frames) and all(Path(frame.filename).resolve().is_relative_to(_PACKAGE) for frame in frames)


def _run_folder(logs: Path, accelerator: Accelerator) -> Path:
    """The new run's folder: the next version_<N> of ``logs``, created by the main process and told to the others
    (a worker that braeburn launch --max-restarts restarted takes the one its first attempt made for this fit(), to
    resume it; never another job's)."""
    number, problem, fit = -1, None, next(_FITS)
    if accelerator.is_main_process:
        job = job_identity()
        try:
            folder = (restarted_run_folder(logs, job, fit) if elastic.is_restarted() else None) or \
                claim_run_folder(logs, job, fit)
            number = int(folder.name.removeprefix("version_"))
        except OSError as error:
            problem = error
    number = pg.broadcast_int(number)
    if number < 0:
        reason = f"({problem.strerror or problem})" if problem is not None else "(the main process could not)"
        raise OutputDirError(f"Trainer(default_root_dir={str(logs.parent)!r}): braeburn cannot create this run's "
                             f"folder in {logs} {reason}. Pass a default_root_dir you can write to, or make that "
                             "folder writable.")
    return logs / f"version_{number}"


class _Accelerator(Accelerator):
    """The run's Accelerator, whose checkpoints the Trainer saves and resumes: without Accelerate's save_state() and
    load_state() lines, which speak of calls and files of Accelerate's that a Lightning script never made."""

    def save_state(self, output_dir: Any = None, **kwargs: Any) -> None:
        super(AccelerateCheckpointing, self).save_state(output_dir, **kwargs)

    def load_state(self, input_dir: Any = None, **kwargs: Any) -> None:
        super(AccelerateCheckpointing, self).load_state(input_dir, **kwargs)


class _FirstBatches:
    """The first ``count`` batches of ``loader`` (-1: all), for the sanity check."""

    def __init__(self, loader: Any, count: int):
        self.loader, self.count = loader, count

    def __iter__(self) -> Any:
        return iter(self.loader) if self.count < 0 else itertools.islice(self.loader, self.count)


class _StepForward(torch.nn.Module):
    """The model braeburn's Trainer sees: its forward is the module's training_step or validation_step, so that
    DDP (gradient sync) and autocast wrap the step as Lightning's strategy wrapper does."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, batch: Any, batch_idx: int, hook: str) -> Any:
        return getattr(self.module, hook)(batch, batch_idx)


class _LightningRun(BraeburnTrainer):
    """braeburn's Trainer with the loss and the evaluation taken from the module's steps."""

    stop_past_max_steps = True  # as Lightning: a checkpoint past max_epochs/max_steps is restored, nothing trained
    peer_methods_called = ("compute_loss", "log")  # its own, called by its loss and the module's self.log
    ends_epoch_at_stop = True  # max_steps part way through an epoch: Lightning still calls on_train_epoch_end
    clips_optimizer_parameters = True  # gradient_clip_val clips the optimizer's parameters, as Lightning's plugin

    def __init__(self, lightning: Trainer, module: torch.nn.Module, **kwargs: Any):
        self.lightning, self.batch_idx = lightning, 0
        self.hooks = _LightningHooks(lightning, module)
        super().__init__(_StepForward(module), callbacks=[self.hooks], **kwargs)

    def _save(self) -> None:
        super()._save()
        self.lightning._save_epoch_ckpt()

    def _resume(self, request: str, loader: Any) -> None:
        """fit(ckpt_path=...) as Lightning's: the random states stay the script's (a Lightning .ckpt holds none), so
        dropout draws what Lightning's resumed run draws; a worker braeburn launch --max-restarts restarted takes
        the checkpoint's, and goes on as the uninterrupted run."""
        kind = self.accelerator.plan.device
        kept = None if elastic.is_restarted() else state_io.rng_state(kind)
        super()._resume(request, loader)
        if kept is not None:
            state_io.set_rng_state(kept, kind)
        if self.lightning._resumed_file is not None:  # an epoch .ckpt: its weights must be the folder's
            try:
                check_ckpt_weights(self.lightning._resumed_file, self.hooks.module)
            except CheckpointPathError as error:
                raise LightningArgumentError([str(error)]) from None

    def _evaluate_and_save(self, step_end: bool) -> None:
        """At an epoch's end, Lightning's order (its fit loop): the epoch's validation (when this epoch validates),
        then on_train_epoch_end (which sees the validation's metrics in callback_metrics), then a ReduceLROnPlateau's
        step, then the checkpoint. (An epoch scheduler stepped before all of them, as Lightning's last batch does.)"""
        batches = len(self.train_dataset)
        done = round((self.state.epoch - self.lightning.current_epoch) * batches)  # this epoch's batches so far
        if step_end:
            if done < batches and self._validates_after(done, batches):  # val_check_interval: part way through
                with self._phases.timed(EVALUATION):
                    self.evaluate()
            super()._evaluate_and_save(step_end)
            return
        if self.hooks.replayed:
            return  # (its end was saved before the resume)
        self._saver.poll()  # a background save that has finished since: its on_save fires now
        metrics = None
        if self.hooks.epoch_finished and self._validates_after(batches, batches):
            with self._phases.timed(EVALUATION):
                metrics = self.evaluate()
        self.hooks.train_epoch_end(self)
        if metrics is not None:
            self._scheduler_steps.after_evaluate(metrics)
        if self.config.save_strategy == "epoch" or self.state.should_save:
            self._save()

    @property
    def train_loader_epoch(self) -> int:
        """The epoch the prepared training loader is in (the loop's; a resumed run's first may be one it finished)."""
        return self._train_loader.epoch

    def _validates_after(self, done: int, batches: int) -> bool:
        """Whether Lightning validates after the ``done``-th training batch of this epoch (of ``batches``): in every
        check_val_every_n_epoch-th epoch, after every val_check_interval batches (a float: that fraction of the
        epoch's batches, at least 1; 1.0: the last batch)."""
        options = self.lightning.options
        if self.eval_dataset is None or (self.lightning.current_epoch + 1) % options.val_every_n_epochs:
            return False
        interval = options.val_check_interval
        every = interval if isinstance(interval, int) else max(1, int(batches * interval))
        return done % every == 0

    def sanity_check(self) -> None:
        """Lightning's sanity check: the validation hooks over the first ``num_sanity_val_steps`` batches before
        training, whose logged values are then forgotten; torch's random state is put back after it (Lightning's
        isolate_rng: iterating a DataLoader draws its seed), so training draws the same numbers as without it."""
        lightning, wanted = self.lightning, self.lightning.options.sanity_batches
        if self.eval_dataset is None or wanted == 0:
            return
        loader = self._eval_loader(self.eval_dataset)
        lightning.sanity_checking = True
        try:
            with torch.random.fork_rng(devices=[]), lightning.logger.forgotten():
                self._validation(_FirstBatches(loader, wanted), "Sanity check", "eval", None)
        finally:
            lightning.sanity_checking = False

    def _loader(self, dataset: Any, batch_size: int, shuffle: bool, train: bool | None = None) -> Any:
        """The user's own DataLoader (the Accelerator shards it, and moves its batches to the device)."""
        return dataset if isinstance(dataset, DataLoader) else super()._loader(dataset, batch_size, shuffle, train)

    def _batch_loss(self, model: Any, batch: Any) -> torch.Tensor:
        return self.compute_loss(model, batch)

    def compute_loss(self, model: Any, batch: Any) -> torch.Tensor:
        """The loss the module's training_step returns (called through the wrapped forward, as the model)."""
        self.lightning.logger.batch_size = batch_size_of(batch)
        loss = step_loss(model(batch, self.batch_idx, "training_step"), "training_step")
        self.batch_idx += 1
        if loss is None:
            raise ValueError("training_step returned None, which Lightning takes as 'skip this batch'; braeburn "
                             "does not skip batches: return the loss (or filter the data before training)")
        return loss

    def _evaluation_step(self, model: torch.nn.Module, batch: Any, loss_only: bool,
                         ignore_keys: list[str] | None = None) -> tuple[Any, Any, Any]:
        self.lightning.logger.batch_size = batch_size_of(batch)
        with torch.no_grad():
            loss = step_loss(model(batch, self.batch_idx, "validation_step"), "validation_step")
        self.batch_idx += 1
        return (loss.detach() if isinstance(loss, torch.Tensor) else None), None, None

    def _evaluation_output(self, loader: Any, description: str, prefix: str, loss_only: bool | None,
                           ignore_keys: list[str] | None) -> EvalLoopOutput:
        return self._timed_evaluation(lambda: self._validation(loader, description, prefix, ignore_keys), prefix)

    def _validation(self, loader: Any, description: str, prefix: str, ignore_keys: list[str] | None) -> EvalLoopOutput:
        """Validation as Lightning orders it: its hooks around the batches, then what self.log recorded (epoch
        means) added to the metrics as ``eval_<name>``."""
        lightning, module, logger = self.lightning, self.model.module, self.lightning.logger
        saved_idx, logger.training = self.batch_idx, False
        training_sums, logger.epoch_sums = logger.epoch_sums, {}  # the training epoch's, reduced at its end
        self.batch_idx = 0
        try:
            lightning._call("on_validation_start", module)
            lightning._call("on_validation_epoch_start", module)
            output = super()._evaluation_output(loader, description, prefix, True, ignore_keys)
            logged = logger.take_epoch_means()  # in callback_metrics from on_validation_epoch_end on, as Lightning
            lightning._call("on_validation_epoch_end", module)
            logged.update(logger.take_epoch_means())  # what on_validation_epoch_end logged
            lightning._call("on_validation_end", module)
        finally:
            self.batch_idx, logger.training, logger.epoch_sums = saved_idx, True, training_sums
        metrics = {**(output.metrics or {}), **{f"{prefix}_{k}": v for k, v in logged.items()}}
        return EvalLoopOutput(output.predictions, output.label_ids, metrics, output.num_samples)

    def _emit_log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """A training log record carries the step values self.log recorded since the last one."""
        if "loss" in logs and "learning_rate" in logs:
            logs = {**logs, **self.lightning.logger.take_step_values()}
        super()._emit_log(logs, start_time)

    def _record_train_metrics(self, metrics: dict[str, float]) -> None:
        self._emit_log(dict(metrics))  # a log record, as the loggers see every other

    def log(self, logs: dict[str, float]) -> None:
        self._emit_log(logs)


def _loaders(model: Any, datamodule: Any, stage: str, train: Any, val: Any) -> tuple[Any, Any]:
    """The train and validation loaders: as passed, else the datamodule's, else the module's own methods."""
    for source in (datamodule, model):
        if source is None:
            continue
        for hook in ("prepare_data", "setup"):
            method = getattr(source, hook, None)
            if callable(method):
                method() if hook == "prepare_data" else method(stage)
    source = datamodule if datamodule is not None else model
    if train is None and stage == "fit" and _user_defined(source, "train_dataloader"):
        train = source.train_dataloader()
    if val is None and _user_defined(source, "val_dataloader"):
        val = source.val_dataloader()
    return train, val


def _user_defined(obj: Any, name: str) -> bool:
    """``obj`` has method ``name`` of its own (Lightning's base classes define the loaders to raise)."""
    owner = next((k for k in type(obj).__mro__ if name in vars(k)), None)
    return owner is not None and owner.__module__.split(".")[0] not in ("lightning", "pytorch_lightning")


__all__ = ["LightningArgumentError", "Trainer"]
