"""Transformers' ``TrainingArguments`` spelled on braeburn's ``TrainingConfig``.

:class:`TrainingArguments` (``braeburn.TrainingArguments``) is braeburn's
:class:`~braeburn.trainer.config.TrainingConfig` with Transformers' defaults and two more pieces
(``braeburn.TrainingConfig``, :class:`TrainingConfig` here, is the same with braeburn's own defaults):

- :class:`UnsupportedFields`: every Transformers field braeburn cannot honour, at Transformers'
  default. Setting one to anything else is an error naming what to use instead (never ignored).
- :class:`HfArgumentsMixin`: the properties and methods scripts read off ``TrainingArguments``
  (``train_batch_size``, ``device``, ``should_log``, ``main_process_first`` ...).

No torch at import time: the parser (``--help``) must stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Iterator

from ...plan.rules import OptionError
from ...trainer.config import CoreTrainingConfig
from .setters import TransformersSetters


# The reason for each refused field is kept out of its metadata on purpose: Transformers' HfArgumentParser
# passes a field's metadata straight to argparse's add_argument, so metadata may hold only add_argument
# keywords. ``help=SUPPRESS`` is one: both parsers accept the flag (so braeburn can refuse it, with the
# reason, when the arguments are built) without listing it in --help. The reasons are collected in
# declaration order and keyed by field name below the class (UNSUPPORTED_INSTEAD).
_REASONS: list[str] = []


def _no(default: Any, instead: str, *, factory: bool = False) -> Any:
    meta = {"help": argparse.SUPPRESS}
    _REASONS.append(instead)
    if factory:
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


_DS = "braeburn has no DeepSpeed: use --strategy fsdp to shard parameters, gradients and optimizer state"
_HUB = "braeburn does not upload; after training run `huggingface-cli upload` on output_dir (save_model() writes it)"
_DDP = ("braeburn configures DistributedDataParallel itself (find_unused_parameters off, default buckets, "
        "buffers broadcast only for models with running statistics such as BatchNorm)")
SAMPLING_STRATEGIES = ("random", "sequential")
_LOG_NODE = "braeburn logs and saves on the main process only"


@dataclass(kw_only=True)
class UnsupportedFields:
    """Transformers fields braeburn refuses when set away from Transformers' default (see docs/migrating.md)."""

    deepspeed: dict | str | None = _no(None, _DS)
    fsdp_config: dict | str | None = _no(None, "pass --fsdp full_shard (or --strategy fsdp), and --fsdp_units block "
                                        "for a unit per block (TRANSFORMER_BASED_WRAP); braeburn chooses the "
                                        "rest of FSDP's settings itself")
    accelerator_config: dict | str | None = _no(None, "braeburn's Accelerator options are TrainingConfig fields "
                                                "(--mixed_precision, --accelerator, --devices, --strategy)")
    parallelism_config: str | None = _no(None, "use --strategy ddp or fsdp")
    push_to_hub: bool = _no(False, _HUB)
    hub_token: str | None = _no(None, _HUB)
    hub_private_repo: bool | None = _no(None, _HUB)
    hub_model_id: str | None = _no(None, _HUB)
    hub_strategy: str = _no("every_save", _HUB)
    hub_always_push: bool = _no(False, _HUB)
    hub_revision: str | None = _no(None, _HUB)
    use_liger_kernel: bool = _no(False, "braeburn has no Liger kernels; --compile true fuses kernels with torch.compile")
    liger_kernel_config: dict | str | None = _no(None, "braeburn has no Liger kernels")
    neftune_noise_alpha: float | None = _no(None, "braeburn has no NEFTune; add embedding noise in your model's forward")
    optim_target_modules: str | None = _no(None, "GaLore/APOLLO optimizers are not available; pass "
                                           "optimizers=(your_optimizer, None) to Trainer")
    bf16_full_eval: bool = _no(False, "evaluation runs under the training precision's autocast; pass --bf16")
    fp16_full_eval: bool = _no(False, "evaluation runs under the training precision's autocast; pass --fp16")
    use_cache: bool = _no(False, "set model.config.use_cache yourself before training")
    include_num_input_tokens_seen: str = _no("no", "braeburn logs samples/s, not tokens seen")
    log_on_each_node: bool = _no(True, _LOG_NODE)
    logging_nan_inf_filter: bool = _no(True, "braeburn stops at a NaN/inf loss (--nan_policy stop) or skips "
                                       "that step (--nan_policy skip); it never hides it from the logs")
    trackio_space_id: str | None = _no(None, "trackio is not a braeburn tracker; pass --report_to with "
                                       "tensorboard, wandb or mlflow")
    trackio_bucket_id: str | None = _no(None, "trackio is not a braeburn tracker")
    trackio_static_space_id: str | None = _no(None, "trackio is not a braeburn tracker")
    eval_delay: float = _no(0, "evaluate from the start, or add a callback that calls trainer.evaluate() later")
    eval_do_concat_batches: bool = _no(True, "braeburn always concatenates the eval batches")
    eval_use_gather_object: bool = _no(False, "braeburn gathers tensors (predictions must be tensors)")
    include_for_metrics: list[str] = _no([], "compute what needs inputs or losses in your own evaluation loop",
                                         factory=True)
    batch_eval_metrics: bool = _no(False, "compute_metrics runs once on the whole eval set")
    save_only_model: bool = _no(False, "braeburn checkpoints always hold the full state, so a resume is exact; "
                                "bound the disk with --save_total_limit, and use trainer.save_model() for weights")
    save_on_each_node: bool = _no(False, _LOG_NODE)
    enable_jit_checkpoint: bool = _no(False, "braeburn already saves a checkpoint on SIGTERM/SIGINT and resumes "
                                      "from it with --resume_from_checkpoint latest")
    ignore_data_skip: bool = _no(False, "a braeburn resume skips the batches done without loading them, and "
                                 "always continues exactly where the run stopped")
    restore_callback_states_from_checkpoint: bool = _no(False, "keep callback state in your callback")
    dataloader_in_order: bool = _no(True, "batches always arrive in order")
    length_column_name: str = _no("length", "length grouping is not built in; see group_by_length")
    group_by_length: bool = _no(False, "length grouping is not built in: override get_train_dataloader() in a "
                                "Trainer subclass to return a DataLoader with a length-grouped sampler (e.g. "
                                "transformers.trainer_pt_utils.LengthGroupedSampler), which braeburn.Trainer calls "
                                "and prepares; or keep braeburn's collators, which pad to length buckets")
    ddp_find_unused_parameters: bool | None = _no(None, _DDP)
    ddp_bucket_cap_mb: int | None = _no(None, _DDP)
    ddp_broadcast_buffers: bool | None = _no(None, _DDP)
    ddp_static_graph: bool | None = _no(None, _DDP)
    ddp_backend: str | None = _no(None, "braeburn picks nccl for CUDA and gloo otherwise")
    ddp_timeout: int = _no(1800, "braeburn uses torch's default process-group timeout")
    debug: str = _no("", "use `braeburn check` and `braeburn doctor` to diagnose a run")
    skip_memory_metrics: bool = _no(True, "braeburn logs device memory (memory_bytes) at every logging step")
    # Names from older Transformers releases, so an older script gets the right pointer.
    evaluation_strategy: str | None = _no(None, "renamed eval_strategy in Transformers; pass --eval_strategy")
    no_cuda: bool = _no(False, "pass --use_cpu (Transformers renamed it too)")
    save_safetensors: bool = _no(True, "save_model() always writes safetensors")
    include_inputs_for_metrics: bool = _no(False, "compute what needs inputs in your own evaluation loop")
    half_precision_backend: str = _no("auto", "braeburn uses torch.autocast; pass --fp16 or --bf16")
    fp16_opt_level: str = _no("O1", "apex is not used; pass --fp16 or --bf16")
    tpu_num_cores: int | None = _no(None, "braeburn trains on CUDA, MPS or the CPU")
    past_index: int = _no(-1, "keep past states inside your model")
    jit_mode_eval: bool = _no(False, "use --compile true")
    use_ipex: bool = _no(False, "braeburn trains on CUDA, MPS or the CPU without IPEX")
    split_batches: bool | None = _no(None, "per_device_*_batch_size is per process; divide it yourself")
    dispatch_batches: bool | None = _no(None, "every process loads its own shard")


