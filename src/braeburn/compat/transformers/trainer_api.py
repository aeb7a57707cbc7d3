"""The Transformers Trainer's surface on braeburn's Trainer: argument mapping, collators, outputs, helpers.

- :func:`apply_hf_aliases` / :func:`hf_errors`: ``bf16``/``fp16``/``torch_compile``/``fsdp``/...
  mapped onto braeburn's options, and the conflicts between them, as config errors.
- :class:`HfArgumentParser`: Transformers' parser class over :func:`parse_config`.
- :class:`EvalPrediction`, :class:`PredictionOutput`, :class:`TrainOutput`: numpy arrays and tuples, as
  Transformers returns them.
- :func:`make_collate`: ``data_collator`` / ``processing_class`` / ``remove_unused_columns``.
- :class:`HfTrainerMixin`: ``save_model``, ``log_metrics``, ``save_metrics``, ``save_state`` ...
The callback adapter is in ``hf_callbacks.py``.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, NamedTuple

from ...devices.base import DeviceKind
from ...devices.host import HostFacts
from ...checkpoints import ownership
from ...checkpoints.no_follow import write_atomic
from ...plan.rules import OptionError

LABEL_KEYS = ("labels", "label", "label_ids")
_noted: set[str] = set()


def note_once(message: str) -> None:
    """A note on stderr, once per process (a difference from a peer the user should know of)."""
    if message not in _noted:
        _noted.add(message)
        print(f"braeburn: {message}", file=sys.stderr, flush=True)


# -- TrainingArguments -> TrainingConfig ------------------------------------------------------------
def _json_field(config: Any, name: str) -> None:
    value = getattr(config, name)
    if isinstance(value, str) and value.strip():
        try:
            setattr(config, name, json.loads(value))
        except ValueError:
            pass  # hf_errors reports it


def apply_hf_aliases(config: Any) -> None:
    """Map Transformers' spellings onto braeburn's options, in place (idempotent; never raises)."""
    if config.bf16 and not config.fp16 and config.mixed_precision == "auto":
        config.mixed_precision = "bf16"
    if config.fp16 and not config.bf16 and config.mixed_precision == "auto":
        config.mixed_precision = "fp16"
    if config.torch_compile is not None and config.compile == "auto":
        config.compile = "true" if config.torch_compile else "false"
    if config.fsdp and config.strategy == "auto":
        config.strategy = "fsdp"
    if config.load_best_model_at_end and config.metric_for_best_model is None:
        config.metric_for_best_model = "loss"  # Transformers' default when the best model is asked for
    if config.greater_is_better is None and config.metric_for_best_model is not None:
        config.greater_is_better = not str(config.metric_for_best_model).endswith("loss")
    if config.activation_checkpointing:
        config.gradient_checkpointing = True
    if config.activation_checkpointing_kwargs is not None and config.gradient_checkpointing_kwargs is None:
        config.gradient_checkpointing_kwargs = config.activation_checkpointing_kwargs
    if isinstance(config.report_to, str):
        config.report_to = [config.report_to]
    if isinstance(config.label_names, str):
        config.label_names = [config.label_names]
    for name in ("gradient_checkpointing_kwargs", "lr_scheduler_kwargs"):
        _json_field(config, name)
    if config.eval_strategy == "steps" and config.eval_steps is None and config.logging_steps == 50:
        note_once("--eval_strategy steps without --eval_steps evaluates every logging_steps, as Transformers "
                   "does, but braeburn's default logging_steps is 50 (Transformers': 500), so it evaluates every "
                   "50 steps; pass --eval_steps 500 for Transformers' cadence.")
    if config.use_mps_device:
        note_once("--use_mps_device is deprecated in Transformers and not needed: braeburn (like Transformers) "
                   "trains on the Mac's GPU (mps) by default when it is usable; --accelerator mps insists on it.")


def hf_errors(config: Any) -> list[OptionError]:
    """Conflicts between Transformers' spellings and braeburn's options, and Transformers' own rules."""
    errors: list[OptionError] = []
    if config.bf16 and config.fp16:
        errors.append(OptionError("bf16", True, "and --fp16 both set; choose one"))
    for flag, precision in (("bf16", "bf16"), ("fp16", "fp16")):
        # "auto" is the default, not a choice: with both --fp16 and --bf16 it stays "auto", and the error above says all
        if getattr(config, flag) and config.mixed_precision not in (precision, "auto"):
            errors.append(OptionError(flag, True, f"conflicts with --mixed_precision {config.mixed_precision}; "
                                      "pass one of them"))
    for name in ("gradient_checkpointing_kwargs", "lr_scheduler_kwargs"):
        value = getattr(config, name)
        if value is not None and not isinstance(value, dict):
            errors.append(OptionError(name, value, 'must be a JSON object, e.g. {"use_reentrant": false}'))
    if config.fsdp and "offload" in str(config.fsdp):
        errors.append(OptionError("fsdp", config.fsdp, "CPU offload is not supported; pass --fsdp full_shard"))
    if config.load_best_model_at_end:
        if config.eval_strategy == "no":
            errors.append(OptionError("load_best_model_at_end", True, "needs evaluations: pass --eval_strategy "
                                      "epoch (or steps) and the same --save_strategy"))
        elif config.save_strategy != config.eval_strategy:
            errors.append(OptionError("load_best_model_at_end", True, f"needs --save_strategy to match --eval_strategy "
                                      f"({config.save_strategy} vs {config.eval_strategy}), so that every evaluated "
                                      "model is saved"))
        elif config.eval_strategy == "steps" and config.save_steps % (config.eval_steps or config.logging_steps):
            errors.append(OptionError("save_steps", config.save_steps, "must be a multiple of eval_steps with "
                                      "--load_best_model_at_end"))
    for name in ("dataloader_prefetch_factor", "torch_empty_cache_steps", "eval_accumulation_steps"):
        value = getattr(config, name)
        if value is not None and value < 1:
            errors.append(OptionError(name, value, "must be >= 1 (or unset)"))
    if config.dataloader_prefetch_factor is not None and config.dataloader_num_workers == 0:
        errors.append(OptionError("dataloader_prefetch_factor", config.dataloader_prefetch_factor,
                                  "needs --dataloader_num_workers 1 or more"))
    from ...accelerator.trackers import TRACKERS, is_available

    for name in config.report_to or []:
        if name not in TRACKERS and name not in ("all", "none"):
            errors.append(OptionError("report_to", name, f"choose from none, all, {', '.join(TRACKERS)}"))
        elif name in TRACKERS and name != "tensorboard" and not is_available(name):  # tensorboard: config.py says it
            errors.append(OptionError("report_to", name, f"needs the {TRACKERS[name][1]} package, which is not "
                                      f"installed; pip install {TRACKERS[name][1]}, or pass --report_to all or none"))
    return errors


