"""``braeburn.Trainer``: braeburn's Trainer (``braeburn.trainer.loop``) with the Transformers Trainer's surface.

The class is composed here: the core Trainer, :class:`~.overrides.HfOverridableMixin` (the methods a subclass
overrides, which fill the core's hooks), :class:`~.trainer_api.HfTrainerMixin` (the methods scripts call), and
this module's class, which takes Transformers' ``__init__`` arguments and translates them onto the core's,
wraps Transformers-style callbacks (``callbacks.py``), runs on the Accelerate-compatible Accelerator (so the
ACCELERATE_* variables act on a Trainer run as on Transformers'), and writes a Transformers model's
``config.json`` and the tokenizer's files into every checkpoint (``files.py``).
"""

from __future__ import annotations

import contextlib
import pickle
from typing import Any, Callable

import torch
from torch.utils.data import Dataset

from ...checkpoints.state import TRANSFORMERS_NAMES, seed_everything
from ...devices.registry import fallback_kind
from ...errors import note_once
from ...trainer import loop as core
from ...trainer.checkpoint import CheckpointError
from ...trainer.outputs import EvalPrediction, PredictionOutput, TrainOutput
from ..accelerate.accelerator import Accelerator, accumulation_as_plugin
from ..accelerate.options import DataLoaderConfiguration
from . import hf_checkpoint
from .arguments import TrainingArguments, assigned_report_to, from_transformers_arguments, is_transformers_arguments
from .callbacks import adapt_callback
from .files import TRAINING_ARGS, final_model_names, pretrained_config_files, processing_files, training_args_bytes
from .logs import HfLogsMixin, refuse_an_all_beyond_braeburn
from .not_here import refuse_missing_on, refused_on
from .overrides import HfOverridableMixin, Overrides
from .trainer_api import HfTrainerMixin, resolve_training_parts


class TrainerAccelerator(Accelerator):
    """The Accelerate-compatible Accelerator whose checkpoints hold optimizer.pt and scheduler.pt, as the
    Transformers Trainer's do (save_state()'s file names are a class attribute, as for Accelerate's own names)."""

    _state_names = TRANSFORMERS_NAMES


