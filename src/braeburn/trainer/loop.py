"""The Trainer: hand it a model and datasets; it trains, evaluates, checkpoints and resumes exactly.

Read :meth:`CoreTrainer.train` and :meth:`CoreTrainer._train_epochs` top to bottom: that is the whole loop.
Everything device-specific is the Accelerator's; this file only orders the work. The loop never
reads a device tensor on the host except on logging, evaluation and save steps (each ``.item()``
or ``float()`` of a device tensor waits for the device: the comments mark where).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from ..checkpoints import output_lock
from ..accelerator.core import Accelerator
from ..data.collate import batch_signature
from ..plan.compile_policy import PreparedForward, prepared_forward
from ..devices.host import current_host
from ..distributed import process_group as pg
from ..plan.envvars import MAX_STEPS_VAR, max_steps_cap
from ..plan.option_spelling import given, option
from ..plan.rules import PlanError
from ..checkpoints.state import enable_full_determinism
from .autobatch import AutoBatchMixin
from .background_save import BackgroundSaver
from . import output_dir_check
from .clipping import StepClipper
from .compile_window import CompileWindow
from .phase_clock import EVALUATION, PhaseClock
from .precision_window import choose_precision
from .batches import batch_inputs, batch_samples, compute_loss, find_label_names, label_smoothed_loss
from .callbacks import CallbackList
from .checkpointing import prepare_model_options
from .collators import make_collate
from .checkpoint import CheckpointManager
from .config import ConfigError, CoreTrainingConfig
from .early_stopping import EarlyStoppingCallback  # noqa: F401  (re-exported for users)
from .frozen_setup import FrozenSetup
from .evaluation import EvaluationMixin
from .loaders import LoadersMixin
from .log_window import LogWindowMixin, NonFiniteLossError
from .saving import SavingMixin
from ..errors import note_once
from .input_checks import check_batch_inputs, check_datasets, check_labels, float_labels_explained
from .metrics_log import MetricsLogCallback
from .optim import default_optimizer, default_scheduler, parameter_groups
from .options_callback import OptionsCallback
from .outputs import EvalPrediction, PredictionOutput, TrainOutput
from .peer_methods import refuse_uncalled
from .scheduler_interval import SchedulerSteps, is_plateau, per_step_note, split_scheduler
from .plots import PlotCallback
from .progress import ProgressCallback
from .resume import reconcile, samples_in
from .summary import run_summary
from .signals import SignalCallback, TrainingInterrupted, stop_message
from .state import TrainerState
from .step_breakdown import StepBreakdownCallback
from .write_faults import OutputDirError


class CoreTrainer(LoadersMixin, LogWindowMixin, EvaluationMixin, SavingMixin, AutoBatchMixin):
    """Train ``model`` on ``train_dataset`` as ``config`` says; see docs/trainer.md.

    braeburn's own Trainer, in braeburn's names (``config=``, ``collate_fn=``, ``loss_fn=``, ``optimizer=``,
    ``lr_scheduler=``). ``braeburn.Trainer`` is this class with the Transformers Trainer's arguments, methods,
    overridable methods and callbacks (compat/transformers/trainer.py). A peer's Trainer adapts the loop by
    overriding its hooks, each a method whose default here is braeburn's (docs/architecture.md lists them).
    """

    stop_past_max_steps = False  # a resume past max_steps: ResumeError; True: restored, nothing trained (resume.py)
    ends_epoch_at_stop = False  # a stop part way through an epoch: True also calls on_epoch_end (Transformers' order)
    flow_at_max_steps = False  # True: the last step evaluates and saves with the steps strategies (Transformers')
    grad_norm_unclipped = False  # max_grad_norm=0: True still computes the gradient norm (one more pass), to log it
    zeroes_unheld_grads = False  # True: each step also drops trainable gradients the optimizer holds none of
    clips_optimizer_parameters = False  # True: clip what the optimizer holds (Lightning's way), not the model's
    # The clip inside a fused AdamW step (clipping.py), off: on an H200 it measured no gain (2.19 against 2.21 ms for
    # the clip and step of GPT-2 small; docs/benchmarks.md Part 3a), and it rounds a clipping step differently.
    folds_clip_into_step = False
    final_save_option = "save_state"  # how a message says to write the model in memory (option_spelling's name)
    peer_methods_called: tuple[str, ...] = ()  # Transformers Trainer methods it calls itself (peer_methods.py)

    def __init__(self, model: torch.nn.Module | None = None, config: CoreTrainingConfig | None = None, *,
                 train_dataset: Dataset | None = None, eval_dataset: Dataset | None = None,
                 collate_fn: Callable | None = None, processing_class: Any = None,
                 loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
                 optimizer: torch.optim.Optimizer | None = None, lr_scheduler: Any = None,
                 compute_metrics: Callable[[EvalPrediction], dict] | None = None,
                 preprocess_logits_for_metrics: Callable | None = None, callbacks: list[Any] | None = None,
                 accelerator: Accelerator | None = None):
        refuse_uncalled(type(self))  # a Transformers-style subclass: its overrides would never run
        self.config = config or CoreTrainingConfig()
        errors = self.config.validate()
        if errors:
            raise ConfigError(errors)
        if self.config.full_determinism:  # before the Accelerator: its variables must precede any GPU work
            enable_full_determinism()
        from ..accelerator.trackers import resolve_log_with

        resolve_log_with(self.config.report_to)  # a tracker asked for but not installed: say so now
        model, optimizer, loss_fn = self._resolve_parts(model, optimizer, loss_fn)
        if isinstance(eval_dataset, Mapping):
            raise ValueError("eval_dataset is a dict of datasets, which braeburn's Trainer does not take: call "
                             "trainer.evaluate(dataset, metric_key_prefix=f'eval_{name}') for each one")
        if loss_fn is None and self.config.label_smoothing_factor > 0:
            loss_fn = label_smoothed_loss(self.config.label_smoothing_factor)
        lr_scheduler, self._scheduler_interval = split_scheduler(lr_scheduler)  # Lightning's dict: its interval
        self.processing_class = processing_class
        self.preprocess_logits_for_metrics = preprocess_logits_for_metrics
        self.accelerator = accelerator or self._make_accelerator()
        if not getattr(self.config, "dataloader_pin_memory", True):  # Transformers' dataloader_pin_memory=False
            self.accelerator.pin_memory_allowed = False
        plan = self.accelerator.plan  # compile=True, asked: refused with checkpointing that needs a replay
        prepare_model_options(model, self.config, plan.device, current_host(), plan.compile and not plan.compile_auto)
        self.accelerator.defer_compile = True  # compiled (or not) once the first steps are measured
        self.model = model
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.data_collator = collate_fn
        self.collate_fn = make_collate(model, self.config, self.data_collator, self.processing_class)
        self.compute_metrics, self.loss_fn = compute_metrics, loss_fn
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        self.output_dir = Path(self.config.output_dir).resolve()
        self.checkpoints = CheckpointManager(self.output_dir, self.config.save_total_limit)
        self._saver = BackgroundSaver(self.checkpoints)
        self._frozen_setup = FrozenSetup(self.config.freeze_heap)  # gc.freeze() after step 1 (frozen_setup.py)
        self._best_step: int | None = None  # the step of the best evaluation, until its checkpoint is saved
        self._best_before: str | None = None
        self.callbacks = self._callbacks(callbacks or [])
        self.state = TrainerState()
        self._prepared_model: torch.nn.Module | None = None
        self._eval_loaders: dict[int, tuple[Dataset, Any]] = {}
        self._train_loader: Any = None  # prepared by train()
        self._train_forward: tuple[Any, PreparedForward | None] = (None, None)
        self._inputs_checked = False  # the first training batch is checked once (input_checks.py)
        self._shapes: set[tuple] = set()  # distinct training batch shapes: each costs kernel plans, or a graph

    def _callbacks(self, user_callbacks: list[Any]) -> CallbackList:
        """braeburn's own callbacks (progress, metrics.jsonl, plot, signals, ...), then the user's."""
        self.signals = SignalCallback()
        self._metrics_log, self._plot = self._make_metrics_log(), PlotCallback()
        self._step_breakdown = StepBreakdownCallback(str(self.config.step_breakdown).lower())
        self._phases = PhaseClock()  # where train()'s time went (phase_clock.py); new at each train()
        builtins = [ProgressCallback(disable=self.config.disable_tqdm), self._metrics_log, self._plot, self.signals,
                    OptionsCallback(), self._step_breakdown]
        return CallbackList(self._order_callbacks(builtins, [self._adapt_callback(c) for c in user_callbacks]))

    def _make_metrics_log(self) -> MetricsLogCallback:
        """metrics.jsonl, and TensorBoard as report_to asks. A hook: a peer's Trainer writes its own folders and tags."""
        return _metrics_log(self.config)

    def _order_callbacks(self, builtins: list[Any], users: list[Any]) -> list[Any]:
        """braeburn's callbacks first, then the user's. A hook: a peer's Trainer runs its options' actions (the
        logs, evaluations and best-model load that OptionsCallback does) after the user's hooks, as it does."""
        return builtins + users

    @property
    def is_main_process(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def label_names(self) -> list[str]:
        """The batch keys that hold the labels: ``config.label_names``, else those the model's forward names."""
        names = getattr(self, "_label_names", None)
        if names is None:
            names = list(self.config.label_names or find_label_names(self._unwrapped_for_labels()))
        return names

    @label_names.setter
    def label_names(self, names: list[str]) -> None:
        self._label_names = list(names)

    def _unwrapped_for_labels(self) -> Any:
        base = getattr(self.model, "get_base_model", None)  # a PEFT model: its base names the labels
        return base() if callable(base) else self.model

    # -- hooks: braeburn's defaults; a peer's Trainer (compat/) overrides them ----------------------------
    def _resolve_parts(self, model: Any, optimizer: Any, loss_fn: Any) -> tuple[Any, Any, Any]:
        """The model, optimizer and loss_fn of the run, from what was passed (a peer adds its own ways to pass them)."""
        if model is None:
            raise ValueError("Trainer needs a model: pass Trainer(model=...)")
        return model, optimizer, loss_fn

    def _make_accelerator(self) -> Accelerator:
        """The Accelerator the config asks for, when none was passed: braeburn's, with braeburn's own options
        (``braeburn.TrainingConfig`` spells its accelerator_options() for Accelerate's Accelerator)."""
        return Accelerator(**CoreTrainingConfig.accelerator_options(self.config))

    def _adapt_callback(self, callback: Any) -> Any:
        """A user's callback as the callback list takes it (a peer wraps callbacks written for its own Trainer)."""
        return callback

    # -- the run --------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None) -> TrainOutput:
        """Train; resume from a checkpoint folder or "latest" (True) when asked. Returns the final step, loss and metrics."""
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
        if resume:
            self._check_resumable(resume)
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
        state = self.state  # the cadences, as Transformers' state carries them (eval_steps unset: its 500)
        state.logging_steps, state.save_steps = config.logging_steps, config.save_steps
        state.eval_steps = config.eval_steps or (config.logging_steps if config.eval_strategy == "steps" else 500)
        started, start_step, start_samples = time.perf_counter(), self.state.global_step, self.state.samples_seen
        self.callbacks.on_train_begin(self, self.state)
        try:
            self._train_through_out_of_memory(train_loader)  # _train_epochs; auto_find_batch_size: halves on OOM
            self.signals.settle(self.state)  # a signal on any rank during the last step: all ranks save and stop
            self._metrics_log.write_record({"step": self.state.global_step, "run": self._run_record()})
            self._save_at_stop()
            seconds = time.perf_counter() - started  # the summary is logged before on_train_end, as Transformers'
            metrics = self._train_metrics(seconds, self.state.global_step - start_step,
                                          self.state.samples_seen - start_samples)
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
                    self._frozen_setup.release()
        samples = self.state.samples_seen - start_samples  # really trained: a short last batch counts its own
        summary = run_summary(self, seconds, self.state.global_step - start_step, samples)
        acc.print(summary)
        # The group stays for evaluate()/predict() after train(), which gather from every rank (destroyed at exit);
        # a signal ends the process on every rank together, so it is torn down now, all ranks meeting first.
        acc.end_training(keep_process_group=self.signals.received is None)
        if self.signals.received is not None:
            self._exit_after_signal()
        failure = self._save_log.failure(self.state.last_checkpoint, self.state.global_step, self.final_save_option)
        if failure is not None:  # the final weights are on no disk: a job must not report success (exit 1)
            raise failure
        metrics = {**self._eval_metrics_in_train_output(), **metrics}
        return TrainOutput(self.state.global_step, metrics["train_loss"], metrics)

    def _train_epochs(self, loader) -> None:
        """The loop. Host-device syncs happen only in log_now, _evaluate_and_save and _check_finite."""
        state, config, acc = self.state, self.config, self.accelerator
        model, optimizer, scheduler = self._prepared_model, self.optimizer, self.lr_scheduler
        window = self._compile_window
        window.begin(model, state.global_step, state.max_steps, config.per_device_train_batch_size)
        self._clipper.follow(model)
        model.train()
        for epoch in range(loader.epoch, state.num_epochs):  # loader.epoch: 0, or where a resumed run stopped
            loader.set_epoch(epoch)
            batches_in_epoch = len(loader)  # read once an epoch, not at every step's fractional epoch
            self.callbacks.on_epoch_begin(self, state)
            step_begun = False
            for batch in loader:  # already on the device (a resumed epoch skips the batches done)
                if not step_begun:
                    self.callbacks.on_step_begin(self, state)
                    step_begun = True
                context = acc.accumulate(model)  # sets sync_gradients; a null context on one process, not entered
                if type(context) is contextlib.nullcontext:
                    self._micro_batch(model, batch)  # forward and backward
                else:
                    with context:  # DDP's no_sync off the boundary
                        self._micro_batch(model, batch)
                if acc.sync_gradients:  # (outside the context: no_sync is entered only on steps that do not step)
                    self._optimizer_step(model, optimizer, scheduler)
                state.samples_seen += batch_samples(batch, loader, self._samples_per_batch, acc.num_processes)
                if not acc.sync_gradients:
                    continue
                step_begun = False
                state.global_step += 1
                state.epoch = epoch + loader.batches_yielded / batches_in_epoch  # Transformers' fractional epoch
                if window.pending:  # compile=auto decides from eager steps 4-13, timed (a sync on each of steps 3-13)
                    model = self._prepared_model = window.after_step(state.global_step, model, self._shapes)
                    self._clipper.follow(model)
                if self._frozen_setup.pending:  # the heap as setup left it, out of the collector's walks
                    self._frozen_setup.after_first_step()
                self.callbacks.on_step_end(self, state)
                on_cadence = config.logging_strategy == "steps" and state.global_step % config.logging_steps == 0
                if on_cadence or state.should_log:  # should_log: a callback asked during on_step_end
                    state.should_log = False
                    self.log_now()
                self._evaluate_and_save(step_end=True)
                if state.should_stop or state.global_step >= state.max_steps:
                    break
            if _epoch_finished(loader, epoch) and state.epochs_ended <= epoch:  # a resume at its end: done already
                state.epochs_ended = epoch + 1
                self._scheduler_steps.after_epoch(epoch)  # before the epoch's checkpoint, which holds its state
                self.callbacks.on_epoch_end(self, state)
                self._evaluate_and_save(step_end=False)
            elif self.ends_epoch_at_stop:  # stopped part way through: the epoch's end as Transformers has it
                self.callbacks.on_epoch_end(self, state)
                self._evaluate_and_save(step_end=False)
            if state.should_stop or state.global_step >= state.max_steps:
                return

    def _micro_batch(self, model: torch.nn.Module, batch: Any) -> None:
        """Forward and backward of one micro-batch; its loss joins the window until the next log. A hook: a peer's
        Trainer routes it to a subclass's own training step."""
        loss = self.forward_loss(model, batch)
        if self.config.nan_policy == "skip" and not torch.isfinite(loss):  # sync: the price of "skip"
            self._skipped += 1
            return
        self.accelerator.backward(loss)
        self._keep_loss(loss)

    @property
    def _has_own_training_step(self) -> bool:
        """Whether a subclass runs the micro-batch itself (the precision trial cannot time it apart from the run).
        A hook: never here; a peer's Trainer says when a subclass overrode its training step."""
        return False

    def forward_loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        """The training loss of one batch (the forward, without the backward), as the loop computes it; the
        batch-size search and the precision trial call it too."""
        self._shapes.add(batch_signature(batch))
        return self._batch_loss(model, batch)

    def _batch_loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        """The model's forward and the loss (``loss_fn``'s, or the model's own). A hook: a peer's Trainer routes
        it to a subclass's own loss."""
        args, kwargs, labels = batch_inputs(batch, pass_labels=self.loss_fn is None)
        if self._inputs_checked:  # every batch after the first: no checks, no context
            return self._forward_and_loss(model, args, kwargs, labels)
        check_batch_inputs(kwargs)
        with float_labels_explained(labels):
            loss = self._forward_and_loss(model, args, kwargs, labels, first=True)
        self._inputs_checked = True
        return loss

    def _forward_and_loss(self, model: torch.nn.Module, args: tuple, kwargs: dict, labels: Any,
                          first: bool = False) -> torch.Tensor:
        own_loss = self.loss_fn is None  # the model computes the loss: both hooks below look at its outputs
        forward = self._outputs_as_computed(model) if own_loss else None
        try:
            outputs = model(*args, **kwargs)  # a prepared model autocasts
            outputs = self._loss_outputs(outputs, labels) if own_loss else outputs
        finally:
            if forward is not None:
                forward.float_outputs = True
        if first:
            check_labels(outputs, labels)  # one sync, on the first batch only
        loss = compute_loss(outputs, labels, self.loss_fn)
        return loss.float() if forward is not None and loss.dtype in (torch.float16, torch.bfloat16) else loss

    def _loss_outputs(self, outputs: Any, labels: Any) -> Any:
        """The model's outputs as the loss is read from them (``.loss`` or ``["loss"]``), where the model computes
        it (no loss_fn). A hook: a peer's Trainer reads a tuple's first item as the loss, as the peer does."""
        return outputs

    def _outputs_as_computed(self, model: torch.nn.Module) -> PreparedForward | None:
        """Where the model computes the loss itself (no loss_fn), a training forward returns its outputs as
        computed: the logits are not copied to float32 (for GPT-2 small at batch 8 that copy is 1.6 GB written per
        step, and memory at the forward's peak), since nothing reads them. The returned forward has float_outputs
        off until the caller turns it back on. Asked only without a loss_fn."""
        if self._train_forward[0] is not model:  # once per prepared (or newly compiled) model
            self._train_forward = (model, prepared_forward(self.accelerator.unwrap_model(model)))
        forward = self._train_forward[1]
        if forward is None or forward.stats.over_wrapper:  # traced inside a compiled wrapper: no flag flips there
            return None
        forward.float_outputs = False
        return forward

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
            grad_norm = self._clipper.before_step(optimizer)  # clipped now, or by the fused step (clipping.py)
            self._grad_norm = grad_norm if grad_norm is not None else self._grad_norm
            optimizer.step()
            self.callbacks.on_optimizer_step(self, self.state)
            self._step_lr = scheduler.get_last_lr()[0]  # the rate this step used: Transformers logs it
            self._scheduler_steps.after_optimizer_step(self.state.global_step + 1)
        self._clipper.zero_grad(optimizer, unheld=self.zeroes_unheld_grads)
        self._window_has_grads = False

    # -- evaluation and saving ----------------------------------------------------------------------
    def _evaluate_and_save(self, step_end: bool) -> None:
        state, config = self.state, self.config
        self._saver.poll()  # a background save that has finished since: its on_save fires now
        if step_end and not (state.should_evaluate or state.should_save) and config.eval_strategy != "steps" \
                and config.save_strategy != "steps":
            return  # most steps: nothing asked for, and no step cadence to look at
        strategy_now = "steps" if step_end else "epoch"
        eval_every = config.eval_steps or config.logging_steps
        last = step_end and self.flow_at_max_steps and state.global_step >= state.max_steps
        asked, state.should_evaluate = step_end and state.should_evaluate, False  # a callback, in on_step_end
        if asked or (config.eval_strategy == strategy_now and (not step_end or state.global_step % eval_every == 0
                                                               or last)):
            with self._phases.timed(EVALUATION):
                metrics = self.evaluate()
            self._scheduler_steps.after_evaluate(metrics)  # ReduceLROnPlateau's step, as Transformers
        wants_save = config.save_strategy == strategy_now and (not step_end or state.global_step % config.save_steps == 0
                                                               or last)
        if wants_save or state.should_save:
            self._save()

    # -- setup -----------------------------------------------------------------------------------
    def _check_output_dir(self, resume: str | None) -> None:
        out = self.output_dir
        if out.exists() and not out.is_dir():
            raise FileExistsError(f"{given('output_dir', str(out))} is a file, not a folder. Pass a folder to "
                                  f"{option('output_dir')}.")
        output_dir_check.lock(self)  # a run that holds it is named first, whatever the folder holds
        refusal: OSError | None = None
        if self.is_main_process:  # writes over nothing braeburn did not write; sets an earlier run aside
            try:
                output_dir_check.ready(self, not (self.config.overwrite_output_dir or resume), self.accelerator.print)
            except OSError as error:
                refusal = error
        if not pg.all_ok(refusal is None, self.accelerator.device):
            raise refusal or OutputDirError(f"output_dir={str(out)!r} was refused by rank 0 (its error says why)")

    def prepared_model(self) -> torch.nn.Module:
        """The model as the Accelerator prepared it (on the device; wrapped for DDP or FSDP), prepared at the first
        call: training, evaluation and the batch-size search run it."""
        if self._prepared_model is None:
            self._prepared_model = self.accelerator.prepare(self.model)
        return self._prepared_model

    def _setup_training(self):
        config, acc = self.config, self.accelerator
        check_datasets(self.train_dataset, self.eval_dataset, config.eval_strategy)
        if config.auto_find_batch_size:
            self.config.per_device_train_batch_size = self._find_train_batch_size()
        model = self.prepared_model()  # on the device before the optimizer sees its parameters
        loader = self._train_dataloader()
        if len(loader) == 0:
            raise ValueError(f"train_dataset has {len(self.train_dataset)} samples: with per_device_train_batch_size="
                             f"{config.per_device_train_batch_size} and drop_last that is no batch at all. Pass more "
                             "data or a smaller batch size.")
        loader = self._train_loader = acc.prepare(loader)  # first: sharded, its length is this process's batches
        steps_per_epoch = math.ceil(len(loader) / config.gradient_accumulation_steps)
        max_steps = config.max_steps if config.max_steps > 0 else math.ceil(config.num_train_epochs * steps_per_epoch)
        max_steps = self._short_run(max_steps)
        rate_from_config = self._make_optimizer()  # Transformers' order: the optimizer, then its scheduler
        self._make_scheduler(max_steps)
        scheduler = self.lr_scheduler  # unprepared: the interval policy reads its type
        self.optimizer = acc.prepare(self.optimizer)
        self.lr_scheduler = acc.prepare_scheduler(scheduler, once_per_step=True)  # the schedule counts optimizer steps
        self._scheduler_steps = self._scheduler_policy(scheduler, steps_per_epoch)
        self._prepare_eval_loaders()  # prepared now, before a checkpoint is loaded
        self.state = TrainerState(max_steps=max_steps, steps_per_epoch=steps_per_epoch,
                                  num_epochs=math.ceil(max_steps / steps_per_epoch),
                                  per_device_train_batch_size=config.per_device_train_batch_size,
                                  num_processes=acc.num_processes,
                                  gradient_accumulation_steps=config.gradient_accumulation_steps,
                                  learning_rate=config.learning_rate if rate_from_config else None,
                                  train_samples=samples_in(self.train_dataset))
        self._samples_per_batch = config.per_device_train_batch_size * acc.num_processes
        self._parameters = list(model.parameters())  # walked once; those with a gradient are clipped at each step
        self._clipper = StepClipper(config, acc, self._parameters, measure_unclipped=self.grad_norm_unclipped,
                                    fold=self.folds_clip_into_step,
                                    optimizer_parameters=self.clips_optimizer_parameters)
        self._compile_window = CompileWindow(acc)
        return loader

    def _train_dataloader(self) -> Any:
        """The training loader, shuffled (prepared by the caller). A hook: the Transformers Trainer asks a subclass's
        get_train_dataloader."""
        return self._loader(self.train_dataset, self.config.per_device_train_batch_size,
                            shuffle=self.config.shuffles_training, train=True)

    def _make_optimizer(self, model: torch.nn.Module | None = None) -> bool:
        """``self.optimizer``, built from the config (optim, learning_rate, weight_decay, ...) when none was given;
        True when it was, so that the config's learning_rate is the run's. A hook: a peer's Trainer routes it to a
        subclass's own optimizer factory."""
        if self.optimizer is not None:
            return False
        acc = self.accelerator
        model = model if model is not None else acc.unwrap_model(self.prepared_model())
        self.optimizer = default_optimizer(model, self.config, acc.plan.device, grad_scaler=acc.plan.grad_scaler,
                                           groups=self._parameter_groups(model))
        return True

    def _parameter_groups(self, model: torch.nn.Module) -> list[dict]:
        """The default optimizer's parameter groups: what decays (optim.parameter_groups: by shape). A hook: a peer's
        Trainer decides by name, as the peer does."""
        return parameter_groups(model, self.config.weight_decay)

    def _make_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None) -> None:
        """``self.lr_scheduler``, built from lr_scheduler_type and the warm-up when none was given. A hook, as
        :meth:`_make_optimizer`."""
        if self.lr_scheduler is None:
            self.lr_scheduler = default_scheduler(optimizer or self.optimizer, self.config, num_training_steps)

    def _short_run(self, max_steps: int) -> int:
        """BRAEBURN_MAX_STEPS=N (a quick check that a command runs, as the doc tests do) stops at N steps."""
        cap = max_steps_cap()
        if cap is None or cap >= max_steps:
            return max_steps
        self.accelerator.print(f"braeburn: {MAX_STEPS_VAR}={cap}: this run stops after {cap} of its {max_steps} "
                               "optimizer steps (unset it to train in full)")
        return cap

    def _elastic_resume(self) -> str | None:
        """A worker torchrun restarted (braeburn launch --max-restarts) resumes from the latest checkpoint."""
        from ..distributed import elastic

        if not elastic.is_restarted():
            return None
        request = elastic.resume_request(self.checkpoints.latest())
        if request is None:  # died before the first checkpoint: start again, over what the first attempt wrote
            self.config.overwrite_output_dir = True
        return request

    def _check_resumable(self, request: str) -> None:
        """Before anything is written: a checkpoint this Trainer cannot resume is refused. A hook: here a checkpoint
        of Transformers' Trainer; the Transformers Trainer resumes one (into another output_dir)."""
        self.checkpoints.refuse_transformers_checkpoint(request)

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
    def _eval_metrics_in_train_output(self) -> dict[str, float]:
        """The last evaluation's metrics, which braeburn's train() also returns (a peer's Trainer may not)."""
        return self._last_eval_metrics()

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


def _metrics_log(config: CoreTrainingConfig) -> MetricsLogCallback:
    """metrics.jsonl always; TensorBoard when report_to asks for it (all or tensorboard)."""
    chosen = config.report_to
    tensorboard = chosen is not None and ("all" in chosen or "tensorboard" in chosen)
    return MetricsLogCallback(tensorboard=tensorboard, tensorboard_dir=config.logging_dir)


def _epoch_finished(loader, epoch: int) -> bool:
    """Whether the prepared loader has yielded every batch of ``epoch`` (it moves to the next one after)."""
    return loader.epoch != epoch or loader.batches_yielded >= len(loader)


def __getattr__(name: str) -> Any:
    """The public class at its path from before the layout (``braeburn.trainer.loop.Trainer``
    is ``braeburn.Trainer``; this module's class is CoreTrainer): see braeburn.trainer.PUBLIC_NAMES."""
    from . import public

    return public(f"loop.{name}")


__all__ = ["EvalPrediction", "NonFiniteLossError", "PredictionOutput", "TrainOutput", "CoreTrainer", "PlanError"]