class HfArgumentParser:
    """Transformers' ``HfArgumentParser`` over braeburn's parser: the same methods for the same dataclasses."""

    def __init__(self, dataclass_types: Any, **_: Any):
        self.dataclass_types = tuple(dataclass_types) if isinstance(dataclass_types, (list, tuple)) \
            else (dataclass_types,)

    def parse_args_into_dataclasses(self, args: list[str] | None = None, return_remaining_strings: bool = False,
                                    look_for_args_file: bool = True, args_filename: str | None = None,
                                    args_file_flag: str | None = None) -> tuple[Any, ...]:
        from ...trainer.config import parse_config

        if return_remaining_strings:
            raise ValueError("return_remaining_strings=True is not supported: braeburn reports every unknown "
                             "option as an error; add the option to one of your dataclasses")
        return parse_config(*self.dataclass_types, argv=args)

    def parse_dict(self, args: dict[str, Any], allow_extra_keys: bool = False) -> tuple[Any, ...]:
        from ...trainer._argparse import ConfigError

        names = {f for cls in self.dataclass_types for f in cls.__dataclass_fields__}
        extra = sorted(set(args) - names)
        if extra and not allow_extra_keys:
            raise ConfigError([OptionError("unknown option", key, "no dataclass has this field") for key in extra])
        return tuple(cls(**{k: v for k, v in args.items() if k in cls.__dataclass_fields__})
                     for cls in self.dataclass_types)

    def _parse_file(self, path: str, allow_extra_keys: bool) -> tuple[Any, ...]:
        from ...trainer._argparse import read_config_file

        return self.parse_dict(read_config_file(path), allow_extra_keys)

    def parse_json_file(self, json_file: str | os.PathLike, allow_extra_keys: bool = False) -> tuple[Any, ...]:
        data = json.loads(Path(json_file).read_text(encoding="utf-8"))
        return self.parse_dict(data, allow_extra_keys)

    def parse_yaml_file(self, yaml_file: str | os.PathLike, allow_extra_keys: bool = False) -> tuple[Any, ...]:
        return self._parse_file(str(yaml_file), allow_extra_keys)