class Trainer(HfLogsMixin, HfTrainerMixin, HfOverridableMixin, core.CoreTrainer):
    """Train ``model`` on ``train_dataset`` as ``args`` says; see docs/trainer.md.

    Transformers' arguments work as there (``args=``, ``data_collator=``, ``processing_class=``,
    ``optimizers=(opt, sched)``, ``compute_loss_func=``, ``model_init=``, ...); braeburn's own names
    (``config=``, ``collate_fn=``, ``loss_fn=``, ``optimizer=``, ``lr_scheduler=``) keep working.
    A subclass may override Transformers' ``training_step``, ``compute_loss``, ``create_optimizer``,
    ``create_scheduler``, ``prediction_step``, ``evaluation_loop`` and ``log`` (overrides.py).
    """

    final_save_option = "save_model"  # a message says trainer.save_model(<another folder>) writes the model in memory
    zeroes_unheld_grads = True  # Transformers zeroes the model's gradients, not only the optimizer's, after each step

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
        given = config or args
        if given is not None and not isinstance(getattr(given, "report_to", []), list):
            given.report_to = assigned_report_to(given.report_to)  # assigned after the arguments were made
        refuse_an_all_beyond_braeburn(getattr(given, "report_to", None))
        super().__init__(model, config or args or TrainingArguments(), train_dataset=train_dataset,
                         eval_dataset=eval_dataset, collate_fn=collate_fn or data_collator,
                         processing_class=processing_class or tokenizer, loss_fn=loss_fn,
                         optimizer=optimizer or optimizers[0], lr_scheduler=lr_scheduler or optimizers[1],
                         compute_metrics=compute_metrics, preprocess_logits_for_metrics=preprocess_logits_for_metrics,
                         callbacks=callbacks, accelerator=accelerator)
        self._call_hf_hook("on_init_end")
        self._set_use_cache()

    def _set_use_cache(self) -> None:
        """As Transformers' __init__ ends: the model's ``config.use_cache`` is TrainingArguments.use_cache (False, the
        only value braeburn takes), which the saved config.json and TensorBoard's model_config text show."""
        model = self.accelerator.unwrap_model(self.model) if self.model is not None else None
        model_config = getattr(model, "config", None)
        if model_config is not None:
            with contextlib.suppress(AttributeError, TypeError):  # a config that takes no attribute (a dict)
                model_config.use_cache = self.config.use_cache

    def __dir__(self) -> list[str]:
        """The names there: not the Transformers Trainer names that braeburn lacks, each of which is refused with
        its way out (not_here.py: a descriptor on the class, not a ``__getattr__``); any other missing name is a
        plain AttributeError."""
        return sorted(set(super().__dir__()) - refused_on(self, _REFUSED))

    def evaluate(self, eval_dataset: Any = None, ignore_keys: list[str] | None = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        """As Transformers' evaluate: a dict of datasets is evaluated one by one, each named in its metrics'
        prefix (``eval_<name>_loss``), each logged as it ends."""
        if isinstance(eval_dataset, dict):
            metrics: dict[str, float] = {}
            for name, dataset in eval_dataset.items():
                metrics.update(self.evaluate(dataset, ignore_keys, f"{metric_key_prefix}_{name}"))
            return metrics
        return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)

    # -- the core's hooks --------------------------------------------------------------------------------
    def _resolve_parts(self, model: Any, optimizer: Any, loss_fn: Any) -> tuple[Any, Any, Any]:
        """``model_init``, ``optimizer_cls_and_kwargs`` and ``compute_loss_func``, Transformers' ways to give them.
        As Transformers' ``__init__``, the seed is set before ``model_init`` runs."""
        if model is None:
            seed_everything(self.config.seed, fallback_kind())  # torch.manual_seed seeds every device's generator
            model = _from_model_init(self.model_init)
        optimizer, loss_fn = resolve_training_parts(model, optimizer=optimizer, loss_fn=loss_fn,
                                                    optimizer_cls_and_kwargs=self.optimizer_cls_and_kwargs,
                                                    compute_loss_func=self.compute_loss_func)
        return model, optimizer, loss_fn

    def _make_accelerator(self) -> Accelerator:
        """The Accelerate-compatible Accelerator, the accumulation passed as Transformers passes it, and data_seed
        as Transformers passes it (DataLoaderConfiguration(data_seed=...): it seeds the training order)."""
        options = accumulation_as_plugin(self.config.accelerator_options())
        # Transformers' spelling (fp16=True) on the CPU trains in float32 there; braeburn's own
        # --mixed_precision fp16 asked for float16 autocast and gets it
        self._fp16_dropped = (self.config.fp16 and options["mixed_precision"] == "fp16"
                              and _on_fallback_device(options))
        if self._fp16_dropped:  # said by train()
            options["mixed_precision"] = "no"
        if self.config.data_seed is not None:
            options["dataloader_config"] = DataLoaderConfiguration(data_seed=self.config.data_seed)
        return TrainerAccelerator(**options)

    def _adapt_callback(self, callback: Any) -> Any:
        return adapt_callback(callback, self)

    def _eval_losses(self) -> SampleLosses:
        return SampleLosses(self.accelerator)

    def _loader(self, dataset: Dataset, batch_size: int, shuffle: bool, train: bool | None = None) -> Any:
        """A DataLoader as braeburn's, but dataloader_drop_last drops a short last batch from the evaluation and
        prediction loaders too, as Transformers' get_eval_dataloader and get_test_dataloader do."""
        return super()._loader(dataset, batch_size, shuffle, train=True if self.config.dataloader_drop_last else train)

    def _loader_generator(self) -> None:
        """None: each DataLoader iteration (an epoch, an evaluation) draws its worker seed from torch's global
        generator, as the Transformers Trainer's DataLoaders do, so the dropout masks after it are Transformers'."""
        return None

    def _checkpoint_files(self) -> dict[str, bytes]:
        """What Transformers' Trainer writes in every checkpoint beside the weights: ``training_args.bin`` (the
        arguments, pickled as there), a Transformers model's config.json beside model.safetensors, and the tokenizer's
        files (config.json and the tokenizer's files not with FSDP, whose checkpoints hold shards: they would not
        load). Written through the checkpoint's staging folder, as braeburn's own files are."""
        if not self.is_main_process:
            return {}
        try:
            files = {TRAINING_ARGS: training_args_bytes(self.config)}
        except (pickle.PicklingError, TypeError, AttributeError) as error:  # a value set on the arguments
            note_once(f"checkpoints hold no {TRAINING_ARGS}: the training arguments cannot be pickled "
                      f"({type(error).__name__}: {error}); the rest of each checkpoint is written")
            files = {}
        if self.accelerator.plan.strategy == "fsdp":
            return files
        model = self.accelerator.unwrap_model(self._prepared_model)
        return {**files, **processing_files(self.processing_class), **pretrained_config_files(model)}

    def _final_model_names(self) -> list[str]:
        return final_model_names(self.model, self.processing_class)

    def _check_resumable(self, request: str) -> None:
        """A checkpoint of Transformers' Trainer resumes (hf_checkpoint.py) when named by its path, with another
        output_dir; otherwise one line says how."""
        refusal = hf_checkpoint.refusal(request, self.output_dir)
        if refusal is not None:
            raise CheckpointError(refusal)
        if hf_checkpoint.resumable(request, self.output_dir) is None:
            super()._check_resumable(request)

    def _resume(self, request: str, loader: Any) -> None:
        folder = hf_checkpoint.resumable(request, self.output_dir)
        if folder is None:
            super()._resume(request, loader)
        else:
            hf_checkpoint.resume(self, folder, loader)

    # -- Transformers' signatures ------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None, **kwargs: Any) -> TrainOutput:
        """Train; resume from a checkpoint folder or "latest" (True) when asked. Returns the final step, loss and metrics."""
        _no_hf_extras(trial, kwargs)
        if self.model_init is not None:
            self._model_from_init_again()
        if self.config.gradient_accumulation_steps > 1 and self.accelerator.is_main_process:
            self.accelerator.print(ACCUMULATION_NOTE.format(self.config.gradient_accumulation_steps))
        if self.config.torch_compile and self.accelerator.is_main_process:
            self.accelerator.print(COMPILE_NOTE)
        elif self._may_compile_unasked and self.accelerator.is_main_process:
            self.accelerator.print(AUTO_COMPILE_NOTE.format(self.accelerator.plan.device.name))
        if getattr(self, "_fp16_dropped", False):
            self.accelerator.print(FP16_ON_FALLBACK.format(fallback_kind().name))
        return super().train(resume_from_checkpoint)

    @property
    def _may_compile_unasked(self) -> bool:
        """torch_compile was not set (nor braeburn's compile), and on this device braeburn's compile='auto' compiles
        where it expects the run to earn the compile back: Transformers would never compile here."""
        plan = self.accelerator.plan
        return self.config.torch_compile is None and plan.compile_auto and plan.compile

    def _model_from_init_again(self) -> None:
        """Transformers' train() seeds again and calls ``model_init`` again, so a run starts from the same weights
        and the same random numbers whatever drew from torch's generator since ``__init__``: the same here, the
        new model's weights loaded into the Trainer's model."""
        seed_everything(self.config.seed, self.accelerator.plan.device)
        fresh = _from_model_init(self.model_init)
        self.accelerator.unwrap_model(self.model).load_state_dict(fresh.state_dict())

    def predict(self, test_dataset: Dataset, ignore_keys: list[str] | None = None,
                metric_key_prefix: str = "test") -> PredictionOutput:
        """Predictions (logits, as numpy arrays) for ``test_dataset``, with labels and metrics when it has labels."""
        output = super().predict(test_dataset, ignore_keys, metric_key_prefix)
        self._call_hf_hook("on_predict", metrics=output.metrics)
        return output


