"""braeburn's messages in Lightning's words, for the length of a ``braeburn.lightning`` call.

The core names an option as a command-line flag (``--resume_from_checkpoint PATH``); a Lightning user has
``Trainer(...)`` arguments, ``fit(...)`` arguments and the module's own code instead. :class:`LightningSpelling`
tells the core (through ``braeburn.plan.option_spelling``) how each option it may name is set here, and which have
no counterpart (the core then leaves that advice out).
"""

from __future__ import annotations

from typing import Any

from ...plan.config_files import excerpt
from ...plan.option_spelling import UNSET, Spelling

# braeburn's config field -> the Trainer(...) argument that sets it.
TRAINER_ARGUMENTS = {"max_steps": "max_steps", "num_train_epochs": "max_epochs", "max_grad_norm": "gradient_clip_val",
                     "gradient_accumulation_steps": "accumulate_grad_batches", "logging_steps": "log_every_n_steps",
                     "mixed_precision": "precision", "accelerator": "accelerator", "devices": "devices"}
# braeburn's mixed_precision -> Lightning's precision (and back: any of Lightning's spellings of one).
PRECISION_NAMES = {"no": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}
PRECISIONS = {"32-true": "no", "32": "no", 32: "no", "16-mixed": "fp16", "16": "fp16", 16: "fp16",
              "bf16-mixed": "bf16", "bf16": "bf16"}
# What a Lightning user does instead of setting these (value: how, with {} for the value where one is given).
_INSTEAD = {"learning_rate": ("the optimizer's learning rate in configure_optimizers()",
                              "the optimizer's lr={} in configure_optimizers()"),
            "per_device_train_batch_size": ("the DataLoader's batch_size", "DataLoader(batch_size={})"),
            "dataloader_num_workers": ("DataLoader(num_workers=N)", "DataLoader(num_workers={})"),
            "cpu": ("Trainer(accelerator='cpu')", "Trainer(accelerator='cpu')"),
            "save_state": ("trainer.braeburn_trainer.accelerator.save_state(<another folder>)",) * 2,
            "compute_metrics": ("validation_step with self.log",) * 2}
# Options a Lightning user has no counterpart for: advice naming them is left out (seed: Lightning's Trainer takes
# none; the script seeds itself).
NO_COUNTERPART = ("nan_policy", "compile", "metric_for_best_model", "eval_strategy", "pad_to_buckets", "seed")


class LightningSpelling(Spelling):
    """Options as ``braeburn.lightning.Trainer(...)`` and ``fit(...)`` take them. ``root``: default_root_dir;
    ``ckpt_path``: what fit() was given (the core's "latest" is what it asked for); ``precision``: what
    Trainer(precision=...) was given (UNSET or None: Lightning's default, "32-true")."""

    def __init__(self, root: str, ckpt_path: Any = "last", precision: Any = UNSET):
        self.root, self.ckpt_path = root, "last" if ckpt_path is None else ckpt_path
        self.precision = UNSET if precision is None else precision

    def option(self, name: str, value: Any = UNSET) -> str | None:
        if name == "resume_from_checkpoint":
            return "fit(ckpt_path=...)" if value is UNSET else f"fit(ckpt_path={self._ckpt(value)!r})"
        if name == "output_dir":
            return "Trainer(default_root_dir=...)"
        if name in TRAINER_ARGUMENTS:
            return self._trainer_argument(name, value)
        if name in _INSTEAD:
            bare, with_value = _INSTEAD[name]
            return bare if value is UNSET else with_value.format(value)
        return None  # NO_COUNTERPART, and anything this table does not know: no flag is offered

    def given(self, name: str, value: Any) -> str:
        if name == "resume_from_checkpoint":
            return f"fit(ckpt_path={(self.ckpt_path if value == 'latest' else str(value))!r})"
        if name == "output_dir":
            return f"the run folder {str(value)!r} (of Trainer(default_root_dir={self.root!r}))"
        if name == "mixed_precision":
            asked = isinstance(self.precision, (str, int)) and PRECISIONS.get(self.precision)
            value = self.precision if asked == value else PRECISION_NAMES.get(value, value)  # as the user wrote it
        return f"{TRAINER_ARGUMENTS.get(name, name)}={excerpt(value)}"

    def chosen(self, name: str, value: Any) -> str:
        if name == "mixed_precision" and self.precision is UNSET and value == "no":
            return f"Lightning's default ({self.given(name, value)})"
        return super().chosen(name, value)

    def shown(self, name: str, value: Any) -> str:
        return PRECISION_NAMES.get(value, str(value)) if name == "mixed_precision" else super().shown(name, value)

    def _ckpt(self, value: Any) -> str:
        return "last" if value == "latest" else str(value)

    @staticmethod
    def _trainer_argument(name: str, value: Any) -> str | None:
        if name == "mixed_precision" and value is not UNSET:
            if value not in PRECISION_NAMES:
                return None  # "auto": Lightning has no such precision
            value = repr(PRECISION_NAMES[value])
        shown = "..." if value is UNSET else value
        return f"Trainer({TRAINER_ARGUMENTS[name]}={shown})"


__all__ = ["LightningSpelling", "NO_COUNTERPART", "PRECISION_NAMES", "PRECISIONS", "TRAINER_ARGUMENTS"]
