"""The Transformers Trainer's surface on braeburn's Trainer: its parser, its ways of giving the training parts, and
the methods scripts call.

- :class:`HfArgumentParser`: Transformers' parser class over :func:`braeburn.trainer.config.parse_config`.
- :func:`resolve_training_parts`: ``optimizer_cls_and_kwargs`` and ``compute_loss_func``.
- :class:`HfTrainerMixin`: ``save_model``, ``log_metrics``, ``save_metrics``, ``save_state`` ...
The Trainer is composed in ``trainer.py``; the callback adapter is in ``callbacks.py``. What the Trainer returns
(``EvalPrediction``, ``PredictionOutput``, ``TrainOutput``) and its default collators are braeburn's own
(``braeburn.trainer.outputs``, ``braeburn.trainer.collators``), named here too for the scripts that import them
from this module's old path.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable

from ...checkpoints import ownership
from ...checkpoints.no_follow import write_atomic
from ...plan.rules import OptionError
from ...trainer.batches import can_return_loss, find_label_names, labels_by_name, output_predictions
from ...trainer.collators import make_collate
from ...trainer.outputs import EvalPrediction, PredictionOutput, TrainOutput


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


def resolve_training_parts(model: Any, *, optimizer: Any, optimizer_cls_and_kwargs: tuple | None,
                           loss_fn: Callable | None, compute_loss_func: Callable | None) -> tuple[Any, Callable | None]:
    """(optimizer, loss_fn) from Transformers' ways of giving them and braeburn's.

    ``optimizer_cls_and_kwargs`` builds the optimizer over the trainable parameters when none is given;
    ``compute_loss_func(outputs, labels, num_items_in_batch)`` becomes a ``loss_fn(outputs, labels)``.
    """
    if optimizer is None and optimizer_cls_and_kwargs is not None:
        cls, kwargs = optimizer_cls_and_kwargs
        optimizer = cls((p for p in model.parameters() if p.requires_grad), **kwargs)
    if loss_fn is None and compute_loss_func is not None:
        loss_fn = lambda outputs, labels: compute_loss_func(outputs, labels, num_items_in_batch=None)  # noqa: E731
    return optimizer, loss_fn


NO_DECAY_NAMES = [re.compile(pattern) for pattern in
                  (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)")]


def decay_parameter_names(module: Any) -> list[str]:
    """Transformers' rule (get_parameter_names with its patterns): every parameter but those inside a LayerNorm and
    those whose lower-cased name contains "bias", "layernorm", "rmsnorm", or a "norm" / "_norm" name part."""
    import torch

    names = []
    for child_name, child in module.named_children():
        if isinstance(child, torch.nn.LayerNorm):
            continue
        names += [f"{child_name}.{name}" for name in decay_parameter_names(child)
                  if not any(p.search(f"{child_name}.{name}".lower()) for p in NO_DECAY_NAMES)]
    return names + [name for name in module._parameters if not any(p.search(name.lower()) for p in NO_DECAY_NAMES)]


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
    def can_return_loss(self) -> bool:
        return can_return_loss(self._unwrapped_for_labels())

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
        from ...trainer.callbacks import CallbackList
        from .callbacks import adapt_callback

        builtins = [c for c in self.callbacks.callbacks if c.__module__.startswith("braeburn.trainer.")]
        users = [c for c in self.callbacks.callbacks if c not in builtins]
        self.callbacks = CallbackList(self._order_callbacks(builtins, [*users, adapt_callback(callback, self)]))

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
        return self._loader(self.train_dataset, self.config.per_device_train_batch_size,
                            shuffle=getattr(self.config, "shuffles_training", True), train=True)

    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("get_eval_dataloader() needs an eval_dataset")
        return self._loader(dataset, self.config.per_device_eval_batch_size, shuffle=False)

    def get_test_dataloader(self, test_dataset: Any) -> Any:
        return self._loader(test_dataset, self.config.per_device_eval_batch_size, shuffle=False)

    def num_examples(self, dataloader: Any) -> int:
        return len(dataloader.dataset)

    def get_decay_parameter_names(self, model: Any) -> list[str]:
        """The names of the parameters that weight_decay applies to, as Transformers decides: by name, not by shape
        (braeburn's own Trainer decays every parameter of 2 or more dimensions). A subclass may override it."""
        return decay_parameter_names(model)

    def _parameter_groups(self, model: Any) -> list[dict]:
        """Transformers' two groups: the parameters named by get_decay_parameter_names, then the others; one group
        without weight decay (the same arithmetic, one fused kernel)."""
        trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        if self.config.weight_decay == 0:
            return [{"params": [p for _, p in trainable], "weight_decay": 0.0}]
        decayed = set(self.get_decay_parameter_names(model))
        groups = [{"params": [p for name, p in trainable if name in decayed], "weight_decay": self.config.weight_decay},
                  {"params": [p for name, p in trainable if name not in decayed], "weight_decay": 0.0}]
        return [group for group in groups if group["params"]]

    def get_num_trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def get_learning_rates(self) -> list[float]:
        if self.optimizer is None:
            raise ValueError("get_learning_rates() needs an optimizer: call it after train() has started")
        return [group["lr"] for group in self.optimizer.param_groups]

    def get_total_train_batch_size(self, args: Any = None) -> int:
        args = args or self.config
        return args.per_device_train_batch_size * args.gradient_accumulation_steps * self.accelerator.num_processes

    def _call_hf_hook(self, hook: str, **kwargs: Any) -> None:
        """Transformers-only hooks (on_init_end, on_predict) of the Transformers-style callbacks."""
        for callback in self.callbacks.callbacks:
            if hasattr(callback, "inner") and hasattr(callback, "call"):
                callback.call(hook, **kwargs)


__all__ = ["EvalPrediction", "HfArgumentParser", "HfTrainerMixin", "PredictionOutput", "TrainOutput",
           "can_return_loss", "find_label_names", "labels_by_name", "make_collate", "output_predictions",
           "resolve_training_parts"]