# -- what evaluation and training return ---------------------------------------------------------------
class EvalPrediction:
    """What ``compute_metrics`` receives: numpy arrays, as Transformers gives them (also ``preds, labels = p``)."""

    def __init__(self, predictions: Any, label_ids: Any, inputs: Any = None, losses: Any = None):
        self.predictions, self.label_ids, self.inputs, self.losses = predictions, label_ids, inputs, losses

    def _items(self) -> tuple[Any, ...]:
        return (self.predictions, self.label_ids) + tuple(x for x in (self.inputs, self.losses) if x is not None)

    def __iter__(self):
        return iter(self._items())

    def __getitem__(self, index: int) -> Any:
        return self._items()[index]

    def __len__(self) -> int:
        return len(self._items())


class PredictionOutput(NamedTuple):
    predictions: Any
    label_ids: Any
    metrics: dict[str, float]


class TrainOutput(NamedTuple):
    global_step: int
    training_loss: float
    metrics: dict[str, float]


def to_numpy(data: Any) -> Any:
    """Tensors (nested in tuples/lists/dicts too) as numpy arrays; bf16/fp16 become float32 as in Transformers."""
    import torch

    if isinstance(data, torch.Tensor):
        data = data.detach().cpu()
        if data.dtype in (torch.bfloat16, torch.float16):
            data = data.float()
        return data.numpy()
    if isinstance(data, Mapping):
        return {k: to_numpy(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(to_numpy(v) for v in data)
    return data


def concat_padded(parts: list[Any], padding_index: int = -100) -> Any:
    """Concatenate batches on dim 0, padding dim 1 with ``padding_index`` when lengths differ (token tasks)."""
    import torch

    if not parts:
        return None
    first = parts[0]
    if isinstance(first, torch.Tensor):
        if first.dim() < 2 or all(p.shape[1:] == first.shape[1:] for p in parts):
            return torch.cat(parts)
        longest = max(p.shape[1] for p in parts)
        padded = []
        for part in parts:
            shape = (part.shape[0], longest) + tuple(part.shape[2:])
            out = part.new_full(shape, padding_index)
            out[:, :part.shape[1]] = part
            padded.append(out)
        return torch.cat(padded)
    if isinstance(first, Mapping):
        return {k: concat_padded([p[k] for p in parts], padding_index) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(concat_padded([p[i] for p in parts], padding_index) for i in range(len(first)))
    return parts


# -- batches ---------------------------------------------------------------------------------------------
def find_label_names(model: Any) -> list[str]:
    """Transformers' default ``label_names``: the forward's parameters with "label" in their name, and
    ``start_positions``/``end_positions`` for a question-answering model; ``["labels"]`` when it names none
    (braeburn's models with a ``loss_fn``)."""
    import torch

    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        params = list(inspect.signature(forward).parameters)
    except (TypeError, ValueError):
        return ["labels"]
    answers = ("start_positions", "end_positions") if "QuestionAnswering" in type(model).__name__ else ()
    return [p for p in params if "label" in p or p in answers] or ["labels"]


def can_return_loss(model: Any) -> bool:
    """Transformers' ``can_return_loss``: the forward has ``return_loss=True`` as a default (CLIP-like models)."""
    try:
        param = inspect.signature(model.forward).parameters.get("return_loss")
    except (AttributeError, TypeError, ValueError):
        return False
    return param is not None and param.default is True


def labels_by_name(batch: Mapping, names: list[str]) -> Any:
    """A dict batch's labels as Transformers' prediction_step takes them: the tensor for one name, a tuple in
    ``names``' order for several, None unless every one is there."""
    values = tuple(batch.get(name) for name in names)
    if not values or any(value is None for value in values):
        return None
    return values[0] if len(values) == 1 else values


def output_predictions(outputs: Any, ignore_keys: list[str] | None = None) -> Any:
    """The predictions of a dict-like output (a ModelOutput) as Transformers gives them: the values other than
    ``loss`` and ``ignore_keys``, in order, as a tuple, or the value itself when there is one
    (``start_logits, end_logits = predictions``)."""
    skip = {"loss", *(ignore_keys or ())}
    values = tuple(v for k, v in outputs.items() if k not in skip and v is not None)
    return values[0] if len(values) == 1 else values


def ignored_output_keys(model: Any, ignore_keys: list[str] | None) -> list[str]:
    """Transformers' default ``ignore_keys``: the model config's ``keys_to_ignore_at_inference``."""
    if ignore_keys is not None:
        return ignore_keys
    config = getattr(model, "config", None)
    return list(getattr(config, "keys_to_ignore_at_inference", ["cache"])) if config is not None else []


def forward_arguments(model: Any) -> set[str] | None:
    """The names the model's forward declares (as Transformers' signature columns), or None when it
    declares none besides *args/**kwargs (then nothing is removed)."""
    import torch

    forward = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return None
    named = {p.name for p in params if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)}
    return named or None


def _with_labels_renamed(feature: Mapping) -> dict:
    feature = dict(feature)
    for key in ("label", "label_ids"):
        if key in feature and "labels" not in feature:
            feature["labels"] = feature.pop(key)
    return feature


def _padding_collator(processing_class: Any) -> Callable | None:
    """``DataCollatorWithPadding(processing_class)`` as Transformers builds it when no collator is given."""
    if not callable(getattr(processing_class, "pad", None)):
        return None

    def collate(features: list[Mapping]) -> Any:
        batch = processing_class.pad([_with_labels_renamed(f) for f in features], padding=True, return_tensors="pt")
        return dict(batch)

    return collate


def _default_collator(features: list[Any]) -> Any:
    from torch.utils.data import default_collate

    if features and isinstance(features[0], Mapping):
        return default_collate([_with_labels_renamed(f) for f in features])
    return default_collate(features)


def make_collate(model: Any, config: Any, data_collator: Callable | None, processing_class: Any) -> Callable | None:
    """The collate function: the given collator, else a padding one for a tokenizer, else the default; dict
    samples lose the keys the model's forward does not take (remove_unused_columns), labels kept."""
    collate = data_collator or _padding_collator(processing_class)
    keep = forward_arguments(model) if config.remove_unused_columns else None
    if keep is None and collate is data_collator:
        return data_collator  # nothing to change: braeburn's own path (None: torch's default_collate)
    keep = None if keep is None else keep | set(config.label_names or LABEL_KEYS)
    inner = collate or _default_collator

    def collate_fn(features: list[Any]) -> Any:
        if keep is not None and features and isinstance(features[0], Mapping):
            features = [{k: v for k, v in f.items() if k in keep} for f in features]
        return inner(features)

    return collate_fn


def label_smoothed_loss(factor: float) -> Callable[[Any, Any], Any]:
    """Cross-entropy on the output's logits with label smoothing, ignoring -100 labels (Transformers' LabelSmoother)."""
    import torch

    def loss_fn(outputs: Any, labels: Any) -> Any:
        from ...trainer.batches import model_logits

        logits = model_logits(outputs)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                 labels.reshape(-1).long(), ignore_index=-100,
                                                 label_smoothing=factor)

    return loss_fn


def resolve_training_parts(model: Any, config: Any, *, optimizer: Any, lr_scheduler: Any,
                           optimizer_cls_and_kwargs: tuple | None, loss_fn: Callable | None,
                           compute_loss_func: Callable | None) -> tuple[Any, Any, Callable | None]:
    """(optimizer, lr_scheduler, loss_fn) from Transformers' ways of giving them and braeburn's.

    ``optimizer_cls_and_kwargs`` builds the optimizer over the trainable parameters when none is given;
    ``compute_loss_func(outputs, labels, num_items_in_batch)`` becomes a ``loss_fn(outputs, labels)``;
    ``label_smoothing_factor`` > 0 gives the smoothed cross-entropy when no loss is given.
    """
    if optimizer is None and optimizer_cls_and_kwargs is not None:
        cls, kwargs = optimizer_cls_and_kwargs
        optimizer = cls((p for p in model.parameters() if p.requires_grad), **kwargs)
    if loss_fn is None and compute_loss_func is not None:
        loss_fn = lambda outputs, labels: compute_loss_func(outputs, labels, num_items_in_batch=None)  # noqa: E731
    if loss_fn is None and config.label_smoothing_factor > 0:
        loss_fn = label_smoothed_loss(config.label_smoothing_factor)
    return optimizer, lr_scheduler, loss_fn


def prepare_model_options(model: Any, config: Any, kind: DeviceKind, host: HostFacts, compile_asked: bool = False) -> None:
    """gradient_checkpointing (with the random-state replay ``kind`` needs; ``compile_asked``: compile=True, refused
    where that replay is needed) and tf32, applied before training."""
    import torch

    from ...trainer.checkpointing import checkpointing_kwargs, refuse_compile_with_replay

    refuse_compile_with_replay(model, config.gradient_checkpointing, kind, host, compile_asked)
    if config.gradient_checkpointing:
        enable = getattr(model, "gradient_checkpointing_enable", None)
        if enable is None:
            raise ValueError(f"gradient_checkpointing=True, but {type(model).__name__} has no "
                             "gradient_checkpointing_enable(); wrap your blocks in torch.utils.checkpoint.checkpoint "
                             "instead, or pass --gradient_checkpointing false")
        enable(gradient_checkpointing_kwargs=checkpointing_kwargs(config.gradient_checkpointing_kwargs, kind, host))
    if config.tf32 is not None:
        torch.set_float32_matmul_precision("high" if config.tf32 else "highest")


# -- Trainer methods scripts call ------------------------------------------------------------------------
def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class HfTrainerMixin:
    """Transformers Trainer methods that sit on top of braeburn's loop."""

    @property
    def args(self) -> Any:
        return self.config

    @args.setter
    def args(self, value: Any) -> None:
        self.config = value

    @property
    def label_names(self) -> list[str]:
        """The batch keys that hold the labels: ``args.label_names``, else the model's (Transformers' rule)."""
        names = getattr(self, "_label_names", None)
        if names is None:
            names = list(self.config.label_names or find_label_names(self._unwrapped_for_labels()))
        return names

    @label_names.setter
    def label_names(self, names: list[str]) -> None:
        self._label_names = list(names)

    @property
    def can_return_loss(self) -> bool:
        return can_return_loss(self._unwrapped_for_labels())

    def _unwrapped_for_labels(self) -> Any:
        base = getattr(self.model, "get_base_model", None)  # a PEFT model: its base names the labels
        return base() if callable(base) else self.model

    def is_world_process_zero(self) -> bool:
        return self.accelerator.is_main_process

    def is_local_process_zero(self) -> bool:
        return self.accelerator.is_local_main_process

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The trained model into ``output_dir`` (default: args.output_dir): ``save_pretrained`` for a Transformers
        model (config.json + model.safetensors), else model.safetensors; the processing class and training_args.bin."""
        acc = self.accelerator
        folder = Path(output_dir or self.config.output_dir)
        model = acc.unwrap_model(self._prepared_model if self._prepared_model is not None else self.model)
        state = acc.get_state_dict(model) if acc.shards_model else None
        if not acc.is_main_process:
            return
        from .files import save_pretrained_files

        save_pretrained_files(folder, model, state, self.processing_class, self.config)  # only over braeburn's own

    def save_state(self) -> None:
        """trainer_state.json in output_dir (the log history, best metric and step), from the main process."""
        folder = Path(self.config.output_dir)
        if self.accelerator.is_main_process and ownership.may_write(folder, "trainer_state.json", "save_state()"):
            self.state.save(folder)

    def metrics_format(self, metrics: dict[str, float]) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}

    def log_metrics(self, split: str, metrics: dict[str, float]) -> None:
        """Print ``metrics`` as Transformers does: a ``***** split metrics *****`` block (main process)."""
        if not self.accelerator.is_main_process:
            return
        print(f"***** {split} metrics *****")
        width = max((len(k) for k in metrics), default=0)
        for key in sorted(metrics):
            print(f"  {key: <{width}} = {_format(metrics[key])}")

    def save_metrics(self, split: str, metrics: dict[str, float], combined: bool = True) -> None:
        """``{split}_results.json`` in output_dir, and merged into ``all_results.json`` (main process)."""
        if not self.accelerator.is_main_process:
            return
        folder = Path(self.config.output_dir)
        if ownership.may_write(folder, f"{split}_results.json", "save_metrics()"):
            write_atomic(folder / f"{split}_results.json", json.dumps(metrics, indent=4, sort_keys=True))
        if combined and ownership.may_write(folder, "all_results.json", "save_metrics()"):
            path = folder / "all_results.json"
            merged = {} if path.is_symlink() or not path.exists() else json.loads(path.read_text(encoding="utf-8"))
            merged.update(metrics)
            write_atomic(path, json.dumps(merged, indent=4, sort_keys=True))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Record ``logs`` in log_history and send them to the loggers (callbacks' on_log)."""
        if self.state.max_steps:
            logs = {**logs, "epoch": round(self.state.epoch_progress, 4)}
        self._record(dict(logs))

    def create_model_card(self, **kwargs: Any) -> None:
        """A short README.md in output_dir: the run's arguments and its last evaluation (main process)."""
        if not self.accelerator.is_main_process:
            return
        folder = Path(self.config.output_dir)
        if not ownership.may_write(folder, "README.md", "create_model_card()"):
            return
        lines = [f"# {kwargs.get('model_name') or folder.name}", "", "Trained with braeburn.", ""]
        for key in ("finetuned_from", "tasks", "dataset", "language", "license", "tags"):
            if kwargs.get(key):
                lines.append(f"- {key}: {kwargs[key]}")
        evals = self._last_eval_metrics()
        if evals:
            lines += ["", "## Evaluation", ""] + [f"- {k}: {_format(v)}" for k, v in sorted(evals.items())]
        write_atomic(folder / "README.md", "\n".join(lines) + "\n")

    def push_to_hub(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("braeburn does not upload to the Hugging Face Hub: call trainer.save_model(dir) "
                                  "and then `huggingface-cli upload <repo> dir`")

    def add_callback(self, callback: Any) -> None:
        from .callbacks import adapt_callback

        self.callbacks.add(adapt_callback(callback, self))

    def pop_callback(self, callback: Any) -> Any:
        found = self._find_callback(callback)
        if found is not None:
            self.remove_callback(found)
        return getattr(found, "inner", found)

    def remove_callback(self, callback: Any) -> None:
        found = self._find_callback(callback)
        if found is None:
            return
        remaining = [c for c in self.callbacks.callbacks if c is not found]
        from ...trainer.callbacks import CallbackList

        self.callbacks = CallbackList(remaining)

    def _find_callback(self, callback: Any) -> Any:
        for item in self.callbacks.callbacks:
            inner = getattr(item, "inner", item)
            if item is callback or inner is callback or (isinstance(callback, type) and isinstance(inner, callback)):
                return item
        return None

    def get_train_dataloader(self) -> Any:
        """The training DataLoader as the Trainer builds it (shuffled, collated; not yet prepared)."""
        if self.train_dataset is None:
            raise ValueError("get_train_dataloader() needs a train_dataset")
        return self._loader(self.train_dataset, self.config.per_device_train_batch_size, shuffle=True)

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("get_eval_dataloader() needs an eval_dataset")
        return self._loader(dataset, self.config.per_device_eval_batch_size, shuffle=False)

    def get_test_dataloader(self, test_dataset: Any) -> Any:
        return self._loader(test_dataset, self.config.per_device_eval_batch_size, shuffle=False)

    def num_examples(self, dataloader: Any) -> int:
        return len(dataloader.dataset)

    def get_num_trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def get_learning_rates(self) -> list[float]:
        if self.optimizer is None:
            raise ValueError("get_learning_rates() needs an optimizer: call it after train() has started")
        return [group["lr"] for group in self.optimizer.param_groups]

    def get_total_train_batch_size(self, args: Any = None) -> int:
        args = args or self.config
        return args.per_device_train_batch_size * args.gradient_accumulation_steps * self.accelerator.num_processes

    def _train_metrics(self, seconds: float, steps_done: int, samples: int) -> dict[str, float]:
        """Transformers' train() metrics, also appended to log_history."""
        metrics = {"train_runtime": round(seconds, 4),
                   "train_samples_per_second": round(samples / seconds, 3) if seconds > 0 else 0.0,
                   "train_steps_per_second": round(steps_done / seconds, 3) if seconds > 0 else 0.0,
                   "train_loss": self._mean_training_loss(), "epoch": round(self.state.epoch_progress, 4)}
        if self._overrides.log:  # Transformers ends train() with self.log(metrics): an override sees them too
            self.log(dict(metrics))
        else:
            self.state.log_history.append({"step": self.state.global_step, **metrics})
        return metrics


__all__ = ["EvalPrediction", "HfArgumentParser", "HfTrainerMixin", "PredictionOutput", "TrainOutput",
           "apply_hf_aliases", "can_return_loss", "find_label_names", "hf_errors", "labels_by_name", "make_collate",
           "output_predictions"]
