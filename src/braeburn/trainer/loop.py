"""The Trainer: hand it a model and datasets; it trains, evaluates, checkpoints and resumes exactly.

Read :meth:`Trainer.train` and :meth:`Trainer._train_epochs` top to bottom: that is the whole loop.
Everything device-specific is the Accelerator's; this file only orders the work. The loop never
reads a device tensor on the host except on logging, evaluation and save steps (each ``.item()``
or ``float()`` of a device tensor waits for the device: the comments mark where).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from ..checkpoints import output_lock
from ..accelerator.core import Accelerator
from ..data.collate import BucketPadding, batch_signature, position_limit
from ..plan.compile_policy import PreparedForward, outputs_are_overwritten, prepared_forward
from ..devices.base import MemoryReading
from ..devices.host import current_host
from ..distributed import process_group as pg
from ..plan.envvars import MAX_STEPS_VAR, max_steps_cap
from ..plan.option_spelling import given, option
from ..plan.rules import PlanError
from ..checkpoints.state import enable_full_determinism
from .autobatch import train_through_out_of_memory
from .background_save import BackgroundSaver
from . import output_dir_check
from .compile_window import CompileWindow
from .phase_clock import EVALUATION, PhaseClock
from .precision_window import choose_precision
from .batches import batch_inputs, batch_samples, compute_loss
from .callbacks import CallbackList
from .checkpoint import CheckpointManager, SaveLog
from .config import ConfigError, TrainingConfig
from .early_stopping import EarlyStoppingCallback  # noqa: F401  (re-exported for users)
from .evaluation import EvaluationMixin
from .saving import SavingMixin
from ..compat.transformers.callbacks import HfOptionsCallback, adapt_callback
from ..compat.transformers.trainer_api import (EvalPrediction, HfTrainerMixin, PredictionOutput, TrainOutput, make_collate, note_once,
                        prepare_model_options, resolve_training_parts)
from ..compat.transformers.overrides import HfOverridableMixin, Overrides, backward_as_in_transformers
from .input_checks import NO_CONTEXT, check_batch_inputs, check_datasets, check_labels, float_labels_explained
from .metrics_log import MetricsLogCallback
from .scheduler_interval import SchedulerSteps, is_plateau, per_step_note, split_scheduler
from .plots import PlotCallback
from .progress import ProgressCallback
from .resume import reconcile, samples_in
from .summary import non_finite_message, run_summary
from .signals import SignalCallback, TrainingInterrupted, stop_message
from .state import TrainerState
from .step_breakdown import StepBreakdownCallback
from .write_faults import OutputDirError


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite and nan_policy is "stop"."""


