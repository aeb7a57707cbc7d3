"""Accelerate's ``Accelerator(...)`` arguments that braeburn's core does not have: translated, accepted, or refused.

Each argument is one of three things. Translated onto braeburn's own: ``mixed_precision=None``,
``gradient_accumulation_plugin``, ``dynamo_backend``, a ``DistributedDataParallelKwargs`` (its changed fields
become DistributedDataParallel's arguments), ``DataLoaderConfiguration(data_seed=...)``. Accepted at a value
that changes nothing here: ``device_placement=True``, ``DataLoaderConfiguration()``, any kwargs handler left at
its defaults. Refused, all at once, with what was passed, why braeburn cannot do it (on any machine) and the
fix: :class:`NotSupportedError`. Accelerate's own objects are read by their fields, so a script may keep
``from accelerate.utils import DistributedDataParallelKwargs``; braeburn has the same classes for
``from braeburn import ...``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ...plan.rules import OptionError, PlanError, compile_value


@dataclass
class DataLoaderConfiguration:
    """Accelerate 1.15's ``DataLoaderConfiguration``, its fields and defaults (see the module doc for each)."""

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False


@dataclass
class DistributedDataParallelKwargs:
    """Accelerate 1.15's DDP kwargs handler: a field changed from its default is passed to DistributedDataParallel."""

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: str = "no"
    comm_wrapper: str = "no"
    comm_state_option: dict = field(default_factory=dict)


class NotSupportedError(PlanError):
    """Arguments braeburn cannot honour on any machine (not a fact of this one); ``errors`` lists them all."""

    def __init__(self, errors: list[OptionError]):
        super().__init__(errors)
        lines = "\n".join(f"  - {error}" for error in self.errors)
        plural = "" if len(self.errors) == 1 else "s"
        variables = {str(e.option).startswith("ACCELERATE_") for e in self.errors}  # ACCELERATE_DYNAMO_* by name
        noun = {frozenset({True}): f"ACCELERATE_* variable{plural}", frozenset({False}): f"Accelerator argument{plural}"
                }.get(frozenset(variables), "Accelerator arguments and ACCELERATE_* variables")
        self.args = (f"{len(self.errors)} {noun} that braeburn does not support:\n{lines}",)


@dataclass(frozen=True)
class AccelerateOptions:
    """What the Accelerate-only arguments mean for braeburn's Accelerator."""

    mixed_precision: str
    accumulation_steps: int | None  # from a GradientAccumulationPlugin
    compile: Any  # the compile option with dynamo_backend applied (inductor: True or "regional", no: False)
    ddp_options: dict[str, Any]  # DistributedDataParallel's own arguments
    process_group_timeout: Any  # InitProcessGroupKwargs(timeout=...): a timedelta, or None for torch's
    data_seed: int | None  # DataLoaderConfiguration(data_seed=...)
    tracking: dict[str, Any]  # for the compat class: log_with, project_dir, project_config, plugin, dataloader_config


# Accelerator(...) arguments of Accelerate that braeburn refuses, with what to use instead.
_REFUSED = {
    "deepspeed_plugin": "braeburn has no DeepSpeed; pass strategy='fsdp' to shard the model",
    "deepspeed_plugins": "braeburn has no DeepSpeed; pass strategy='fsdp' to shard the model",
    "fsdp_plugin": "pass strategy='fsdp' (and fsdp_units='block' for a unit per block, as "
                   "TRANSFORMER_BASED_WRAP; 'root' for one, as NO_WRAP); braeburn configures the rest of FSDP itself",
    "megatron_lm_plugin": "braeburn has no Megatron-LM; pass strategy='fsdp'",
    "torch_tp_plugin": "braeburn has no tensor parallelism; pass strategy='fsdp'",
    "parallelism_config": "pass strategy='ddp' or 'fsdp'",
    "dynamo_plugin": "pass compile=True, or compile='regional' for use_regional_compilation (braeburn compiles "
                     "with inductor)",
}
_ACCEPTED_DEFAULTS = {"device_placement": True, "split_batches": False, "rng_types": None}
_TRANSLATED = ("log_with", "project_dir", "project_config", "gradient_accumulation_plugin", "dynamo_backend",
               "kwargs_handlers", "dataloader_config")