UNSUPPORTED_INSTEAD: dict[str, str] = dict(zip((f.name for f in dataclasses.fields(UnsupportedFields)), _REASONS,
                                              strict=True))


def is_unsupported(field: dataclasses.Field) -> bool:
    return field.name in UNSUPPORTED_INSTEAD


def unsupported_errors(config: Any) -> list[OptionError]:
    """An error for every unsupported field set away from Transformers' default."""
    errors = []
    for spec in dataclasses.fields(UnsupportedFields):
        if spec.name.startswith("hub_") and not getattr(config, "push_to_hub", False):
            continue  # ignored without push_to_hub, as Transformers ignores them
        value = getattr(config, spec.name)
        default = spec.default if spec.default is not dataclasses.MISSING else spec.default_factory()
        if value != default and not (value in (None, "", [], False) and default in (None, "", [], False)):
            errors.append(OptionError(spec.name, value, f"is a Transformers option braeburn does not support: "
                                      f"{UNSUPPORTED_INSTEAD[spec.name]}"))
    return errors


class ParallelMode(enum.Enum):
    """As ``transformers.training_args.ParallelMode``: what scripts print as ``parallel_mode.value``."""

    NOT_PARALLEL = "not_parallel"
    NOT_DISTRIBUTED = "not_distributed"
    DISTRIBUTED = "distributed"