class SampleLosses:
    """Transformers' eval_loss: each batch's mean loss repeated for each of its samples, gathered from every
    process (the duplicates that pad an uneven last batch dropped), and their float32 mean (numpy's, as there)."""

    def __init__(self, accelerator: Any):
        self.accelerator, self.count, self.parts = accelerator, 0, []

    def add(self, loss: torch.Tensor, size: int) -> None:
        self.parts.append(self.accelerator.gather_for_metrics(loss.detach().repeat(size)))
        self.count += size

    def mean(self) -> float:
        losses = torch.cat(self.parts)
        if losses.dtype == torch.bfloat16:  # numpy has no bfloat16: Transformers makes it float32 first
            losses = losses.float()
        return losses.cpu().numpy().mean().item()  # sync


ACCUMULATION_NOTE = (
    "braeburn: gradient_accumulation_steps={0}: each micro-batch's loss is divided by {0} (the window's mean, as "
    "Accelerate does); Transformers 5 differs on purpose here: it hands a model whose forward takes **kwargs the "
    "window's label count (num_items_in_batch) and does not divide, so its losses and gradients are a token-weighted "
    "mean (its language models) or the window's sum (models that ignore the count)")


COMPILE_NOTE = (
    "braeburn: torch_compile=True: braeburn compiles the model its own way (its forward wrapper, its graph), not as "
    "Transformers' Accelerate does, so the compiled kernels round differently and dropout draws other masks: losses "
    "differ from a Transformers compiled run from the first step (by float rounding without dropout). Leave "
    "torch_compile off for the numbers of Transformers' uncompiled run, bitwise")


AUTO_COMPILE_NOTE = (
    "braeburn: torch_compile is not set, so braeburn decides torch.compile itself (compile='auto'): on {0} it times "
    "the first eager steps and compiles the model when the time it expects to save pays the compile back (a line "
    "says so if it does; the run's summary says what it chose), where Transformers never compiles without "
    "torch_compile=True. Pass torch_compile=False to keep Transformers' eager run")


FP16_ON_FALLBACK = (
    "braeburn: fp16=True on the {0}: training in float32, as Transformers does there (Accelerate has no fp16 on the "
    "{0}: no autocast, no grad scaler); pass bf16=True for mixed precision on the {0}")


def _on_fallback_device(options: dict[str, Any]) -> bool:
    """Whether the run will train on the device kind that is no accelerator: asked for (use_cpu, --accelerator,
    BRAEBURN_DEVICE, ACCELERATE_USE_CPU), or the only one usable here."""
    from ...devices.host import current_host
    from ...devices.registry import accelerator_kinds
    from ...plan.envvars import env_device
    from ..accelerate.environment import accelerate_env

    name = fallback_kind().name
    if options.get("cpu") or options.get("accelerator") == name or env_device() == name or accelerate_env().cpu:
        return True
    host = current_host()
    return not any(kind.availability(host).usable for kind in accelerator_kinds())


_REFUSED = refuse_missing_on(Trainer)


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