class Trainer(EvaluationMixin, SavingMixin, HfOverridableMixin, HfTrainerMixin):
    """Train ``model`` on ``train_dataset`` as ``config`` says; see docs/trainer.md.

    Transformers' arguments work as there (``args=``, ``data_collator=``, ``processing_class=``,
    ``optimizers=(opt, sched)``, ``compute_loss_func=``, ``model_init=``, ...); braeburn's own names
    (``config=``, ``collate_fn=``, ``loss_fn=``, ``optimizer=``, ``lr_scheduler=``) keep working.
    A subclass may override Transformers' ``training_step``, ``compute_loss``, ``create_optimizer``,
    ``create_scheduler``, ``prediction_step``, ``evaluation_loop`` and ``log`` (hf_overrides.py).
    """

    stop_past_max_steps = False  # a resume past max_steps: ResumeError; True: restored, nothing trained (resume.py)

    def __init__(self, model: torch.nn.Module | None = None, args: TrainingConfig | None = None,
                 data_collator: Callable | None = None, train_dataset: Dataset | None = None,
                 eval_dataset: Dataset | None = None, processing_class: Any = None,
                 model_init: Callable[[], torch.nn.Module] | None = None, compute_loss_func: Callable | None = None,
                 compute_metrics: Callable[[EvalPrediction], dict] | None = None, callbacks: list[Any] | None = None,
                 optimizers: tuple[Any, Any] = (None, None), optimizer_cls_and_kwargs: tuple | None = None,
                 preprocess_logits_for_metrics: Callable | None = None, *, config: TrainingConfig | None = None,
                 collate_fn: Callable | None = None, loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
                 optimizer: torch.optim.Optimizer | None = None, lr_scheduler: Any = None,
                 accelerator: Accelerator | None = None, tokenizer: Any = None):
        self.config = config or args or TrainingConfig()
        errors = self.config.validate()
        if errors:
            raise ConfigError(errors)
        if self.config.full_determinism:  # before the Accelerator: its variables must precede any GPU work
            enable_full_determinism()
        from ..accelerator.trackers import resolve_log_with

        resolve_log_with(self.config.report_to)  # a tracker asked for but not installed: say so now
        model = model if model is not None else _from_model_init(model_init)
        if isinstance(eval_dataset, Mapping):
            raise ValueError("eval_dataset is a dict of datasets, which braeburn's Trainer does not take: call "
                             "trainer.evaluate(dataset, metric_key_prefix=f'eval_{name}') for each one")
        optimizer, lr_scheduler, loss_fn = resolve_training_parts(
            model, self.config, optimizer=optimizer or optimizers[0], lr_scheduler=lr_scheduler or optimizers[1],
            optimizer_cls_and_kwargs=optimizer_cls_and_kwargs, loss_fn=loss_fn, compute_loss_func=compute_loss_func)
        lr_scheduler, self._scheduler_interval = split_scheduler(lr_scheduler)  # Lightning's dict: its interval
        self.processing_class = processing_class or tokenizer
        self.preprocess_logits_for_metrics = preprocess_logits_for_metrics
        self.accelerator = accelerator or Accelerator(**self.config.accelerator_options())
        plan = self.accelerator.plan  # compile=True, asked: refused with checkpointing that needs a replay
        prepare_model_options(model, self.config, plan.device, current_host(), plan.compile and not plan.compile_auto)
        self.accelerator.defer_compile = True  # compiled (or not) once the first steps are measured
        self.model = model
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.data_collator = collate_fn or data_collator
        self.collate_fn = make_collate(model, self.config, self.data_collator, self.processing_class)
        self.compute_metrics, self.loss_fn = compute_metrics, loss_fn
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        self.output_dir = Path(self.config.output_dir).resolve()
        self.checkpoints = CheckpointManager(self.output_dir, self.config.save_total_limit)
        self._saver = BackgroundSaver(self.checkpoints)
        self._best_step: int | None = None  # the step of the best evaluation, until its checkpoint is saved
        self._best_before: str | None = None
        self.callbacks = self._callbacks(callbacks or [])
        self.state = TrainerState()
        self._prepared_model: torch.nn.Module | None = None
        self._eval_loaders: dict[int, tuple[Dataset, Any]] = {}
        self._train_forward: tuple[Any, PreparedForward | None] = (None, None)
        self._inputs_checked = False  # the first training batch is checked once (input_checks.py)
        self._shapes: set[tuple] = set()  # distinct training batch shapes: each costs kernel plans, or a graph
        self._overrides = Overrides.of(type(self), Trainer)  # once: the loop's fast path when none is overridden
        self._call_hf_hook("on_init_end")

    def _callbacks(self, user_callbacks: list[Any]) -> CallbackList:
        """braeburn's own callbacks (progress, metrics.jsonl, plot, signals, ...), then the user's."""
        self.signals = SignalCallback()
        self._metrics_log, self._plot = _metrics_log(self.config), PlotCallback()
        self._step_breakdown = StepBreakdownCallback(str(self.config.step_breakdown).lower())
        self._phases = PhaseClock()  # where train()'s time went (phase_clock.py); new at each train()
        builtins = [ProgressCallback(disable=self.config.disable_tqdm), self._metrics_log, self._plot, self.signals,
                    HfOptionsCallback(), self._step_breakdown]
        return CallbackList(builtins + [adapt_callback(c, self) for c in user_callbacks])

    @property
    def is_main_process(self) -> bool:
        return self.accelerator.is_main_process

    def _call_hf_hook(self, hook: str, **kwargs: Any) -> None:
        """Transformers-only hooks (on_init_end, on_predict) of the Transformers-style callbacks."""
        for callback in self.callbacks.callbacks:
            if hasattr(callback, "inner") and hasattr(callback, "call"):
                callback.call(hook, **kwargs)

    # -- the run --------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None, **kwargs: Any) -> TrainOutput:
        """Train; resume from a checkpoint folder or "latest" (True) when asked. Returns the final step, loss and metrics."""
        _no_hf_extras(trial, kwargs)
        resume_from_checkpoint = {True: "latest", False: None}.get(resume_from_checkpoint, resume_from_checkpoint) \
            if isinstance(resume_from_checkpoint, bool) else resume_from_checkpoint
        try:
            return self._train(resume_from_checkpoint)
        finally:
            output_lock.release(self.output_dir)  # taken by _check_output_dir (rank 0); a no-op when not held

    def _train(self, resume_from_checkpoint: str | None) -> TrainOutput:
        config, acc = self.config, self.accelerator
        resume = resume_from_checkpoint or config.resume_from_checkpoint or self._elastic_resume()
        if self.train_dataset is None:
            raise ValueError("Trainer.train() needs a train_dataset: pass Trainer(..., train_dataset=...)")
        self._saver.wait()  # an earlier train()'s last checkpoint is on disk before this one looks
        self._check_output_dir(resume)
        train_loader = self._setup_training()
        if resume:
            self._resume(resume, train_loader)
        other_runs = self.checkpoints.begin_run(self.state)  # the id that rotation and the NaN message go by
        if other_runs:
            self.accelerator.print(f"braeburn: warning: {other_runs}")
        self._precision_record = choose_precision(self, train_loader)  # "auto" on MPS: timed here, state restored
        self._reset_window()
        self._phases = PhaseClock()
        started, start_step, start_samples = time.perf_counter(), self.state.global_step, self.state.samples_seen
        self.callbacks.on_train_begin(self, self.state)
        try:
            train_through_out_of_memory(self, train_loader)  # _train_epochs; auto_find_batch_size: halves on OOM
            self.signals.settle(self.state)  # a signal on any rank during the last step: all ranks save and stop
            self._metrics_log.write_record({"step": self.state.global_step, "run": self._run_record()})
            self._save_at_stop()
        finally:
            seconds = time.perf_counter() - started
            try:
                self.callbacks.on_train_end(self, self.state)  # the plot renders while the last save writes
            finally:
                try:
                    self._saver.wait()  # under braeburn's handlers: a SIGTERM now is noted, the save completes
                    self._plot.wait()
                finally:
                    self.signals.restore()
        samples = self.state.samples_seen - start_samples  # really trained: a short last batch counts its own
        summary = run_summary(self, seconds, self.state.global_step - start_step, samples)
        acc.print(summary)
        # The group stays for evaluate()/predict() after train(), which gather from every rank (destroyed at exit);
        # a signal ends the process on every rank together, so it is torn down now, all ranks meeting first.
        acc.end_training(keep_process_group=self.signals.received is None)
        if self.signals.received is not None:
            self._exit_after_signal()
        failure = self._save_log.failure(self.state.last_checkpoint, self.state.global_step)
        if failure is not None:  # the final weights are on no disk: a job must not report success (exit 1)
            raise failure
        metrics = {**self._last_eval_metrics(), **self._train_metrics(seconds, self.state.global_step - start_step,
                                                                        samples)}
        return TrainOutput(self.state.global_step, metrics["train_loss"], metrics)

    def _train_epochs(self, loader) -> None:
        """The loop. Host-device syncs happen only in _log, _evaluate_and_save and _check_finite."""
        state, config, acc = self.state, self.config, self.accelerator
        model, optimizer, scheduler = self._prepared_model, self.optimizer, self.lr_scheduler
        window = self._compile_window
        window.begin(model, state.global_step, state.max_steps, config.per_device_train_batch_size)
        model.train()
        for epoch in range(loader.epoch, state.num_epochs):  # loader.epoch: 0, or where a resumed run stopped
            loader.set_epoch(epoch)
            self.callbacks.on_epoch_begin(self, state)
            for batch in loader:  # already on the device (a resumed epoch skips the batches done)
                with acc.accumulate(model):
                    if self._overrides.training_step:  # a subclass's training_step: forward and backward
                        self._overridden_training_step(model, batch)
                    else:
                        loss = self._forward_loss(model, batch)
                        if config.nan_policy == "skip" and not torch.isfinite(loss):  # sync: the price of "skip"
                            self._skipped += 1
                        else:
                            acc.backward(loss)
                            self._keep_loss(loss)
                            self._window_has_grads = True
                    if acc.sync_gradients:
                        self._optimizer_step(model, optimizer, scheduler)
                state.samples_seen += batch_samples(batch, loader, self._samples_per_batch, acc.num_processes)
                if not acc.sync_gradients:
                    continue
                state.global_step += 1
                state.epoch = epoch + loader.batches_yielded / len(loader)  # Transformers' fractional epoch
                if window.pending:  # compile=auto decides from the measured eager steps (two syncs, once)
                    model = self._prepared_model = window.after_step(state.global_step, model, self._shapes)
                self.callbacks.on_step_end(self, state)
                if config.logging_strategy == "steps" and state.global_step % config.logging_steps == 0:
                    self._log()
                self._evaluate_and_save(step_end=True)
                if state.should_stop or state.global_step >= state.max_steps:
                    break
            if _epoch_finished(loader, epoch) and state.epochs_ended <= epoch:  # a resume at its end: done already
                state.epochs_ended = epoch + 1
                self._scheduler_steps.after_epoch(epoch)  # before the epoch's checkpoint, which holds its state
                self.callbacks.on_epoch_end(self, state)
                self._evaluate_and_save(step_end=False)
            if state.should_stop or state.global_step >= state.max_steps:
                return

    def _forward_loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        self._shapes.add(batch_signature(batch))
        if self._overrides.compute_loss:  # a subclass overrode Transformers' compute_loss
            return self.compute_loss(model, batch, num_items_in_batch=None)
        args, kwargs, labels = batch_inputs(batch, pass_labels=self.loss_fn is None)
        if not self._inputs_checked:
            check_batch_inputs(kwargs)
        forward = self._outputs_as_computed(model)
        with float_labels_explained(labels) if not self._inputs_checked else NO_CONTEXT:
            try:
                outputs = model(*args, **kwargs)  # a prepared model autocasts inside its forward
            finally:
                if forward is not None:
                    forward.float_outputs = True
            if not self._inputs_checked:
                check_labels(outputs, labels)  # one sync, on the first batch only
            loss = compute_loss(outputs, labels, self.loss_fn)
        self._inputs_checked = True
        return loss.float() if forward is not None and loss.dtype in (torch.float16, torch.bfloat16) else loss

    def _keep_loss(self, loss: torch.Tensor) -> None:
        """The step's loss joins the window, on the device (no sync). Under CUDA graphs (torch_compile_mode
        reduce-overhead or max-autotune) the loss lives in the graph's pool, which the next step overwrites,
        so a copy is kept."""
        loss = loss.detach()
        self._window_losses.append(loss.clone() if self._losses_overwritten else loss)

    def _outputs_as_computed(self, model: torch.nn.Module) -> PreparedForward | None:
        """Where the model computes the loss itself (no loss_fn, no compute_loss override), a training forward
        returns its outputs as computed: the logits are not copied to float32 (for GPT-2 small at batch 8 that
        copy is 1.6 GB written per step, and memory at the forward's peak), since nothing reads them. The
        returned forward has float_outputs off until the caller turns it back on."""
        if self.loss_fn is not None or self._overrides.compute_loss:
            return None
        if self._train_forward[0] is not model:  # once per prepared (or newly compiled) model
            self._train_forward = (model, prepared_forward(self.accelerator.unwrap_model(model)))
        forward = self._train_forward[1]
        if forward is None or forward.stats.over_wrapper:  # traced inside a compiled wrapper: no flag flips there
            return None
        forward.float_outputs = False
        return forward

    def _overridden_training_step(self, model: torch.nn.Module, batch: Any) -> None:
        """Transformers' training_step returns the loss divided by the accumulation steps; the window keeps
        per-batch losses, as braeburn's own path does."""
        with backward_as_in_transformers(self.accelerator):
            loss = self.training_step(model, batch, None)
        self._window_losses.append(loss.detach().float() * self.config.gradient_accumulation_steps)
        self._window_has_grads = True

    def _scheduler_policy(self, scheduler: Any, steps_per_epoch: int) -> SchedulerSteps:
        note = per_step_note(scheduler, self._scheduler_interval, steps_per_epoch)
        if is_plateau(scheduler) and self.config.eval_strategy == "no":
            note = (f"{type(scheduler).__name__} steps after each evaluation (as in Transformers), but "
                    "--eval_strategy is no, so its learning rate never changes: pass --eval_strategy epoch (or steps)")
        if note and self.accelerator.is_main_process:
            note_once(note)
        return SchedulerSteps(self.lr_scheduler, self._scheduler_interval, self.config.metric_for_best_model)

    def _optimizer_step(self, model, optimizer, scheduler) -> None:
        if self._window_has_grads:  # with nan_policy="skip" a window can hold no gradient at all
            if self.config.max_grad_norm > 0:
                self._grad_norm = self.accelerator.clip_grad_norm_(self._parameters, self.config.max_grad_norm)
            optimizer.step()
            self._step_lr = scheduler.get_last_lr()[0]  # the rate this step used: Transformers logs it
            self._scheduler_steps.after_optimizer_step(self.state.global_step + 1)
        optimizer.zero_grad(set_to_none=True)
        self._window_has_grads = False

    # -- logging, evaluation, saving -------------------------------------------------------------
    def _reset_window(self) -> None:
        """Fresh counters for a train() call: the losses since the last log stay on the device until read."""
        self._window_losses: list[torch.Tensor] = []
        self._window_checked = torch.empty(0)  # the window's first losses, reduced and checked at a save
        self._losses_overwritten = outputs_are_overwritten(self.accelerator.compile_mode)
        self._window_first_step = self.state.global_step + 1
        self._window_has_grads = False
        self._window_start = (time.perf_counter(), self.state.samples_seen)
        self._grad_norm: torch.Tensor | None = None
        self._step_lr: float | None = None
        self._skipped = 0
        self._drift_warned = False  # the MPS driver-memory drift is warned once per train()
        self._memory_readings: deque[MemoryReading] = deque(maxlen=64)  # the drift rules read the last few
        self._loss_total = (0.0, 0)
        self._save_log = SaveLog()

    def _check_finite(self) -> None:
        """Stops the run at a NaN/inf loss when nan_policy="stop" (one sync). The window stays whole for the next
        log, which averages every step since the last log as Transformers does; only its unchecked losses are
        averaged over the processes (one all-reduce), and kept so, so that no loss is reduced twice."""
        unchecked = self._window_losses[len(self._window_checked):]
        if not unchecked:
            return
        losses = self.accelerator.reduce(torch.stack(unchecked).float(), "mean")
        bad = (~torch.isfinite(losses)).nonzero()
        if bad.numel():  # .numel() of a nonzero() result waits for the device
            index = len(self._window_checked) + int(bad[0])
            step = self._window_first_step + index // self.config.gradient_accumulation_steps
            raise NonFiniteLossError(non_finite_message(self, step, float(losses[int(bad[0])])))
        self._window_checked = torch.cat([self._window_checked.to(losses.device), losses])

    def _take_window_loss(self) -> float | None:
        """The mean loss since the last log (one sync), checked first; the window starts afresh."""
        if not self._window_losses:
            return None
        self._check_finite()
        losses = self._window_checked
        mean = float(losses.mean())  # sync
        total, count = self._loss_total
        self._loss_total = (total + mean * len(losses), count + len(losses))
        self._window_losses, self._window_checked = [], torch.empty(0)
        self._window_first_step = self.state.global_step + 1
        return mean

    def _log(self) -> None:
        state, now = self.state, time.perf_counter()
        logs: dict[str, float] = {"epoch": round(state.epoch_progress, 4)}
        loss = self._take_window_loss()
        if loss is not None:
            logs["loss"] = loss
        rate = self._step_lr if self._step_lr is not None else self.lr_scheduler.get_last_lr()[0]
        logs["learning_rate"] = float(rate)
        if self._grad_norm is not None:
            logs["grad_norm"] = float(self._grad_norm)  # cheap: the loss read above already synced
        started, samples = self._window_start
        if now > started:
            logs["samples_per_second"] = (state.samples_seen - samples) / (now - started)
        memory = self.accelerator.memory_stats()
        logs["memory_bytes"] = float(memory.get("allocated_bytes", memory.get("peak_bytes", 0)))
        if "driver_bytes" in memory:  # MPS: the driver's share grows with each new shape (warned once, below)
            logs["driver_memory_bytes"] = float(memory["driver_bytes"])
            self._warn_memory_drift(memory)
        if self._skipped:
            logs["skipped_steps"] = float(self._skipped)
        self._window_start = (now, state.samples_seen)
        self.log(logs, start_time=started)

    def _warn_memory_drift(self, memory: dict[str, int]) -> None:
        self._memory_readings.append(MemoryReading(self.state.global_step, memory, len(self._shapes)))
        drift = None if self._drift_warned else self.accelerator.plan.device.memory_drift(self._memory_readings)
        if drift:
            self._drift_warned = True
            self.accelerator.print(f"braeburn: warning at step {self.state.global_step}: {drift}")

    def _record(self, logs: dict[str, float]) -> None:
        self.state.log_history.append({"step": self.state.global_step, **logs})
        self.callbacks.on_log(self, self.state, logs)

    def _evaluate_and_save(self, step_end: bool) -> None:
        state, config = self.state, self.config
        self._saver.poll()  # a background save that has finished since: its on_save fires now
        strategy_now = "steps" if step_end else "epoch"
        eval_every = config.eval_steps or config.logging_steps
        if config.eval_strategy == strategy_now and (not step_end or state.global_step % eval_every == 0):
            with self._phases.timed(EVALUATION):
                metrics = self.evaluate()
            self._scheduler_steps.after_evaluate(metrics)  # ReduceLROnPlateau's step, as Transformers
        wants_save = config.save_strategy == strategy_now and (not step_end or state.global_step % config.save_steps == 0)
        if wants_save or state.should_save:
            self._save()

    # -- setup -----------------------------------------------------------------------------------
    def _check_output_dir(self, resume: str | None) -> None:
        out = self.output_dir
        if out.exists() and not out.is_dir():
            raise FileExistsError(f"{given('output_dir', str(out))} is a file, not a folder. Pass a folder to "
                                  f"{option('output_dir')}.")
        self._lock_output_dir()  # a run that holds it is named first, whatever the folder holds
        refusal: OSError | None = None
        if self.is_main_process:  # writes over nothing braeburn did not write; sets an earlier run aside
            try:
                output_dir_check.ready(self, not (self.config.overwrite_output_dir or resume), self.accelerator.print)
            except OSError as error:
                refusal = error
        if not pg.all_ok(refusal is None, self.accelerator.device):
            raise refusal or OutputDirError(f"output_dir={str(out)!r} was refused by rank 0 (its error says why)")

    def _lock_output_dir(self) -> None:
        """Rank 0 holds output_dir's lock for the run (one writer); every rank learns if it was refused."""
        refusal: Exception | None = None
        if self.is_main_process:
            try:
                output_lock.acquire(self.output_dir)
            except (output_lock.OutputDirBusyError, output_lock.OutputLockUnsupportedError, OSError) as error:
                refusal = error  # raised after the other ranks heard of it, so that none waits forever
        if not pg.all_ok(refusal is None, self.accelerator.device):
            raise refusal or output_lock.OutputDirBusyError(
                f"output_dir={str(self.output_dir)!r} could not be locked by rank 0 (its error says why); this rank "
                "stops with it")

    def _loader(self, dataset: Dataset, batch_size: int, shuffle: bool) -> DataLoader:
        # A generator of its own, so that starting an epoch does not draw from torch's global generator
        # (DataLoader draws a worker seed at every iter()): a resumed run then draws the same dropout masks.
        config = self.config
        generator = torch.Generator().manual_seed(config.seed if config.data_seed is None else config.data_seed)
        collate = self.collate_fn
        if self._pads_to_buckets:  # text batches padded to a few lengths: few kernel plans and graphs
            collate = BucketPadding(collate, position_limit(self.accelerator.unwrap_model(self.model)), coarse=True)
        workers = {"persistent_workers": config.dataloader_persistent_workers,
                   "prefetch_factor": config.dataloader_prefetch_factor,
                   "multiprocessing_context": config.dataloader_multiprocessing_context} \
            if config.dataloader_num_workers > 0 else {}
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=collate,
                          num_workers=config.dataloader_num_workers, generator=generator,
                          drop_last=config.dataloader_drop_last and shuffle, **workers)

    @property
    def _pads_to_buckets(self) -> bool:
        """Only where each new shape costs a kernel plan or a graph (CUDA, MPS): on the CPU a new length costs
        nothing, and padding further is only more compute (clm on the CPU: 12% slower with buckets)."""
        return self.config.pad_to_buckets and self.accelerator.plan.device.new_shapes_cost

    def _eval_loader(self, dataset: Dataset):
        """Prepared once per dataset: the Accelerator saves every prepared loader, and a resumed run must
        prepare the same ones, in the same order, before loading a checkpoint."""
        key = id(dataset)
        if key not in self._eval_loaders:
            loader = self._loader(dataset, self.config.per_device_eval_batch_size, shuffle=False)
            self._eval_loaders[key] = (dataset, self.accelerator.prepare(loader))
        return self._eval_loaders[key][1]

    def _model_for_inference(self) -> torch.nn.Module:
        if self._prepared_model is None:
            self._prepared_model = self.accelerator.prepare(self.model)
        return self._prepared_model

    def _setup_training(self):
        config, acc = self.config, self.accelerator
        check_datasets(self.train_dataset, self.eval_dataset, config.eval_strategy)
        if config.auto_find_batch_size:
            self._find_batch_size()
        model = self._model_for_inference()  # on the device before the optimizer sees its parameters
        loader = self._loader(self.train_dataset, config.per_device_train_batch_size, shuffle=True)
        if len(loader) == 0:
            raise ValueError(f"train_dataset has {len(self.train_dataset)} samples: with per_device_train_batch_size="
                             f"{config.per_device_train_batch_size} and drop_last that is no batch at all. Pass more "
                             "data or a smaller batch size.")
        loader = acc.prepare(loader)  # first: sharded, its length is this process's batches per epoch
        steps_per_epoch = math.ceil(len(loader) / config.gradient_accumulation_steps)
        max_steps = config.max_steps if config.max_steps > 0 else math.ceil(config.num_train_epochs * steps_per_epoch)
        max_steps = self._short_run(max_steps)
        rate_from_config = self.optimizer is None and not self._overrides.create_optimizer  # config.learning_rate
        self.create_optimizer()  # Transformers' order: the optimizer, then its scheduler (hf_overrides.py)
        self.create_scheduler(num_training_steps=max_steps)
        scheduler = self.lr_scheduler  # unprepared: the interval policy reads its type
        self.optimizer = acc.prepare(self.optimizer)
        self.lr_scheduler = acc.prepare_scheduler(scheduler, once_per_step=True)  # the schedule counts optimizer steps
        self._scheduler_steps = self._scheduler_policy(scheduler, steps_per_epoch)
        if self.eval_dataset is not None and config.eval_strategy != "no":
            self._eval_loader(self.eval_dataset)  # prepared now, before a checkpoint is loaded
        self.state = TrainerState(max_steps=max_steps, steps_per_epoch=steps_per_epoch,
                                  num_epochs=math.ceil(max_steps / steps_per_epoch),
                                  per_device_train_batch_size=config.per_device_train_batch_size,
                                  num_processes=acc.num_processes,
                                  gradient_accumulation_steps=config.gradient_accumulation_steps,
                                  learning_rate=config.learning_rate if rate_from_config else None,
                                  train_samples=samples_in(self.train_dataset))
        self._samples_per_batch = config.per_device_train_batch_size * acc.num_processes
        self._parameters = [p for p in model.parameters() if p.requires_grad]  # walked once, not every step
        self._compile_window = CompileWindow(acc)
        return loader

    def _short_run(self, max_steps: int) -> int:
        """BRAEBURN_MAX_STEPS=N (a quick check that a command runs, as the doc tests do) stops at N steps."""
        cap = max_steps_cap()
        if cap is None or cap >= max_steps:
            return max_steps
        self.accelerator.print(f"braeburn: {MAX_STEPS_VAR}={cap}: this run stops after {cap} of its {max_steps} "
                               "optimizer steps (unset it to train in full)")
        return cap

    def _find_batch_size(self) -> None:
        from .autobatch import find_train_batch_size

        self.config.per_device_train_batch_size = find_train_batch_size(self)

    def _elastic_resume(self) -> str | None:
        """A worker torchrun restarted (braeburn launch --max-restarts) resumes from the latest checkpoint."""
        from ..distributed import elastic

        if not elastic.is_restarted():
            return None
        request = elastic.resume_request(self.checkpoints.latest())
        if request is None:  # died before the first checkpoint: start again, over what the first attempt wrote
            self.config.overwrite_output_dir = True
        return request

    def _resume(self, request: str, loader) -> None:
        folder, warnings = self.checkpoints.resolve(request)
        saved = self.checkpoints.load(self.accelerator, folder)
        limit = "--max_steps" if self.config.max_steps > 0 else "--num_train_epochs"
        warnings += reconcile(saved, self.state, loader, self.optimizer, self.lr_scheduler, folder, limit,
                              self.stop_past_max_steps)
        for warning in warnings:  # what changed since the checkpoint, and what braeburn does about it
            self.accelerator.print(f"braeburn: warning: {warning}")
        self.state = saved
        moved = self.checkpoints.follow_a_moved_run(saved)  # a run folder copied or moved: its recorded paths
        self.accelerator.print(f"braeburn: resumed from {folder} at step {saved.global_step} (epoch {saved.epoch})"
                               + (f"; {moved}" if moved else ""))

    # -- the end ---------------------------------------------------------------------------------
    def _mean_training_loss(self) -> float:
        try:
            self._take_window_loss()
        except NonFiniteLossError:
            return float("nan")
        total, count = self._loss_total
        return total / count if count else 0.0  # no step trained (a finished resume): 0.0, as Transformers

    def _last_eval_metrics(self) -> dict[str, float]:
        for record in reversed(self.state.log_history):
            if any(key.startswith("eval_") for key in record):
                return {k: v for k, v in record.items() if k.startswith("eval_")}
        return {}

    def _run_record(self) -> dict[str, Any]:
        """What the run did beyond its losses (compile, shapes, where step time went), for metrics.jsonl."""
        record = self._compile_window.record(len(self._shapes))
        if self._precision_record is not None:
            record["precision"] = self._precision_record
        breakdown = self._step_breakdown.record()
        return record if breakdown is None else {**record, "step_breakdown": breakdown}

    def _exit_after_signal(self) -> None:
        checkpoint = self.state.last_checkpoint
        message = stop_message(self.signals.received, self.state.global_step, checkpoint)
        self.accelerator.print(message, flush=True)
        raise TrainingInterrupted(self.signals.received, message, checkpoint)


