"""Accelerate's names on :class:`braeburn.Accelerator`, so an Accelerate script switches by its import.

:class:`AccelerateCompat` is a mixin of ``braeburn.Accelerator`` (accelerator.py): process helpers
(``main_process_first``, ``split_between_processes``, ``on_main_process`` ...), trackers
(``init_trackers`` / ``log`` / ``get_tracker``), the ``prepare_*`` singles, ``save_model``,
``register_for_checkpointing``, triggers, and :func:`find_executable_batch_size` at module level.
Each keeps Accelerate's signature and meaning; docs/migrating.md lists where braeburn differs.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import gc
import inspect
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from ...accelerator import trackers as tracking
from ...distributed import process_group as pg
from .all_trackers import SECOND_INIT, resolve_log_with
from .checkpointing import AccelerateCheckpointing
from .state import AcceleratePreparedLoader, AcceleratorState, GradientState


class DistributedType(str, enum.Enum):
    """Accelerate 1.15's ``DistributedType``, every value, so that a script's comparisons work unchanged
    (``if accelerator.distributed_type == DistributedType.XLA``). braeburn is only ever in NO, MULTI_CPU,
    MULTI_GPU or FSDP; the others exist to be compared against and are never reported."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"


@dataclass
class ProjectConfiguration:
    """Accelerate's ``ProjectConfiguration``: where trackers write and where ``save_state()`` numbers checkpoints."""

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        if self.logging_dir is None:
            self.logging_dir = self.project_dir


@dataclass
class GradientAccumulationPlugin:
    """Accelerate's plugin: ``num_steps`` is braeburn's gradient_accumulation_steps."""

    num_steps: int = 1
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True