def accelerate_options(mixed_precision: Any, options: dict[str, Any], compile: Any = "auto") -> AccelerateOptions:
    """Accelerate-only ``Accelerator(...)`` arguments, checked, beside braeburn's ``compile``; raise
    NotSupportedError listing every refusal."""
    errors = _plain_arguments(options)
    compile = compile_with_dynamo(options.get("dynamo_backend"), compile, errors)
    ddp_options, timeout = _kwargs_handlers(options.get("kwargs_handlers"), errors)
    data_seed = _dataloader_config(options.get("dataloader_config"), errors)
    if errors:
        raise NotSupportedError(errors)
    plugin = options.get("gradient_accumulation_plugin")
    return AccelerateOptions(
        mixed_precision="auto" if mixed_precision is None else str(getattr(mixed_precision, "value", mixed_precision)),
        accumulation_steps=plugin.num_steps if plugin is not None else None,
        compile=compile, ddp_options=ddp_options,
        process_group_timeout=timeout, data_seed=data_seed,
        tracking={k: options.get(k) for k in ("log_with", "project_dir", "project_config",
                                              "gradient_accumulation_plugin", "dataloader_config")})


def compile_with_dynamo(dynamo: Any, compile: Any, errors: list[OptionError]) -> Any:
    """``compile`` with Accelerate's ``dynamo_backend`` applied, a pure rule: inductor compiles (compile left at
    "auto" becomes True; True and "regional", regional compilation with inductor, stay), no does not (False);
    a backend braeburn lacks, and a compile that says the opposite of the backend, go to ``errors``."""
    if dynamo is None:
        return compile
    backend = str(getattr(dynamo, "value", dynamo)).strip().lower()  # Accelerate's DynamoBackend enum, or a string
    if backend not in ("no", "inductor"):
        errors.append(OptionError("dynamo_backend", dynamo, "braeburn compiles with inductor only; pass "
                                  "dynamo_backend='inductor' or compile=True"))
        return compile
    asked = compile_value(compile)
    if asked == "auto":
        return backend == "inductor"
    if (backend == "inductor") == (asked is True or asked == "regional"):
        return compile
    means = "compiling (compile=True, or 'regional' by regions)" if backend == "inductor" else "compile=False"
    errors.append(OptionError("dynamo_backend", dynamo, f"says {means}, but compile={compile!r} was passed; pass "
                              "one of them"))
    return compile


def _plain_arguments(options: dict[str, Any]) -> list[OptionError]:
    errors = []
    for name, value in options.items():
        if name in _REFUSED and value not in (None, [], {}):
            errors.append(OptionError(name, type(value).__name__, f"is not supported: {_REFUSED[name]}"))
        elif name in _ACCEPTED_DEFAULTS and value not in (_ACCEPTED_DEFAULTS[name], None):
            errors.append(OptionError(name, value, "is not supported: braeburn places every batch on the device, "
                                      "splits nothing, and restores all RNG states; leave it at its default"))
        elif name not in _REFUSED and name not in _ACCEPTED_DEFAULTS and name not in _TRANSLATED:
            errors.append(OptionError(name, value, "is not an argument of Accelerator (braeburn or Accelerate)"))
    return errors