_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
               "error": logging.ERROR, "critical": logging.CRITICAL, "passive": logging.WARNING}


def _world() -> Any:
    from ...distributed.process_group import world_from_env

    return world_from_env()


class HfArgumentsMixin:
    """What scripts read off a Transformers ``TrainingArguments`` besides its fields."""

    @property
    def train_batch_size(self) -> int:
        return self.per_device_train_batch_size

    @property
    def eval_batch_size(self) -> int:
        return self.per_device_eval_batch_size

    @property
    def world_size(self) -> int:
        return _world().world_size

    @property
    def process_index(self) -> int:
        return _world().rank

    @property
    def local_process_index(self) -> int:
        return _world().local_rank

    @property
    def should_log(self) -> bool:
        return self.process_index == 0

    @property
    def should_save(self) -> bool:
        return self.process_index == 0

    def _device_kind(self):
        from ...devices.host import current_host
        from ...plan.envvars import env_device
        from ...plan.rules import RunOptions, make_plan

        options = RunOptions(**{**self.run_options(self.world_size).__dict__, "env_device": env_device()})
        return make_plan(options, current_host()).device

    @property
    def device(self):
        """The torch.device this process trains on (the plan's choice: CUDA, MPS or the CPU)."""
        return self._device_kind().torch_device(self.local_process_index)

    @property
    def n_gpu(self) -> int:
        """GPUs this process uses: 1 on an accelerator (one device per process), 0 on the CPU."""
        return 1 if self._device_kind().is_accelerator else 0

    @property
    def parallel_mode(self) -> ParallelMode:
        return ParallelMode.DISTRIBUTED if self.world_size > 1 else ParallelMode.NOT_PARALLEL

    @property
    def place_model_on_device(self) -> bool:
        return True

    def get_process_log_level(self) -> int:
        """The ``logging`` level for this process: log_level on the main process, log_level_replica elsewhere."""
        name = self.log_level if self.should_log else self.log_level_replica
        return _LOG_LEVELS.get(str(name).lower(), logging.WARNING)

    def get_warmup_steps(self, num_training_steps: int) -> int:
        return self.warmup_for(num_training_steps)

    @contextlib.contextmanager
    def main_process_first(self, local: bool = True, desc: str = "work") -> Iterator[None]:
        """The main process runs the block first (say, a dataset map that writes a cache), then the others."""
        from ...distributed import process_group as pg

        rank = self.local_process_index if local else self.process_index
        if self.world_size > 1 and rank != 0:
            pg.barrier()
        try:
            yield
        finally:
            if self.world_size > 1 and rank == 0:
                pg.barrier()


