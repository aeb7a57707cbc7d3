"""The Transformers Trainer's names that ``braeburn.Trainer`` does not have, each refused in one line with the way out.

``MISSING_ON_TRAINER``: the public methods and attributes of ``transformers.Trainer`` (its class's and those its
``__init__`` sets) that braeburn's lacks; ``Trainer.__getattr__`` raises :class:`NotInBraeburn` for them instead
of a bare AttributeError. ``MISSING_CALLBACKS``: Transformers' built-in callbacks that braeburn does not export;
``from braeburn import PrinterCallback`` raises an ImportError that says what to do instead. ``SINCE``: the
Transformers release that added a listed name, for the names an older Transformers 5 lacks too. A test compares
the lists with the installed Transformers, whichever release it is (tests/compat/transformers/test_missing_names.py).
"""

from __future__ import annotations

from typing import Any, NoReturn

_AUTOCAST = "a prepared model autocasts inside its forward (mixed_precision / bf16 / fp16 choose the precision)"
_PARALLEL = "braeburn runs DDP or FSDP (TrainingArguments.strategy); no {} parallelism"
_HUB = "braeburn does not upload to the Hub: trainer.save_model(dir), then `huggingface-cli upload <repo> dir`"
_FLOPS = "braeburn reports samples/s and trainer.state.total_flos, and counts no FLOPs of its own"
_DEEPSPEED = "braeburn has no DeepSpeed or XLA FSDP: it is always False here; use strategy='fsdp'"

MISSING_ON_TRAINER: dict[str, str] = {
    # methods
    "autocast_smart_context_manager": _AUTOCAST,
    "compute_loss_context_manager": _AUTOCAST,
    "call_model_init": "model_init is called at construction and again by train(); trainer.model is its model",
    "create_accelerator_and_postprocess": "pass Trainer(accelerator=braeburn.Accelerator(...)); trainer.accelerator "
                                          "is the one in use",
    "end": "nothing to end: braeburn's trackers close when train() returns",
    "get_batch_samples": "override get_train_dataloader() to change what a step reads",
    "get_cp_size": _PARALLEL.format("context"),
    "get_sp_size": _PARALLEL.format("sequence"),
    "get_tp_size": _PARALLEL.format("tensor"),
    "get_optimizer_cls_and_kwargs": "set optim / optim_args in TrainingArguments, or pass "
                                    "optimizer_cls_and_kwargs=(cls, kwargs) or optimizers=(optimizer, scheduler)",
    "get_optimizer_group": "read trainer.optimizer.param_groups (get_decay_parameter_names(model) names what decays)",
    "hyperparameter_search": "braeburn has no hyperparameter search: loop over configs and build a Trainer per trial",
    "init_hf_repo": _HUB,
    "loss_is_scaled_for_ga": "training_step returns the loss divided by gradient_accumulation_steps, always",
    "set_initial_training_values": "train() computes its steps itself; read trainer.state.max_steps after train()",
    "store_flos": _FLOPS,
    # attributes that Transformers' __init__ sets
    "callback_handler": "trainer.callbacks holds the callbacks; use add_callback / pop_callback / remove_callback",
    "control": "a TrainerCallback's hooks get control as an argument: set control.should_* there",
    "current_flos": _FLOPS,
    "deepspeed": _DEEPSPEED,
    "is_deepspeed_enabled": _DEEPSPEED,
    "is_fsdp_enabled": "read trainer.accelerator.plan.strategy == 'fsdp'",
    "is_fsdp_xla_enabled": _DEEPSPEED,
    "is_fsdp_xla_v1_enabled": _DEEPSPEED,
    "is_fsdp_xla_v2_enabled": _DEEPSPEED,
    "gather_function": "use trainer.accelerator.gather_for_metrics",
    "hp_name": "braeburn has no hyperparameter search: loop over configs and build a Trainer per trial",
    "hp_search_backend": "braeburn has no hyperparameter search: loop over configs and build a Trainer per trial",
    "hub_model_id": _HUB,
    "is_distributed_loading_by_transformers": "braeburn loads the model you pass; use strategy='fsdp' to shard it",
    "is_in_train": "a TrainerCallback's on_train_begin / on_train_end mark the run",
    "is_model_parallel": "braeburn has no model parallelism across devices (device_map); use strategy='fsdp'",
    "label_smoother": "set label_smoothing_factor in TrainingArguments (the loss is smoothed as there)",
    "model_accepts_loss_kwargs": "braeburn never hands num_items_in_batch to the model (docs/migrating.md, "
                                 "gradient_accumulation_steps)",
    "model_wrapped": "trainer.accelerator.unwrap_model(trainer.model) is the model; the prepared one is "
                     "trainer.accelerator's",
    "neftune_noise_alpha": "braeburn has no NEFTune: add the noise in your model's embedding forward",
    "place_model_on_device": "braeburn always places the model on the device it trains on",
}