class AccelerateCompat(AccelerateCheckpointing):
    """Accelerate's public names that braeburn's Accelerator adds on top of its core (see the module doc). Its
    ``_checkpoint_dir``, ``_after_automatic_save``, ``_save_custom_objects``, ``_load_custom_objects``,
    ``_latest_automatic_checkpoint`` and ``_end_trackers`` fill the core's hooks; ``_loader_type`` too."""

    _loader_type = AcceleratePreparedLoader

    # -- set up, from Accelerator.__init__ (before the core's) ------------------------------------------------
    def _init_accelerate_compat(self, log_with: Any = None, project_dir: Any = None,
                                project_config: ProjectConfiguration | None = None,
                                gradient_accumulation_plugin: Any = None, dataloader_config: Any = None,
                                **_: Any) -> None:
        self._accumulation_plugin, self._dataloader_config = gradient_accumulation_plugin, dataloader_config
        config = project_config or ProjectConfiguration()
        if project_dir is not None:
            config.project_dir = str(project_dir)
            config.logging_dir = config.logging_dir or str(project_dir)
        self.project_configuration = config
        self.log_with = resolve_log_with(log_with)  # "all": refused where Accelerate's would start more trackers
        self.trackers: list[tracking.GeneralTracker] = []
        self._custom_objects: list[Any] = []
        self.flag_tensor: torch.Tensor | None = None

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        return self.project_configuration.iteration

    # -- who am I -----------------------------------------------------------------------------
    @property
    def state(self) -> AcceleratorState:
        """Accelerate's ``accelerator.state``: a live view of this Accelerator's process facts (state.py)."""
        return AcceleratorState(self)

    @property
    def gradient_state(self) -> GradientState:
        """Accelerate's ``accelerator.gradient_state``: sync_gradients, end_of_dataloader, num_steps ... (state.py)."""
        return GradientState(self)

    def _accumulation_plugin_kwargs(self) -> dict[str, Any]:
        """Accelerate's ``GradientState.plugin_kwargs``: num_steps, and the fields a given plugin changed."""
        from .options import changed_fields

        plugin = self._accumulation_plugin
        changed = {k: v for k, v in (changed_fields(plugin) or {}).items() if k != "num_steps"}
        return {"num_steps": self.gradient_accumulation_steps, **changed}

    @property
    def mixed_precision(self) -> str:
        """"no", "fp16" or "bf16": what the plan resolved (never "auto")."""
        return self.precision

    @property
    def distributed_type(self) -> DistributedType:
        if self.num_processes == 1:
            return DistributedType.NO
        if self.plan.strategy == "fsdp":
            return DistributedType.FSDP
        return DistributedType.MULTI_GPU if self.plan.device.is_accelerator else DistributedType.MULTI_CPU

    @property
    def use_distributed(self) -> bool:
        return self.num_processes > 1

    @property
    def multi_device(self) -> bool:
        return self.num_processes > 1

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    @property
    def split_batches(self) -> bool:
        return False

    @property
    def even_batches(self) -> bool:
        return True

    @property
    def non_blocking(self) -> bool:
        return bool(self.plan.device.pin_memory_helps)

    @property
    def use_seedable_sampler(self) -> bool:
        """As Accelerate: what DataLoaderConfiguration said (prepared loaders follow a seeded order either way)."""
        return bool(getattr(self._dataloader_config, "use_seedable_sampler", False))

    @property
    def use_stateful_dataloader(self) -> bool:
        return False  # prepared DataLoaders resume mid-epoch without torchdata's StatefulDataLoader

    @property
    def is_fsdp2(self) -> bool:
        return self.shards_model  # braeburn's FSDP is torch's fully_shard (FSDP2)

    @property
    def deepspeed_plugin(self) -> None:
        return None

    @property
    def should_save_model(self) -> bool:
        return self.is_main_process

    @contextlib.contextmanager
    def _first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager:
        """The main process runs the block first, then every other process."""
        return self._first(self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager:
        """The main process of each machine runs the block first, then the others of that machine."""
        return self._first(self.is_local_main_process)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This process's contiguous share of a list, tuple, dict of lists/tensors, or tensor (dim 0)."""
        yield _split(inputs, self.num_processes, self.process_index, apply_padding)

    # -- decorators ------------------------------------------------------------------------------
    def _only_on(self, should_run: bool, function: Callable | None) -> Callable:
        if function is None:
            return functools.partial(self._only_on, should_run)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if should_run else None

        return wrapper

    def on_main_process(self, function: Callable | None = None) -> Callable:
        """Decorator: the function runs on the main process only (elsewhere it returns None)."""
        return self._only_on(self.is_main_process, function)

    def on_local_main_process(self, function: Callable | None = None) -> Callable:
        return self._only_on(self.is_local_main_process, function)

    def on_last_process(self, function: Callable | None = None) -> Callable:
        return self._only_on(self.is_last_process, function)

    def on_process(self, function: Callable | None = None, process_index: int | None = None) -> Callable:
        """Decorator: runs on process ``process_index`` only (``@accelerator.on_process(process_index=1)``)."""
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        # As Accelerate: on one process every such function runs.
        return self._only_on(self.process_index == process_index or not self.use_distributed, function)

    def on_local_process(self, function: Callable | None = None, local_process_index: int | None = None) -> Callable:
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        return self._only_on(self.local_process_index == local_process_index or not self.use_distributed, function)

    def _torch_shuffle(self, loader: Any) -> tuple[str, int] | None:
        """A shuffled DataLoader (a RandomSampler without a generator) is shuffled as Accelerate's default does
        (use_seedable_sampler=False, no seed=/data_seed given): on one process a seed drawn from torch's generator
        at each epoch's start, as the RandomSampler itself would; on several, one drawn now on every process (rank
        0's kept) seeding a generator whose next permutation each epoch takes. A DataLoader given generator=g: g's
        stream from its seed, as the loader itself (and Accelerate) would draw it."""
        sampler = getattr(loader, "sampler", None)
        if (self.use_seedable_sampler or self._data_seed_given
                or not isinstance(sampler, torch.utils.data.RandomSampler)):
            return None
        if sampler.generator is not None:
            return _users_generator(sampler.generator, loader)
        if self.num_processes == 1:
            return "drawn", 0
        seed = int(torch.empty((), dtype=torch.int64).random_().item())  # Accelerate's draw in prepare_data_loader
        return "stream", pg.broadcast_int(seed)

    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Accelerate's signature; ``device_placement`` only None or True for every object (a prepared object always
        lives on ``accelerator.device``)."""
        for placement in device_placement or ():
            _placement(placement)
        return super().prepare(*args)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Accelerate's signature (``scale`` is used by Accelerate on TPUs only, so never here)."""
        return super().reduce(tensor, reduction)

    def autocast(self, autocast_handler: Any = None) -> contextlib.AbstractContextManager:
        """Autocast to the resolved precision; an ``AutocastKwargs`` changed from its defaults is refused."""
        from .options import changed_fields

        if changed_fields(autocast_handler):
            raise ValueError(f"accelerator.autocast(autocast_handler={autocast_handler!r}) is not supported: braeburn "
                             "autocasts with the resolved precision. Fix: call accelerator.autocast(), or wrap the code "
                             "in torch.autocast(...) yourself")
        return super().autocast()

    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool | None = None) -> torch.nn.Module:
        """Accelerate's signature: the user's module, without DDP's wrapper, nor torch.compile's (whatever
        ``keep_torch_compile`` says: docs/migrating.md). ``keep_fp32_wrapper``: a prepared model's autocast is part of
        its forward, kept either way (nothing to remove at mixed_precision="no")."""
        return super().unwrap_model(model)

    # -- prepare, one object at a time -------------------------------------------------------------
    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        _placement(device_placement)
        return self.prepare(model)

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None):
        _placement(device_placement)
        return self.prepare(optimizer)

    def prepare_data_loader(self, data_loader: torch.utils.data.DataLoader, device_placement: bool | None = None,
                            slice_fn_for_dispatch: Any = None):
        _placement(device_placement)
        return self.prepare(data_loader)

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """A loader whose next pass starts ``num_batches`` in (the rest of an epoch after a resume)."""
        return skip_first_batches(dataloader, num_batches)

    # -- the step ---------------------------------------------------------------------------------
    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce inside the block (DDP); a no-op on one process."""
        if self.num_processes > 1 and hasattr(model, "no_sync"):
            return model.no_sync()
        return contextlib.nullcontext()

    def trigger_sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def join_uneven_inputs(self, joinables: Any, even_batches: bool | None = None) -> contextlib.AbstractContextManager:
        """A no-op, as in Accelerate with even_batches=True: prepared loaders give every process the same count."""
        if even_batches is False:
            raise ValueError("join_uneven_inputs(even_batches=False) is not supported: prepared DataLoaders always "
                             "give every process the same number of batches (gather_for_metrics drops the padding)")
        return contextlib.nullcontext()

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Unscale fp16 gradients now (before reading or clipping them yourself)."""
        optimizers = self._optimizers if optimizer is None else (
            list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer])
        for item in optimizers:
            self._unscale_once(item if hasattr(item, "optimizer") else _wrapped(self, item))

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Unscale (fp16), then clamp every gradient to [-clip_value, clip_value]."""
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def set_trigger(self) -> None:
        """Raise a flag on this process; :meth:`check_trigger` on every process then sees it (one all-reduce)."""
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """True on every process when any process called set_trigger since the last check (then reset)."""
        flag = self.flag_tensor if self.flag_tensor is not None else torch.tensor(0, device=self.device)
        total = self.reduce(flag, reduction="sum")
        if int(total) >= 1:  # sync
            self.flag_tensor = torch.tensor(0, device=self.device)
            return True
        return False

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        """Pad tensors (nested too) along ``dim`` to the longest size on any process, so they can be gathered."""
        return pg.pad_across(tensor, dim, pad_index, pad_first)

    # -- saving ------------------------------------------------------------------------------------
    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        """The model's full state dict on the CPU (gathered from the shards with FSDP)."""
        if self.shards_model:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            return get_model_state_dict(self.unwrap_model(model),
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        module = self.unwrap_model(model) if unwrap else model
        return {k: v.detach().cpu() for k, v in module.state_dict().items()}

    def save_model(self, model: torch.nn.Module, save_directory: str | os.PathLike, max_shard_size: int | str = "10GB",
                   safe_serialization: bool = True) -> None:
        """The weights into ``save_directory`` (model.safetensors, or pytorch_model.bin), from the main process."""
        state = self.get_state_dict(model)
        if not self.is_main_process:
            return
        from ..transformers.files import save_weights

        save_weights(state, save_directory, max_shard_size=max_shard_size, safe_serialization=safe_serialization,
                     model=self.unwrap_model(model))

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """``torch.save`` (or safetensors) on the main process only."""
        if not self.is_main_process:
            return
        if safe_serialization:
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in obj.items()}, f, metadata={"format": "pt"})
        else:
            torch.save(obj, f)

    # -- trackers ----------------------------------------------------------------------------------
    def init_trackers(self, project_name: str, config: dict | None = None,
                      init_kwargs: dict[str, dict] | None = None) -> None:
        """Start the trackers of ``log_with`` for ``project_name``, storing ``config``; as in Accelerate, none writes
        a file that ``log_with`` did not ask for (braeburn's JSON-lines file only with ``log_with="jsonl"``)."""
        if not self.is_main_process:
            return
        if self.trackers:  # Accelerate adds a second set, and logs every value, and this config, into both runs
            raise ValueError(f"init_trackers({project_name!r}): trackers were started already; {SECOND_INIT}")
        self.trackers = tracking.start_trackers(list(self.log_with), project_name, self.logging_dir, init_kwargs)
        if config is not None:
            for tracker in self.trackers:
                tracker.store_init_configuration(config)

    def log(self, values: dict, step: int | None = None, log_kwargs: dict[str, dict] | None = None) -> None:
        """Send ``values`` to every tracker (main process only)."""
        if not self.is_main_process:
            return
        log_kwargs = log_kwargs or {}
        for tracker in self.trackers:
            tracker.log(values, step=step, **log_kwargs.get(tracker.name, {}))

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The started tracker called ``name`` (its underlying object with ``unwrap=True``)."""
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        if not self.is_main_process:
            return tracking.GeneralTracker(_blank=True)
        started = ", ".join(t.name for t in self.trackers) or "none (call init_trackers first)"
        raise ValueError(f"get_tracker({name!r}): no such tracker was started; started: {started}")

    def _end_trackers(self) -> None:
        for tracker in self.trackers:  # (kept in accelerator.trackers afterwards, as Accelerate keeps them)
            tracker.finish()

    # -- memory ------------------------------------------------------------------------------------
    def free_memory(self, *objects: Any) -> list[None] | None:
        """Forget every prepared object, collect garbage, return cached device memory; returns Nones for ``objects``."""
        self._models.clear()
        self._optimizers.clear()
        self._schedulers.clear()
        self._dataloaders.clear()
        gc.collect()
        self.plan.device.empty_cache()
        return [None for _ in objects]  # as Accelerate's release_memory: [] for no objects

    clear = free_memory


def _users_generator(generator: torch.Generator, loader: Any) -> tuple[str, int]:
    """A shuffled DataLoader with the user's generator ``g``: the order ``g`` gives it from ``g``'s seed (each epoch a
    base seed when ``g`` is the DataLoader's own, then a permutation), rank 0's on several processes (Accelerate keeps
    every rank's ``g`` in step with rank 0's)."""
    from ...accelerator.core import say_once

    seed = generator.initial_seed()
    if not torch.equal(generator.get_state(), torch.Generator().manual_seed(seed).get_state()):
        say_once(f"braeburn: prepare() got a DataLoader whose generator was drawn from after it was seeded: the "
                 f"shuffled order follows the generator from its seed {seed}, where Accelerate's continues from where "
                 "the generator stands; seed it just before building the DataLoader for the same order",
                 as_warning=True)
    order = "loader generator" if getattr(loader, "generator", None) is generator else "stream"
    return order, pg.broadcast_int(seed)


def _placement(device_placement: bool | None) -> None:
    if device_placement is False:
        raise ValueError("device_placement=False is not supported: a prepared object always lives on "
                         "accelerator.device; keep the object unprepared to place it yourself")


def _wrapped(accelerator: Any, optimizer: Any) -> Any:
    for prepared in accelerator._optimizers:
        if prepared.optimizer is optimizer:
            return prepared
    raise ValueError("unscale_gradients: that optimizer was not prepared by this Accelerator")


def _split(inputs: Any, parts: int, index: int, apply_padding: bool) -> Any:
    if isinstance(inputs, dict):
        lengths = {len(v) for v in inputs.values()}
        if len(lengths) > 1:
            raise ValueError("split_between_processes: every value of the dict must have the same length")
        return {k: _split(v, parts, index, apply_padding) for k, v in inputs.items()}
    length = len(inputs)
    per, extra = divmod(length, parts)
    start = index * per + min(index, extra)
    end = start + per + (1 if index < extra else 0)
    share = inputs[start:end]
    if apply_padding:
        want = math.ceil(length / parts)
        if len(share) < want and length:
            last = inputs[-1:] if isinstance(inputs, torch.Tensor) else [inputs[-1]]
            if isinstance(inputs, torch.Tensor):
                share = torch.cat([share] + [last] * (want - len(share)))
            else:
                share = list(share) + list(last) * (want - len(share))
                share = type(inputs)(share) if isinstance(inputs, tuple) else share
    return share


class _SkipBatches:
    """A view of a loader whose next iteration skips the first ``num_batches`` batches (then plays in full)."""

    def __init__(self, loader: Any, num_batches: int):
        self._loader, self._skip = loader, num_batches

    def __iter__(self) -> Iterator[Any]:
        skip, self._skip = self._skip, 0
        loader = self._loader
        if skip and hasattr(loader, "load_state_dict") and hasattr(loader, "batches_yielded"):
            loader.load_state_dict({"epoch": loader.epoch, "batches_yielded": skip})  # skips without loading
            yield from loader
            return
        for i, batch in enumerate(loader):
            if i >= skip:
                yield batch

    def __len__(self) -> int:
        return len(self._loader) - self._skip

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._loader, name)


def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
    """Accelerate's ``skip_first_batches``: iterate ``dataloader`` from batch ``num_batches`` on."""
    if num_batches < 0:
        raise ValueError(f"skip_first_batches(num_batches={num_batches}): must be >= 0")
    return _SkipBatches(dataloader, num_batches) if num_batches else dataloader


def find_executable_batch_size(function: Callable | None = None, starting_batch_size: int = 128,
                               reduce_batch_size_fn: Callable[[], int] | None = None) -> Callable:
    """Decorator (Accelerate's): call ``function(batch_size, ...)``; after each error Accelerate retries
    (:func:`_should_reduce_batch_size`), free memory and retry with ``reduce_batch_size_fn()`` (default: 90% of the
    size, as Accelerate); RuntimeError at zero. The size found is kept for the next call, as in Accelerate."""
    if function is None:
        return functools.partial(find_executable_batch_size, starting_batch_size=starting_batch_size,
                                 reduce_batch_size_fn=reduce_batch_size_fn)
    from ...data.batch_size import free_memory

    batch_size = starting_batch_size
    if reduce_batch_size_fn is None:
        def reduce_batch_size_fn() -> int:
            nonlocal batch_size
            batch_size = int(batch_size * 0.9)
            return batch_size

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            shown = ", ".join(f"{p}={a!r}" for p, a in zip(params[1:], args[1:]))
            raise TypeError(f"Batch size was passed into `{function.__name__}` as the first argument when called. "
                            f"Remove this as the decorator already does so: `{function.__name__}({shown})`")
        while True:
            if batch_size == 0:
                raise RuntimeError("No executable batch size found, reached zero.")
            failed = False
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:  # noqa: BLE001 - anything Accelerate would not retry is re-raised
                if not _should_reduce_batch_size(error):
                    raise
                failed = True
            if failed:  # outside the except block, so the failed try's frames are gone
                free_memory()
                _empty_accelerator_caches()
                batch_size = reduce_batch_size_fn()

    return decorator


# Accelerate's should_reduce_batch_size (accelerate/utils/memory.py): these texts in a one-argument RuntimeError only
_REDUCE_BATCH_SIZE_TEXTS = (" out of memory.", "MPS backend out of memory", "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
                            "DefaultCPUAllocator: can't allocate memory", "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed")


def _should_reduce_batch_size(error: BaseException) -> bool:
    """Whether Accelerate's find_executable_batch_size retries after ``error`` at a smaller size."""
    if isinstance(error, RuntimeError) and len(error.args) == 1 and isinstance(error.args[0], str):
        return any(text in error.args[0] for text in _REDUCE_BATCH_SIZE_TEXTS)
    return False


def _empty_accelerator_caches() -> None:
    from ...devices.registry import KINDS

    for kind in KINDS:
        try:
            kind.empty_cache()
        except Exception:  # noqa: BLE001 - a kind not present here has nothing to empty
            pass


__all__ = ["AccelerateCompat", "DistributedType", "GradientAccumulationPlugin", "ProjectConfiguration",
           "find_executable_batch_size", "skip_first_batches"]