@dataclass
class TrainingArguments(CoreTrainingConfig, HfArgumentsMixin, TransformersSetters, UnsupportedFields):
    """How to train, as Transformers' ``TrainingArguments`` says it: braeburn's TrainingConfig, whose fields carry
    Transformers' names, with every other field of Transformers' class refused when set (UnsupportedFields) and
    what scripts read off it (HfArgumentsMixin), and Transformers' defaults. ``braeburn.TrainingConfig`` is this
    class with braeburn's own defaults (:class:`TrainingConfig` below)."""

    train_sampling_strategy: str = "random"
    """The order of the training samples: random (shuffled each epoch) or sequential (the dataset's order)."""
    dataloader_pin_memory: bool = True
    """Pin batches in host memory where the device gains from it (CUDA); false never pins."""
    # Transformers' defaults where braeburn's core TrainingConfig has its own (docs/migrating.md).
    logging_steps: int = 500
    """Read the loss (a host-device sync) and log every this many optimizer steps."""
    save_strategy: str = "steps"
    """When to save a checkpoint: no, steps (every save_steps, and at the last step) or epoch."""
    report_to: list[str] | None = field(default_factory=list)
    """Trackers besides metrics.jsonl (always written): none (the default, stored as [] as Transformers stores it), all (every integration installed, stored as their names), or names: tensorboard, wandb, mlflow."""

    def __post_init__(self) -> None:
        if self.torch_compile_mode is not None and not self.torch_compile:
            self.torch_compile = True  # as Transformers: a compile mode asks for compiling
        super().__post_init__()
        self.report_to = stored_report_to(self.report_to)

    def _setter_refusals(self, setter: str, values: dict[str, Any]) -> list[OptionError]:
        """For the set_* helpers: each value of an unsupported field away from Transformers' default."""
        defaults = {f.name: f.default for f in dataclasses.fields(UnsupportedFields)}
        return [OptionError(name, value, f"(from {setter}) is a Transformers option braeburn does not support: "
                            f"{UNSUPPORTED_INSTEAD[name]}") for name, value in values.items()
                if name in defaults and value != defaults[name] and (value or defaults[name])
                and not (name.startswith("hub_") and "push_to_hub" in values)]  # said once, by push_to_hub

    def _stored_report_to(self, value: Any) -> Any:
        return stored_report_to(value)

    def _peer_errors(self) -> list[OptionError]:
        errors = unsupported_errors(self)
        if self.train_sampling_strategy not in SAMPLING_STRATEGIES:
            errors.append(OptionError("train_sampling_strategy", self.train_sampling_strategy,
                                      f"choose {' or '.join(SAMPLING_STRATEGIES)} (length grouping and other "
                                      "samplers: pass your own DataLoader through an Accelerator loop)"))
        return errors

    @property
    def shuffles_training(self) -> bool:
        return self.train_sampling_strategy != "sequential"

    def to_dict(self) -> dict[str, Any]:
        return {name: value for name, value in super().to_dict().items() if name not in UNSUPPORTED_INSTEAD}

    def accelerator_options(self) -> dict[str, Any]:
        """The Accelerator's keyword arguments for this config; the accumulation travels as a plugin, as the
        Transformers Trainer passes it, so that ACCELERATE_GRADIENT_ACCUMULATION_STEPS does not replace it."""
        from ..accelerate.accelerator import accumulation_as_plugin  # (torch: not at import, for a fast --help)

        return accumulation_as_plugin(super().accelerator_options())


