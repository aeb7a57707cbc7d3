"""The Accelerator: your own training loop, on the best device, with the right precision.

It composes the pieces and holds no device facts: the plan (``braeburn.plan.rules.make_plan``) chooses the
device kind, precision and strategy; the device kind answers every device question; the precision
policy owns autocast and the grad scaler; ``data`` moves and shards batches; ``state`` writes
checkpoints; ``distributed`` talks to the process group.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import os
from collections.abc import Sequence
from typing import Any

import torch

from . import checkpoint_replay, clip_fold, probe
from ..plan import compile_policy
from ..checkpoints import output_lock
from .compile import CompileMixin, mostly_convolutions
from .state_files import StateFilesMixin
from ..data.loader import (BatchTracker, DeviceDataLoader, apply_to_tensors, float64_batch_reason, float64_model_kept,
                           truncate_padding)
from ..devices.host import current_host
from ..distributed import fsdp
from ..distributed import process_group as pg
from ..plan.envvars import COMPILE_VAR, MIXED_PRECISION_VAR, STRATEGY_VAR, env_default, env_device, env_device_reason
from ..devices.fallback import FallbackRecorder, early_env_advice, early_env_conflicts
from ..plan.option_spelling import shown
from ..plan.rules import OptionError, Plan, PlanError, RunOptions, make_plan
from ..plan.precision import PrecisionPolicy, make_policy
from .prepared_optim import USUALLY_PER_EPOCH, AcceleratedOptimizer, AcceleratedScheduler
from ..checkpoints import state as state_io
from ..warn import warn

_said_once: set[str] = set()


def say_once(message: str, *, as_warning: bool = False) -> None:
    """``message`` printed (or warned), once per process."""
    if message in _said_once:
        return
    _said_once.add(message)
    if as_warning:
        warn(message, stacklevel=3)
    else:
        print(message, flush=True)


_NO_CONTEXT = contextlib.nullcontext()  # reusable: nullcontext keeps no state


def _is_scheduler(obj: Any) -> bool:
    return isinstance(obj, (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau))



class Accelerator(StateFilesMixin, CompileMixin):
    """Make a hand-written training loop run on the best device, with the right precision, on 1..N processes.

    Every argument left at "auto" is resolved by :func:`braeburn.plan.rules.make_plan` (the launcher's
    BRAEBURN_* variables fill them first); an impossible choice raises :class:`PlanError` listing all.
    braeburn's own Accelerator; ``braeburn.Accelerator`` is this class with Accelerate's other names and
    ``Accelerator(...)`` arguments (compat/accelerate/accelerator.py), which fills the hooks below.

    ``data_seed``: the seed of the prepared DataLoaders' order (default: ``seed``, else torch's initial seed);
    ``ddp_options``: DistributedDataParallel's own keyword arguments; ``process_group_timeout``: a timedelta for
    the process group (default: torch's); ``fsdp_units``: with strategy="fsdp", auto (one FSDP unit for a model
    DDP could hold, else one per block), block (one per block, as Accelerate's TRANSFORMER_BASED_WRAP) or root (one).
    """

    pin_memory_allowed = True  # False: prepared loaders never pin host memory (Transformers' dataloader_pin_memory)
    _state_names = state_io.BRAEBURN_NAMES  # save_state()'s file names (braeburn.Accelerator: Accelerate's)

    def __init__(self, cpu: bool = False, mixed_precision: str = "auto", gradient_accumulation_steps: int = 1,
                 accelerator: str = "auto", devices="auto", strategy: str = "auto", compile="auto",
                 seed: int | None = None, mps_fallback: bool = True, step_scheduler_with_optimizer: bool = True,
                 compile_backend: str = "inductor", compile_mode: str | None = None, *, data_seed: int | None = None,
                 ddp_options: dict[str, Any] | None = None, process_group_timeout: Any = None,
                 fsdp_units: str = "auto"):
        if fsdp_units not in fsdp.UNITS:
            raise ValueError(f"fsdp_units={fsdp_units!r}: choose one of {', '.join(fsdp.UNITS)} (auto: one FSDP unit "
                             "for a model DDP could hold, else one per block; block: one per block; root: one)")
        self._fsdp_units = fsdp_units
        world = pg.world_from_env()
        self.plan: Plan = self._make_plan(cpu, mixed_precision, gradient_accumulation_steps, accelerator, devices,
                                          strategy, compile, mps_fallback, world.world_size)
        kind = self.plan.device
        self.device: torch.device = kind.torch_device(world.local_rank)
        self.precision: str = self.plan.precision
        self.num_processes, self.process_index = world.world_size, world.rank
        self.local_process_index = world.local_rank
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.sync_gradients = True
        self.seed = seed
        self._owns_process_group = False
        if world.distributed:
            self._owns_process_group = pg.init_process_group(self.plan.backend, world, self.device,
                                                             process_group_timeout)
        if seed is not None:
            state_io.seed_everything(seed, kind)
        self._policy = make_policy(self.plan.precision, self.plan.grad_scaler, self.device,
                                   kind.fused_optimizers_honour_grad_scaler(current_host()))
        self._tracker = BatchTracker()
        self._float64_model = False  # a model made float64 by the user, kept so: its batches stay float64
        self._accumulation_step = 0
        self._models: list[torch.nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[DeviceDataLoader] = []
        self._data_seed: int | None = data_seed if data_seed is not None else seed
        self._data_seed_given = self._data_seed is not None  # (else set from torch's seed at the first prepare)
        self._ddp_options = dict(ddp_options or {})
        self.compile_backend, self.compile_mode = compile_backend, compile_mode
        self.defer_compile = False  # the Trainer sets it: it compiles once it has measured eager steps
        self._fallback = FallbackRecorder(count_every_call=kind.cpu_fallback_warns_once).start()
        replays = kind.checkpoint_replays_rng(current_host())  # else braeburn replays it (checkpoint_replay.py)
        self._checkpoint_patch = None if replays else checkpoint_replay.CheckpointPatch(kind)
        self._recompute_guard = _NO_CONTEXT if replays else checkpoint_replay.RecomputeGuard(kind,
                                                                                           self._checkpoint_patch)
        self._locked: dict[str, None] = {}  # state folders save_state() holds the lock of, oldest first
        self._announce()

    @staticmethod
    def _make_plan(cpu, mixed_precision, gradient_accumulation_steps, accelerator, devices, strategy, compile,
                   mps_fallback, world_size) -> Plan:
        options = RunOptions(
            accelerator=accelerator, devices=devices, cpu=cpu, env_device=env_device(),
            env_device_reason=env_device_reason(),
            mixed_precision=env_default(MIXED_PRECISION_VAR, mixed_precision), num_processes=world_size,
            strategy=env_default(STRATEGY_VAR, strategy),
            compile=env_default(COMPILE_VAR, compile) if isinstance(compile, str) else compile,
            mps_fallback=mps_fallback)
        errors: list[OptionError] = []
        steps = gradient_accumulation_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            errors.append(OptionError("gradient_accumulation_steps", steps, "must be a whole number >= 1 "
                                      "(1 means an optimizer step after every batch)"))
        try:
            plan = make_plan(options, current_host())
        except PlanError as error:
            raise PlanError(error.errors + errors) from None
        # mps_fallback is this class's only option that travels in the environment
        errors += [OptionError("mps_fallback", mps_fallback, f"asks for {name}={wanted}, but {why}")
                   for name, wanted, why in early_env_conflicts(plan.env, current_host(), os.environ)]
        # what torch reads at load or at the first allocation, checked before that fails (start of a run)
        errors += [OptionError("", None, problem) for problem in plan.device.env_problems(os.environ, current_host().system)]
        if errors:
            raise PlanError(errors)
        return plan

    def _announce(self) -> None:
        plan = self.plan
        if self.is_main_process:
            say_once(f"braeburn: training on {self.device} ({plan.device_reason}); precision "
                     f"{shown('mixed_precision', plan.precision)}: {plan.precision_reason}")
        advice = early_env_advice(plan.env, current_host(), os.environ)
        if advice:
            say_once(f"braeburn: {advice}", as_warning=True)
        for note in plan.notes:
            say_once(f"braeburn: {note}", as_warning=True)

    # -- who am I -----------------------------------------------------------------------------
    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the grad scaler skipped the last optimizer step (inf/nan gradients)."""
        for optimizer in self._optimizers:  # (asked at every step: a loop costs less than any() of a generator)
            if optimizer.step_was_skipped:
                return True
        return False

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        return self._policy.scaler

    def __repr__(self) -> str:
        return (f"Accelerator(device={self.device}, precision={self.precision!r}, processes={self.num_processes}, "
                f"strategy={self.plan.strategy!r}, gradient_accumulation_steps={self.gradient_accumulation_steps})")

    # -- prepare ------------------------------------------------------------------------------
    def prepare(self, *objects: Any) -> Any:
        """Models, optimizers, DataLoaders and LR schedulers, in any order; returned in the same order."""
        prepared: list[Any] = list(objects)
        for index, obj in enumerate(objects):  # schedulers last: they look at the prepared optimizers
            if not _is_scheduler(obj):
                prepared[index] = self._prepare_one(obj)
        for index, obj in enumerate(objects):
            if _is_scheduler(obj):
                prepared[index] = self._prepare_scheduler(obj)
        models = [self.unwrap_model(obj) for obj in prepared if isinstance(obj, torch.nn.Module)]
        if models:
            probe.after_prepare(self, models)
        return prepared[0] if len(prepared) == 1 else tuple(prepared)

    def _prepare_one(self, obj: Any) -> Any:
        if isinstance(obj, torch.nn.Module):
            return self._prepare_model(obj)
        if isinstance(obj, AcceleratedOptimizer) or isinstance(obj, DeviceDataLoader):
            return obj
        if isinstance(obj, torch.optim.Optimizer):
            optimizer = AcceleratedOptimizer(obj, self)
            self._optimizers.append(optimizer)
            return optimizer
        if isinstance(obj, torch.utils.data.DataLoader):
            return self._prepare_dataloader(obj)
        return obj

    @property
    def shards_model(self) -> bool:
        """True when prepared models are sharded with FSDP (strategy="fsdp" on several processes)."""
        return self.plan.strategy == "fsdp" and self.num_processes > 1

    def _prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        self._float64_model |= float64_model_kept(model, self.plan.device.float64_cast_reason())
        model = model.to(self.device)
        if self.plan.device.channels_last_helps and mostly_convolutions(model):
            # cuDNN's NHWC kernels on tensor cores: the same math, a faster layout for convolutions
            model = model.to(memory_format=torch.channels_last)
        self._replay_checkpointing(model)
        forward = compile_policy.install_forward(
            model, self._policy.autocast if self._policy.dtype is not None else None, self.plan.device.synchronize)
        forward.around = self._checkpoint_patch
        forward.around_compiled = self._checkpoint_patch and self._checkpoint_patch.compiled_forward
        if self.shards_model:  # in place: the module stays the user's, its parameters become shards
            model = fsdp.wrap_fsdp(model, self.device, self.num_processes, self._policy.dtype,
                                   device_bytes=self.plan.device.memory_stats().get("total_bytes"),
                                   **self._fsdp_unit_groups())
        elif self.num_processes > 1:
            model = pg.wrap_ddp(model, self.device, **self._ddp_options)
        decision = self.compile_decision(model)
        forward.stats.reason = decision.reason
        if decision.compile and not self.defer_compile:
            model = self._compile(model, forward, decision)
        self._models.append(model)
        return model

    def _fsdp_unit_groups(self) -> dict[str, Any]:
        """wrap_fsdp's unit_groups where the user chose (fsdp_units); "auto" passes none: wrap_fsdp's default holds."""
        return {} if self._fsdp_units == "auto" else {"unit_groups": fsdp.UNITS[self._fsdp_units]}

    def _float64_batch_reason(self) -> str | None:
        return float64_batch_reason(self.plan.device.float64_cast_reason(), self._float64_model)

    _loader_type: type[DeviceDataLoader] = DeviceDataLoader  # hook: braeburn.Accelerator's reports Accelerate's values

    def _torch_shuffle(self, loader: torch.utils.data.DataLoader) -> tuple[str, int] | None:
        """Hook (braeburn.Accelerator's): a ShardSampler order other than the seeded one, and its seed."""

    def _prepare_dataloader(self, loader: torch.utils.data.DataLoader) -> DeviceDataLoader:
        prepared = self._device_loader(loader)
        self._dataloaders.append(prepared)
        return prepared

    def _device_loader(self, loader: torch.utils.data.DataLoader) -> DeviceDataLoader:
        """``loader`` prepared, but not saved by save_state: for a loader made anew for each use."""
        order, torch_seed = self._torch_shuffle(loader) or ("seeded", None)
        if self._data_seed is None:
            # torch.manual_seed's seed, read without drawing from the generator: a draw here would shift every
            # later random number (the model's init, dropout) away from Accelerate's run with the same seed.
            seed = torch.initial_seed() % 2**63
            self._data_seed = pg.broadcast_int(seed) if self.num_processes > 1 else seed
        pin = self.plan.device.pin_memory_helps and self.pin_memory_allowed
        prepared = self._loader_type(loader, self.device, pin_memory=pin,
                                     num_processes=self.num_processes, process_index=self.process_index,
                                     seed=self._data_seed if torch_seed is None else torch_seed, tracker=self._tracker,
                                     host=current_host(), float64_to_float32=self._float64_batch_reason, order=order)
        return prepared

    def prepare_scheduler(self, scheduler: Any, *, once_per_step: bool = False) -> AcceleratedScheduler:
        """As Accelerate: one optimizer step moves the schedule num_processes steps (each step saw
        num_processes batches). ``once_per_step=True`` (braeburn's): one schedule step per optimizer step, as a
        schedule counted in optimizer steps (the Trainer's) needs."""
        return self._prepare_scheduler(scheduler, once_per_step)

    def _prepare_scheduler(self, scheduler, once_per_step: bool = False) -> AcceleratedScheduler:
        prepared = AcceleratedScheduler(scheduler, self, self.step_scheduler_with_optimizer,
                                        steps_per_call=1 if once_per_step else self.num_processes)
        name = type(scheduler).__name__
        if prepared.steps_per_call > 1 and self.step_scheduler_with_optimizer and name in USUALLY_PER_EPOCH \
                and self.is_main_process:  # is step() called per batch or per epoch? its first call tells
            prepared.on_first_step = functools.partial(self._say_if_stepped_per_epoch, prepared, name)
        self._schedulers.append(prepared)
        return prepared

    def _say_if_stepped_per_epoch(self, prepared: AcceleratedScheduler, name: str) -> None:
        """At a usually-per-epoch scheduler's first step(): called inside an epoch of a prepared DataLoader, it is
        stepped per batch, as Accelerate's stepping expects; called between epochs (or with no prepared
        DataLoader to tell by), it may be stepped once per epoch, and then moves num_processes epochs a call."""
        if any(loader.batches_yielded > 0 for loader in self._dataloaders):
            return
        say_once(f"braeburn: the prepared {name} moves {prepared.steps_per_call} steps per step() call on "
                 f"{self.num_processes} processes, as Accelerate's; step() was first called outside an epoch of a "
                 "prepared DataLoader: if you call it once per epoch, pass "
                 "Accelerator(step_scheduler_with_optimizer=False)", as_warning=True)

    # -- the training step --------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, divided by gradient_accumulation_steps and scaled when fp16 needs it."""
        if self.gradient_accumulation_steps > 1:
            loss = loss / self.gradient_accumulation_steps
        if self._recompute_guard is _NO_CONTEXT:  # checkpoint replays the device's random state itself
            self._policy.backward(loss, **kwargs)
        else:
            with self._recompute_guard:  # where checkpoint does not replay the device's random state: none went astray
                self._policy.backward(loss, **kwargs)
        probe.after_backward(self, loss)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to the resolved precision (a no-op for float32)."""
        return self._policy.autocast()

    def set_precision(self, precision: str, reason: str, policy: PrecisionPolicy | None = None) -> PrecisionPolicy:
        """Train in ``precision`` ("no", "bf16", "fp16") from now on: the policy (a fresh grad scaler where the
        device needs one), the prepared models' autocast and the plan change together. The Trainer calls it
        when ``mixed_precision="auto"`` measures (braeburn.plan.precision_trial); returns the new policy.
        ``policy``: one this method returned earlier for ``precision``, installed again (its grad scaler kept)."""
        kind, host = self.plan.device, current_host()
        scaler = precision != "no" and kind.precision_support(precision, host).needs_grad_scaler
        if policy is not None and policy.name != precision:
            raise ValueError(f"set_precision({precision!r}) was given a policy for {policy.name!r}: pass the policy "
                             f"that set_precision({precision!r}) returned, or none for a fresh one")
        self._policy = policy or make_policy(precision, scaler, self.device,
                                             kind.fused_optimizers_honour_grad_scaler(host))
        self.precision = precision
        self.plan = dataclasses.replace(self.plan, precision=precision, grad_scaler=scaler, precision_reason=reason,
                                        precision_candidates=())
        for model in self._models:
            forward = compile_policy.prepared_forward(self.unwrap_model(model))
            if forward is not None:
                forward.autocast = self._policy.autocast if self._policy.dtype is not None else None
        return self._policy

    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager:
        """One micro-batch: sets ``sync_gradients``; off-boundary, DDP and FSDP skip their gradient
        all-reduce / reduce-scatter (the gradients accumulate locally until the boundary step)."""
        self._accumulation_step += 1
        at_end = self._tracker.end_of_dataloader
        self.sync_gradients = at_end or self._accumulation_step % self.gradient_accumulation_steps == 0
        if at_end:
            self._accumulation_step = 0  # the next epoch starts a fresh accumulation window
        if self.num_processes == 1:
            return _NO_CONTEXT  # called every step: one process needs no context at all
        stack = contextlib.ExitStack()
        for model in models or self._models:
            if fsdp.is_sharded(model):
                fsdp.set_gradient_sync(model, self.sync_gradients)
            elif not self.sync_gradients and hasattr(model, "no_sync"):
                stack.enter_context(model.no_sync())
        return stack

    def restart_accumulation(self, gradient_accumulation_steps: int) -> None:
        """A fresh accumulation window of ``gradient_accumulation_steps`` micro-batches from the next one on
        (the Trainer's auto_find_batch_size, after an out-of-memory error dropped a window half done)."""
        self.gradient_accumulation_steps, self._accumulation_step = gradient_accumulation_steps, 0

    def clip_grad_norm_(self, parameters, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Unscale (fp16), then clip; returns the total norm. Off-boundary it only measures (no clip)."""
        if type(parameters) is not list and not isinstance(parameters, torch.Tensor):  # (torch skips grads of None)
            parameters = [p for p in parameters if p.grad is not None]
        if not self.sync_gradients:
            norm = fsdp.full_value(torch.nn.utils.clip_grad_norm_(parameters, float("inf"), norm_type))
            return norm / self.scaler.get_scale() if self.scaler is not None else norm
        if self._policy.scaler is not None:  # (self.scaler, without the property's call at every step)
            for optimizer in self._optimizers:
                self._unscale_once(optimizer)
        # With FSDP the gradients are shards: torch computes the global norm (one all-reduce).
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type)
        return norm if type(norm) is torch.Tensor else fsdp.full_value(norm)  # a DTensor's full value

    def clip_fold_refusal(self, optimizer: Any, parameters: Sequence[torch.Tensor] | None = None) -> str | None:
        """Why a clip of ``parameters``' gradients (exactly those of ``optimizer``'s parameters that train; None: not
        checked) cannot be folded into ``optimizer``'s next step (``clip_scale``, see clip_fold.py); None when it
        can. ``optimizer``: one this Accelerator prepared."""
        if not isinstance(optimizer, AcceleratedOptimizer):
            return "the optimizer was not prepared by this Accelerator"
        return clip_fold.fold_refusal(
            optimizer.optimizer, grad_scaler=self.scaler is not None, sharded=any(map(fsdp.is_sharded, self._models)),
            kernel_applies_grad_scale=self.plan.device.fused_optimizers_honour_grad_scaler(current_host()),
            watched=probe.active(), clipped=parameters)

    def _unscale_once(self, optimizer: AcceleratedOptimizer) -> None:
        if self.scaler is None:
            return
        try:
            self._policy.unscale_(optimizer.optimizer)
        except RuntimeError as error:  # already unscaled since the last step: nothing more to do
            if "unscale_() has already been called" not in str(error):
                raise

    # -- collectives and metrics --------------------------------------------------------------
    def _metric(self, data: Any) -> Any:
        """Numbers become tensors on the device; float64 becomes float32 where the device has none."""
        if isinstance(data, (int, float)) or (hasattr(data, "dtype") and not isinstance(data, torch.Tensor)):
            data = torch.as_tensor(data)
        to_float32 = not self.plan.device.supports_float64
        return apply_to_tensors(
            lambda t: (t.float() if to_float32 and t.dtype == torch.float64 else t).to(self.device), data)

    def gather(self, tensor: Any) -> Any:
        """All ranks' tensors concatenated on dim 0 (nested lists/tuples/dicts too)."""
        return pg.gather(self._metric(tensor))

    def gather_for_metrics(self, data: Any, use_gather_object: bool = False) -> Any:
        """:meth:`gather`, minus the samples repeated to pad an uneven last batch; Python objects gathered as such."""
        if use_gather_object or isinstance(data, (list, tuple)) and data and not any(
                isinstance(item, (torch.Tensor, dict, list, tuple)) for item in data):
            gathered: Any = [item for part in pg.gather_object(list(data)) for item in part]
        else:
            gathered = self.gather(data)
        if self._tracker.end_of_dataloader and self._tracker.remainder >= 0:
            gathered = truncate_padding(gathered, self._tracker.remainder)
        return gathered

    def reduce(self, tensor: Any, reduction: str = "sum") -> Any:
        """All ranks' tensors summed, averaged or maxed (``reduction``: "sum", Accelerate's default, "mean", "max")."""
        return pg.reduce(self._metric(tensor), reduction)

    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module, without torch.compile or DDP wrappers."""
        while True:
            inner = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
            if inner is None and isinstance(model, torch.nn.parallel.DistributedDataParallel):
                inner = model.module
            if inner is None:
                return model
            model = inner

    def wait_for_everyone(self) -> None:
        pg.barrier()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """print() on the main process only."""
        if self.is_main_process:
            builtins.print(*args, **kwargs)

    # -- reports and the end ------------------------------------------------------------------
    def fallback_report(self) -> list[tuple[str, int]]:
        """MPS ops that fell back to the CPU so far, with how often each was reported, most first."""
        return self._fallback.report()

    def memory_stats(self) -> dict[str, int]:
        """The device's memory figures in bytes (what the device kind can tell)."""
        return self.plan.device.memory_stats()

    def end_training(self, keep_process_group: bool = False) -> None:
        """Show the CPU-fallback report, stop recording, and destroy the process group if this made it.

        ``keep_process_group=True`` (what the Trainer passes at the end of train()) leaves the group open
        for evaluate() and predict() after training; it is destroyed when the process exits."""
        report = self.fallback_report()
        if report and self.is_main_process:
            lines = ", ".join(f"{op} x{count}" for op, count in report)
            builtins.print(f"braeburn: ops that ran on the CPU instead of {self.device.type}: {lines}")
        self._fallback.stop()
        self._end_trackers()
        for folder in self._locked:
            output_lock.release(folder)
        self._locked.clear()
        if self._owns_process_group and not keep_process_group:
            pg.destroy_process_group()
            self._owns_process_group = False


__all__ = ["Accelerator", "AcceleratedOptimizer", "AcceleratedScheduler"]