def changed_fields(obj: Any) -> dict[str, Any] | None:
    """The dataclass fields of ``obj`` that differ from a default instance of its class, as Accelerate's
    ``to_kwargs`` finds them (a default InitProcessGroupKwargs fills its timeout in ``__post_init__``); None
    when ``obj`` is not a dataclass instance."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return None
    try:
        default = type(obj)()
    except TypeError:  # a field without a default: every field counts as changed
        default = None
    return {item.name: getattr(obj, item.name) for item in dataclasses.fields(obj)
            if default is None or getattr(obj, item.name) != getattr(default, item.name)}


def _field(obj: Any, name: str) -> str:
    return f"{type(obj).__name__}.{name}"


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)  # Accelerate's enums (DDPCommunicationHookType.FP16) as their text


# -- kwargs_handlers ---------------------------------------------------------------------------------

_DDP_ARGUMENTS = ("dim", "broadcast_buffers", "bucket_cap_mb", "find_unused_parameters", "check_reduction",
                  "gradient_as_bucket_view", "static_graph")
_COMM_HOOK_FIX = ("braeburn does not register DDP communication hooks. Fix: remove it, and call "
                  "model.register_comm_hook(state, hook) (torch.distributed.algorithms.ddp_comm_hooks) on the "
                  "prepared model before the first backward")
# Handler classes (by name: Accelerate's or braeburn's) whose changed fields braeburn cannot honour: why, and the fix.
_HANDLER_REFUSALS = {
    "GradScalerKwargs": "braeburn creates the fp16 grad scaler itself, with torch's defaults (init_scale 65536, "
                        "growth every 2000 steps). Fix: remove it, or pass mixed_precision='bf16' (no scaler)",
    "InitProcessGroupKwargs": "braeburn creates the process group itself, with the backend the device needs (nccl "
                              "on CUDA, gloo on the CPU) from torchrun's environment. Fix: remove it (its timeout "
                              "is honoured)",
    "AutocastKwargs": "prepared models and accelerator.autocast() autocast with the resolved precision. Fix: "
                      "remove it, or wrap the code in torch.autocast(...) yourself",
    "ProfileKwargs": "braeburn has no accelerator.profile(). Fix: remove it, and use torch.profiler.profile(...)",
}
_FP8 = "braeburn has no fp8 training (mixed_precision is no, fp16 or bf16). Fix: remove it"


def _kwargs_handlers(handlers: Any, errors: list[OptionError]) -> tuple[dict[str, Any], Any]:
    """DistributedDataParallel's arguments from a DistributedDataParallelKwargs, and the process group's timeout
    from an InitProcessGroupKwargs; every refusal into ``errors``."""
    ddp_options: dict[str, Any] = {}
    timeout = None
    seen: set[str] = set()
    for handler in list(handlers or []):
        kind = type(handler).__name__
        changed = changed_fields(handler)
        if kind in seen:  # as Accelerate: one handler of each kind
            errors.append(OptionError("kwargs_handlers", kind, "is given twice; pass one of each kind"))
            continue
        seen.add(kind)
        if changed is None:
            errors.append(OptionError("kwargs_handlers", kind, "is not one of Accelerate's kwargs handlers (a "
                                      "DistributedDataParallelKwargs, GradScalerKwargs, ... instance). Fix: remove it"))
        elif kind == "DistributedDataParallelKwargs":
            for name, value in changed.items():
                if name in _DDP_ARGUMENTS:
                    ddp_options[name] = value
                else:
                    errors.append(OptionError(_field(handler, name), _plain(value), _COMM_HOOK_FIX))
        elif kind == "InitProcessGroupKwargs" and "timeout" in changed:
            timeout = changed.pop("timeout")
            errors.extend(OptionError(_field(handler, name), _plain(value), _HANDLER_REFUSALS[kind])
                          for name, value in changed.items())
        else:
            why = _HANDLER_REFUSALS.get(kind, _FP8 if "Recipe" in kind else "braeburn does not know this handler. "
                                        "Fix: remove it")
            errors.extend(OptionError(_field(handler, name), _plain(value), why) for name, value in changed.items())
    return ddp_options, timeout


# -- dataloader_config ---------------------------------------------------------------------------------

_LOADER_REFUSALS = {
    "split_batches": ((False,), "braeburn's prepared DataLoaders give every process whole batches of batch_size. "
                             "Fix: leave it False and divide batch_size by the number of processes yourself"),
    "dispatch_batches": ((None, False), "every process reads its own share of the data; braeburn does not dispatch "
                               "batches from the main process. Fix: remove it"),
    "even_batches": ((True,), "prepared DataLoaders always give every process the same number of batches "
                           "(gather_for_metrics drops the padding). Fix: leave it True"),
}


def _dataloader_config(config: Any, errors: list[OptionError]) -> int | None:
    """The data seed of a DataLoaderConfiguration; the fields braeburn cannot honour into ``errors``.
    use_seedable_sampler, non_blocking and use_stateful_dataloader are accepted at any value: prepared loaders
    always follow a seeded order, copy without blocking from pinned memory where the device gains from it,
    and resume mid-epoch from save_state()."""
    if config is None:
        return None
    changed = changed_fields(config)
    if changed is None:
        errors.append(OptionError("dataloader_config", type(config).__name__, "is not a DataLoaderConfiguration. "
                                  "Fix: pass DataLoaderConfiguration(...) (Accelerate's or braeburn's)"))
        return None
    for name, value in changed.items():
        if name in _LOADER_REFUSALS and value not in _LOADER_REFUSALS[name][0]:
            errors.append(OptionError(_field(config, name), value, _LOADER_REFUSALS[name][1]))
    seed = changed.get("data_seed")
    return int(seed) if seed is not None else None


__all__ = ["AccelerateOptions", "DataLoaderConfiguration", "DistributedDataParallelKwargs", "NotSupportedError",
           "accelerate_options", "changed_fields"]