@dataclass
class TrainingConfig(TrainingArguments):
    """``braeburn.TrainingConfig``: the fields of :class:`TrainingArguments`, with braeburn's own defaults where they
    differ from Transformers' (a log every 50 steps, a checkpoint every epoch; docs/migrating.md)."""

    logging_steps: int = 50
    """Read the loss (a host-device sync) and log every this many optimizer steps."""
    save_strategy: str = "epoch"
    """When to save a checkpoint: no, steps (every save_steps) or epoch."""


def stored_report_to(value: Any) -> Any:
    """``report_to`` as Transformers 5.24's TrainingArguments stores it: "none" (or ["none"]) is [], "all" (or
    ["all"]) the names of every integration installed here (Transformers' own list where it is installed, else
    braeburn's trackers installed, in Transformers' order), any other value not a list the list of that value
    (None is [None], which both Trainers refuse); a list stays as given. An "all" that would name an integration
    braeburn lacks is refused here, naming it and the way out (refuse_an_all_beyond_braeburn)."""
    if value in ("all", ["all"]):
        return _all_integrations()
    if value in ("none", ["none"]):
        return []
    return value if isinstance(value, list) else [value]


def assigned_report_to(value: Any) -> list[Any]:
    """A ``report_to`` assigned after the arguments were made (``args.report_to = "none"``), which no __post_init__
    stored, read as Transformers' Trainer reads it (get_reporting_integration_callbacks): None and "none" are no
    integration, "all" every one installed, a name that name, a tuple its names."""
    if value is None:
        return []
    return list(value) if isinstance(value, tuple) else stored_report_to(value)


_TRANSFORMERS_ORDER = ("mlflow", "tensorboard", "wandb")  # get_available_reporting_integrations's order


def _all_integrations() -> list[str]:
    import importlib.util

    from .logs import refuse_an_all_beyond_braeburn

    if importlib.util.find_spec("transformers") is not None:
        from transformers.integrations import get_available_reporting_integrations

        refuse_an_all_beyond_braeburn("all")
        return list(get_available_reporting_integrations())
    from ...accelerator.trackers import available_trackers

    installed = available_trackers()
    return [name for name in _TRANSFORMERS_ORDER if name in installed]


# Fields whose Transformers default is a choice braeburn's TrainingArguments leaves open: torch_compile=False (never
# compile) where braeburn's unset torch_compile lets its compile='auto' decide.
_ALWAYS_TAKEN = ("torch_compile",)


def from_transformers_arguments(args: Any) -> TrainingArguments:
    """A ``transformers.TrainingArguments`` as braeburn's: every field the script set (those that differ from a fresh
    one's) copied by name; a field braeburn does not have is refused, as braeburn's own TrainingArguments refuses it."""
    fresh = type(args)(output_dir=args.output_dir)
    ours = {spec.name for spec in dataclasses.fields(TrainingArguments)}
    values: dict[str, Any] = {"output_dir": args.output_dir}
    unknown = []
    for spec in dataclasses.fields(args):
        value, default = getattr(args, spec.name, None), getattr(fresh, spec.name, None)
        if not spec.init or (value == default and spec.name not in _ALWAYS_TAKEN):
            continue
        if spec.name not in ours:
            unknown.append(spec.name)
            continue
        values[spec.name] = _plain(value)
    if unknown:
        from ...trainer._argparse import ConfigError

        raise ConfigError([OptionError(name, getattr(args, name), "is a Transformers option braeburn's Trainer does "
                                       "not have; leave it at its default, or build braeburn.TrainingArguments")
                           for name in unknown])
    return TrainingArguments(**values)


def _plain(value: Any) -> Any:
    """An enum as its value (Transformers' strategies and names are enums of text)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def is_transformers_arguments(args: Any) -> bool:
    return any(cls.__module__.startswith("transformers.") and cls.__name__ == "TrainingArguments"
               for cls in type(args).__mro__)


__all__ = ["UNSUPPORTED_INSTEAD", "HfArgumentsMixin", "ParallelMode", "TrainingArguments", "TrainingConfig",
           "UnsupportedFields",
           "from_transformers_arguments", "is_transformers_arguments", "is_unsupported", "unsupported_errors"]
