"""``braeburn.Trainer``: braeburn's Trainer (``braeburn.trainer.loop``) with the Transformers Trainer's surface.

The class is composed here: the core Trainer, :class:`~.overrides.HfOverridableMixin` (the methods a subclass
overrides, which fill the core's hooks), :class:`~.trainer_api.HfTrainerMixin` (the methods scripts call), and
this module's class, which takes Transformers' ``__init__`` arguments and translates them onto the core's,
wraps Transformers-style callbacks (``callbacks.py``), runs on the Accelerate-compatible Accelerator (so the
ACCELERATE_* variables act on a Trainer run as on Transformers'), and writes a Transformers model's
``config.json`` and the tokenizer's files into every checkpoint (``files.py``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils.data import Dataset

from ...trainer import loop as core
from ...trainer.outputs import EvalPrediction, PredictionOutput, TrainOutput
from ..accelerate.accelerator import Accelerator, accumulation_as_plugin
from .arguments import TrainingArguments, from_transformers_arguments, is_transformers_arguments
from .callbacks import adapt_callback
from .files import final_model_names, pretrained_config_files, processing_files
from .logs import HfLogsMixin
from .overrides import HfOverridableMixin, Overrides
from .trainer_api import HfTrainerMixin, resolve_training_parts


class Trainer(HfLogsMixin, HfTrainerMixin, HfOverridableMixin, core.Trainer):
    """Train ``model`` on ``train_dataset`` as ``args`` says; see docs/trainer.md.

    Transformers' arguments work as there (``args=``, ``data_collator=``, ``processing_class=``,
    ``optimizers=(opt, sched)``, ``compute_loss_func=``, ``model_init=``, ...); braeburn's own names
    (``config=``, ``collate_fn=``, ``loss_fn=``, ``optimizer=``, ``lr_scheduler=``) keep working.
    A subclass may override Transformers' ``training_step``, ``compute_loss``, ``create_optimizer``,
    ``create_scheduler``, ``prediction_step``, ``evaluation_loop`` and ``log`` (overrides.py).
    """

    def __init__(self, model: torch.nn.Module | None = None, args: Any = None,
                 data_collator: Callable | None = None, train_dataset: Dataset | None = None,
                 eval_dataset: Dataset | None = None, processing_class: Any = None,
                 model_init: Callable[[], torch.nn.Module] | None = None, compute_loss_func: Callable | None = None,
                 compute_metrics: Callable[[EvalPrediction], dict] | None = None, callbacks: list[Any] | None = None,
                 optimizers: tuple[Any, Any] = (None, None), optimizer_cls_and_kwargs: tuple | None = None,
                 preprocess_logits_for_metrics: Callable | None = None, *, config: Any = None,
                 collate_fn: Callable | None = None, loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
                 optimizer: torch.optim.Optimizer | None = None, lr_scheduler: Any = None,
                 accelerator: Any = None, tokenizer: Any = None):
        self._overrides = Overrides.of(type(self), Trainer)  # once: the loop's fast path when none is overridden
        self.model_init, self.compute_loss_func = model_init, compute_loss_func
        self.optimizer_cls_and_kwargs = optimizer_cls_and_kwargs
        if is_transformers_arguments(args):  # the script kept `from transformers import TrainingArguments`
            args = from_transformers_arguments(args)
        super().__init__(model, config or args or TrainingArguments(), train_dataset=train_dataset,
                         eval_dataset=eval_dataset, collate_fn=collate_fn or data_collator,
                         processing_class=processing_class or tokenizer, loss_fn=loss_fn,
                         optimizer=optimizer or optimizers[0], lr_scheduler=lr_scheduler or optimizers[1],
                         compute_metrics=compute_metrics, preprocess_logits_for_metrics=preprocess_logits_for_metrics,
                         callbacks=callbacks, accelerator=accelerator)
        self._call_hf_hook("on_init_end")

    # -- the core's hooks --------------------------------------------------------------------------------
    def _resolve_parts(self, model: Any, optimizer: Any, loss_fn: Any) -> tuple[Any, Any, Any]:
        """``model_init``, ``optimizer_cls_and_kwargs`` and ``compute_loss_func``, Transformers' ways to give them."""
        model = model if model is not None else _from_model_init(self.model_init)
        optimizer, loss_fn = resolve_training_parts(model, optimizer=optimizer, loss_fn=loss_fn,
                                                    optimizer_cls_and_kwargs=self.optimizer_cls_and_kwargs,
                                                    compute_loss_func=self.compute_loss_func)
        return model, optimizer, loss_fn

    def _make_accelerator(self) -> Accelerator:
        """The Accelerate-compatible Accelerator, the accumulation passed as Transformers passes it."""
        return Accelerator(**accumulation_as_plugin(self.config.accelerator_options()))

    def _adapt_callback(self, callback: Any) -> Any:
        return adapt_callback(callback, self)

    def _checkpoint_files(self) -> dict[str, bytes]:
        """A Transformers model's config.json beside the checkpoint's model.safetensors, and the tokenizer's files, as
        Transformers' Trainer writes them (none with FSDP, whose checkpoints hold shards: they would not load)."""
        if not self.is_main_process or self.accelerator.plan.strategy == "fsdp":
            return {}
        model = self.accelerator.unwrap_model(self._prepared_model)
        return {**processing_files(self.processing_class), **pretrained_config_files(model)}

    def _final_model_names(self) -> list[str]:
        return final_model_names(self.model, self.processing_class)

    # -- Transformers' signatures ------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None, **kwargs: Any) -> TrainOutput:
        """Train; resume from a checkpoint folder or "latest" (True) when asked. Returns the final step, loss and metrics."""
        _no_hf_extras(trial, kwargs)
        if self.config.gradient_accumulation_steps > 1 and self.accelerator.is_main_process:
            self.accelerator.print(ACCUMULATION_NOTE.format(self.config.gradient_accumulation_steps))
        return super().train(resume_from_checkpoint)

    def predict(self, test_dataset: Dataset, ignore_keys: list[str] | None = None,
                metric_key_prefix: str = "test") -> PredictionOutput:
        """Predictions (logits, as numpy arrays) for ``test_dataset``, with labels and metrics when it has labels."""
        output = super().predict(test_dataset, ignore_keys, metric_key_prefix)
        self._call_hf_hook("on_predict", metrics=output.metrics)
        return output


ACCUMULATION_NOTE = (
    "braeburn: gradient_accumulation_steps={0}: each micro-batch's loss is divided by {0} (the window's mean, as "
    "Accelerate does); Transformers 5 differs on purpose here: it hands a model whose forward takes **kwargs the "
    "window's label count (num_items_in_batch) and does not divide, so its losses and gradients are a token-weighted "
    "mean (its language models) or the window's sum (models that ignore the count)")


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


__all__ = ["Trainer"]