# The release that added each name that Transformers 5.17 (the oldest release the tests run against) lacks: a test on
# an older Transformers expects them absent from its Trainer too (read in 5.17.0, 5.18.0, 5.19.0 and 5.24.0's trainer.py).
SINCE: dict[str, tuple[int, int]] = {"end": (5, 18), "loss_is_scaled_for_ga": (5, 19),
                                     "is_distributed_loading_by_transformers": (5, 19)}

MISSING_CALLBACKS: dict[str, str] = {
    "DefaultFlowCallback": "braeburn's loop decides logging, evaluation and saving from the arguments itself; set "
                           "control.should_log / should_evaluate / should_save in a TrainerCallback to change when",
    "PrinterCallback": "pass disable_tqdm=True: braeburn then prints each log as a plain line",
    "ProgressCallback": "braeburn shows its own progress (disable_tqdm=True: plain log lines instead)",
}


class NotInBraeburn(AttributeError, NotImplementedError):
    """A Transformers Trainer name braeburn does not have. An AttributeError, so ``hasattr`` and ``getattr(x, name,
    default)`` still answer; the message names the way out."""


def refuse_trainer_attribute(owner: str, name: str) -> NoReturn:
    way_out = MISSING_ON_TRAINER.get(name)
    if way_out is None:
        raise AttributeError(f"'{owner}' object has no attribute {name!r}")
    since = f" {SINCE[name][0]}.{SINCE[name][1]}+" if name in SINCE else ""
    raise NotInBraeburn(f"Trainer.{name} is Transformers'{since} and braeburn.Trainer does not have it: {way_out} "
                        "(docs/migrating.md, Trainer methods)")


class _Refused:
    """A ``transformers.Trainer`` name that braeburn.Trainer lacks, on the class: reading it raises NotInBraeburn with
    the way out (an AttributeError, so hasattr() is False; a value set on an instance under the name is read as
    usual). A descriptor per name rather than a ``__getattr__``: a class with ``__getattr__`` keeps Python from
    specializing its instances' attribute reads, and a training step reads the Trainer's some fifty times."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        cls = owner if instance is None else type(instance)
        value = _defined_beyond(cls, self.name, self)  # a class after braeburn.Trainer in the MRO (a mixin) gives it
        if value is _ABSENT:
            refuse_trainer_attribute(cls.__name__, self.name)
        return value.__get__(instance, cls) if hasattr(type(value), "__get__") else value


_ABSENT = object()


def _defined_beyond(cls: type, name: str, refusal: _Refused | None = None) -> Any:
    """``name`` as the first class of ``cls``'s MRO that defines it other than by a refusal gives it (after the class
    that holds ``refusal``, when given: a subclass's ``super().name`` reaches the refusal, not the subclass's own
    again), else _ABSENT: a mixin listed after braeburn.Trainer (``class T(braeburn.Trainer, Mixin)``) keeps the
    names it gives."""
    past = refusal is None
    for klass in cls.__mro__:
        value = vars(klass).get(name, _ABSENT)
        if value is refusal:
            past = True
        elif past and value is not _ABSENT and not isinstance(value, _Refused):
            return value
    return _ABSENT


def refused_on(instance: Any, names: frozenset[str]) -> set[str]:
    """Those of ``names`` that reading on ``instance`` refuses: set neither on it nor by a class of its type (a
    subclass or mixin that defines one has it; ``dir()`` lists it)."""
    return {name for name in names if name not in vars(instance) and _defined_beyond(type(instance), name) is _ABSENT}


def refuse_missing_on(cls: type) -> frozenset[str]:
    """Puts a refusal on ``cls`` for each MISSING_ON_TRAINER name that no class of its MRO defines; returns them (its
    ``__dir__`` leaves them out: they are not there)."""
    names = frozenset(name for name in MISSING_ON_TRAINER if not any(name in vars(k) for k in cls.__mro__))
    for name in names:
        setattr(cls, name, _Refused(name))
    return names


def refuse_callback(name: str) -> NoReturn:
    raise ImportError(f"{name} is a Transformers callback that braeburn does not have: {MISSING_CALLBACKS[name]} "
                      "(docs/migrating.md)", name=name)


__all__ = ["MISSING_CALLBACKS", "MISSING_ON_TRAINER", "SINCE", "NotInBraeburn", "refuse_callback", "refuse_missing_on",
           "refuse_trainer_attribute", "refused_on"]