def _from_model_init(model_init: Callable | None) -> torch.nn.Module:
    if model_init is None:
        raise ValueError("Trainer needs a model: pass Trainer(model=...) (or model_init=a function that returns one)")
    return model_init()


def _no_hf_extras(trial: Any, kwargs: dict[str, Any]) -> None:
    if trial is not None:
        raise ValueError("train(trial=...) is not supported: braeburn has no hyperparameter search; loop over "
                         "configs yourself and build a Trainer per trial")
    if kwargs:
        raise TypeError(f"train() got unexpected arguments {', '.join(sorted(kwargs))}; it takes "
                        "resume_from_checkpoint")


def _metrics_log(config: TrainingConfig) -> MetricsLogCallback:
    """metrics.jsonl always; TensorBoard when report_to asks for it (all or tensorboard)."""
    chosen = config.report_to
    tensorboard = chosen is not None and ("all" in chosen or "tensorboard" in chosen)
    return MetricsLogCallback(tensorboard=tensorboard, tensorboard_dir=config.logging_dir)


def _epoch_finished(loader, epoch: int) -> bool:
    """Whether the prepared loader has yielded every batch of ``epoch`` (it moves to the next one after)."""
    return loader.epoch != epoch or loader.batches_yielded >= len(loader)


__all__ = ["EvalPrediction", "NonFiniteLossError", "PredictionOutput", "TrainOutput", "Trainer", "PlanError"]
