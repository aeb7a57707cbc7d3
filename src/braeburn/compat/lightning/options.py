"""Lightning's ``Trainer(...)`` arguments, read into braeburn's TrainingConfig (one pure function, every error at once).

Lightning spells precision "32-true", "16-mixed", "bf16-mixed"; devices and accelerator as braeburn's config does
("auto", "cpu", "gpu", "cuda", "mps"). An argument braeburn does not do is refused, with all the others, naming
each and what to do instead: a silent difference (a clip value dropped, a precision changed) is worse than an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from ...trainer.config import CoreTrainingConfig as TrainingConfig
from .callbacks import OWN_TRAINER, callback_errors
from .spelling import PRECISIONS


# Lightning arguments accepted at the values that change nothing here ("ddp": what braeburn launch runs anyway).
_HARMLESS = {"logger": (None, True, False), "enable_model_summary": (None, True, False), "num_nodes": (1,),
             "strategy": ("auto", "ddp"),
             "deterministic": (None, False), "benchmark": (None, False), "barebones": (False,),
             "gradient_clip_algorithm": (None, "norm"), "min_epochs": (None,), "min_steps": (None,),
             "limit_train_batches": (None, 1.0),
             "fast_dev_run": (False,), "max_time": (None,), "plugins": (None,), "sync_batchnorm": (False,),
             "reload_dataloaders_every_n_epochs": (0,), "use_distributed_sampler": (True,),
             "detect_anomaly": (False,), "profiler": (None,), "inference_mode": (True,)}


@dataclass
class LightningOptions:
    """What a Lightning ``Trainer`` was asked for, as braeburn will do it."""

    config: TrainingConfig
    callbacks: list[Any] = field(default_factory=list)
    checkpoints: bool = True
    root: str = "."  # default_root_dir (Trainer sets the working folder when none is given); runs go in lightning_logs/
    validates: bool = True  # limit_val_batches=0: no validation at all (nor a sanity check), as Lightning
    val_every_n_epochs: int = 1  # check_val_every_n_epoch: the epochs whose end validates
    sanity_batches: int = 2  # num_sanity_val_steps: validation batches run before training (-1: all of them)
    val_check_interval: float = 1.0  # an int: every N training batches; a float: every such fraction of an epoch


def lightning_options(kwargs: dict[str, Any], launched: int | None = None) -> tuple[LightningOptions | None, list[str]]:
    """(the options, []) or (None, every error): pure, no I/O. ``launched``: the processes per machine that a
    launcher started (LOCAL_WORLD_SIZE), None when this is a plain ``python script.py``."""
    given = dict(kwargs)
    errors = _type_errors(given)  # (a number of the wrong type is taken out: the checks below compare numbers)
    errors += _batch_counts(given)
    errors += _unsupported(given)
    callbacks = given.get("callbacks")
    callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    errors += callback_errors(callbacks)  # (one callback without a list: as Lightning takes it)
    precision = given.pop("precision", None)
    precision = "32-true" if precision is None else precision  # None: Lightning's default
    if not isinstance(precision, (str, int)) or precision not in PRECISIONS:
        errors.append(f"precision={precision!r}: braeburn trains in float32 with mixed float16 or bfloat16 autocast "
                      "only; pass precision='32-true', '16-mixed' or 'bf16-mixed' (a model in half precision "
                      "throughout: .to(dtype) the module yourself; a float64 one is trained in float32 on every "
                      "device)")
    devices = given.get("devices", "auto")
    if isinstance(devices, (list, tuple)):
        errors.append(f"devices={devices!r}: a list of device indices is not supported; pass devices=N (a count) "
                      "and choose the GPUs with CUDA_VISIBLE_DEVICES")
    else:
        error, given["devices"] = _processes(devices, launched)
        errors += [error] if error else []
    clip = given.get("gradient_clip_val")
    if clip is not None and not (math.isfinite(clip) and clip >= 0):
        errors.append(f"gradient_clip_val={clip!r}: must be a finite number >= 0, such as 1.0 (0 or None: no "
                      "clipping)")
    errors += _count_errors(given)
    if errors:
        return None, errors
    return _options(given, PRECISIONS[precision], callbacks), []


# The numeric arguments and what Lightning takes for each (bool is no number here, though Python's int it is).
_FLOAT, _INT = (Real, "an int or a float"), (Integral, "an int")
_NUMERIC = {"gradient_clip_val": _FLOAT, "val_check_interval": _FLOAT, "limit_train_batches": _FLOAT,
            "limit_val_batches": _FLOAT, "max_epochs": _INT, "max_steps": _INT, "accumulate_grad_batches": _INT,
            "log_every_n_steps": _INT, "num_nodes": _INT, "num_sanity_val_steps": _INT, "min_epochs": _INT,
            "min_steps": _INT, "check_val_every_n_epoch": _INT, "reload_dataloaders_every_n_epochs": _INT}


def _type_errors(given: dict[str, Any]) -> list[str]:
    """`name` should be an int (or a float), as Lightning says it: one error each; the argument is taken out."""
    errors = []
    for name, (kind, words) in _NUMERIC.items():
        value = given.get(name)
        if value is None or (isinstance(value, kind) and not isinstance(value, bool)):
            continue
        fix = "the number without quotes" if isinstance(value, str) else \
            "a whole number" if kind is Integral else "a number"
        errors.append(f"{name}={value!r}: `{name}` should be {words}, not a {type(value).__name__} (Lightning's "
                      f"Trainer takes no other type); pass {fix}")
        del given[name]
    return errors


def _processes(devices: Any, launched: int | None) -> tuple[str | None, Any]:
    """(an error or None, braeburn's devices): one process only. Lightning's DDP (devices=N, or N processes a
    launcher started) hands each process a DistributedSampler(shuffle=True) over the training set, whatever the
    DataLoader's own order, where braeburn would shard the loader as it is: the losses would differ from the first
    step, so several processes are refused, naming the way out."""
    several = devices if isinstance(devices, int) and not isinstance(devices, bool) and devices > 1 else None
    if several is None and (launched is None or launched <= 1):
        return None, devices
    how = f"devices={several}" if several is not None else f"{launched} processes started by a launcher"
    return (f"{how}: Lightning's DDP gives each process a DistributedSampler(shuffle=True, seed=PL_GLOBAL_SEED or 0) "
            "over the training set, whatever the DataLoader's own order, while braeburn.lightning.Trainer would "
            "shard the DataLoader as it is, so the losses would differ from the first step; train one process with "
            f"devices=1, or {OWN_TRAINER} and Trainer(devices={several or launched}), started as Lightning starts it "
            "(python script.py)"), devices


# The counts, checked here in Lightning's terms (braeburn's own config would name its own fields), and what each takes.
_COUNTS = {"max_epochs": "-1 (no limit) or a whole number of epochs >= 1",
           "max_steps": "-1 (no limit, the default) or a whole number of steps >= 1",
           "accumulate_grad_batches": "a whole number of batches >= 1 (1: no accumulation)",
           "log_every_n_steps": "a whole number of steps >= 1 (the default is 50)",
           "check_val_every_n_epoch": "a whole number of epochs >= 1 (1, the default: validate after every epoch)",
           "num_sanity_val_steps": "-1 (every validation batch), 0 (no sanity check) or a whole number of batches"}
_NO_LIMIT = ("max_epochs", "max_steps")  # where -1 means "no limit"
_FROM_ZERO = ("num_sanity_val_steps",)  # where 0 is a value
_AT_ZERO = {"max_epochs": "; Lightning stops before the first epoch, and braeburn trains nothing: leave fit() out",
            "max_steps": "; Lightning stops before the first step, and braeburn trains nothing: leave fit() out",
            "log_every_n_steps": "; Lightning's 0 turns its logger off, while braeburn always writes metrics.jsonl"}


def _count_errors(given: dict[str, Any]) -> list[str]:
    errors = []
    for name, takes in _COUNTS.items():
        value = given.get(name)
        whole = isinstance(value, Integral)  # (the type was checked: a bool or another type is gone)
        low = 0 if name in _FROM_ZERO else 1
        if value is None or (whole and (value >= low or (value == -1 and name in _NO_LIMIT + _FROM_ZERO))):
            continue
        why = _AT_ZERO.get(name, "") if whole and value == 0 else ""
        errors.append(f"{name}={value!r}: must be {takes}{why}")
    return errors


# Lightning reads an int as a number of batches and a float as a fraction of the epoch: 1 is one batch, 1.0 all.
_BATCH_COUNTS = {"limit_train_batches": "trains one batch per epoch", "limit_val_batches": "validates one batch"}


def _batch_counts(given: dict[str, Any]) -> list[str]:
    """An int given to an argument whose default is the float 1.0: a count of batches in Lightning, never
    "all" (1 == 1.0 in Python, so the check takes the type); taken out, as braeburn does not count them."""
    errors = []
    for name, what in _BATCH_COUNTS.items():
        value = given.get(name)
        if name == "limit_val_batches" and value == 0:
            continue  # 0 batches, the int or the float: no validation, as Lightning (read by _options)
        if isinstance(value, Integral) and not isinstance(value, bool):
            example = f" (at {value}, Lightning {what})" if value == 1 else ""
            errors.append(f"{name}={value}: an int is a number of batches in Lightning{example}, which "
                          f"braeburn.lightning.Trainer does not do; remove it (1.0, the default, is every batch), "
                          f"or {OWN_TRAINER}")
            del given[name]
    return errors


def _unsupported(given: dict[str, Any]) -> list[str]:
    errors = []
    for name in sorted(set(given) - set(_HARMLESS) - set(_READ)):
        errors.append(f"{name}={given[name]!r}: Lightning's Trainer argument {name!r} is not supported by "
                      f"braeburn.lightning.Trainer; remove it (docs/migrating.md, 'Lightning', lists what is)")
    if "check_val_every_n_epoch" in given and given["check_val_every_n_epoch"] is None:
        errors.append("check_val_every_n_epoch=None: Lightning then validates every val_check_interval training "
                      "batches across epochs, which braeburn.lightning.Trainer does not do; pass "
                      f"check_val_every_n_epoch=N (validate after every N-th epoch), or {OWN_TRAINER}")
    interval = given.get("val_check_interval")
    if interval is not None and not (isinstance(interval, Integral) and interval >= 1) and \
            not (isinstance(interval, Real) and not isinstance(interval, Integral) and 0 < interval <= 1):
        errors.append(f"val_check_interval={interval!r}: must be a whole number of training batches >= 1, or a "
                      "fraction of the epoch in (0, 1] (1.0, the default: at the epoch's end)")
    elif interval not in (None, 1.0) and given.get("accumulate_grad_batches", 1) not in (None, 1):
        errors.append(f"val_check_interval={interval!r} with accumulate_grad_batches="
                      f"{given['accumulate_grad_batches']}: Lightning validates between the batches of an "
                      "accumulation window, where braeburn.lightning.Trainer validates after optimizer steps only; "
                      f"remove one of the two, or {OWN_TRAINER}")
    limit = given.get("limit_val_batches")
    if limit not in (None, 0, 1.0):
        errors.append(f"limit_val_batches={limit!r}: braeburn.lightning.Trainer validates on every batch (1.0, the "
                      f"default) or on none (0); remove it, pass 0, or {OWN_TRAINER}")
    for name, allowed in _HARMLESS.items():
        value = given.pop(name, allowed[0])
        if value not in allowed:
            errors.append(f"{name}={value!r}: braeburn.lightning.Trainer only takes {' or '.join(map(repr, allowed))} "
                          "(doing nothing beyond Lightning's default); remove it, or port that part to braeburn's "
                          "own Trainer")
    return errors


_READ = ("accelerator", "devices", "precision", "max_epochs", "max_steps", "gradient_clip_val",
         "accumulate_grad_batches", "log_every_n_steps", "default_root_dir", "enable_progress_bar",
         "enable_checkpointing", "callbacks", "check_val_every_n_epoch", "num_sanity_val_steps", "limit_val_batches",
         "val_check_interval")


def _options(given: dict[str, Any], mixed_precision: str, callbacks: list[Any]) -> LightningOptions:
    max_steps = int(given.get("max_steps", -1))
    max_epochs = None if given.get("max_epochs") is None else int(given["max_epochs"])
    epochs = max_epochs if max_epochs is not None and max_epochs >= 0 else (1e6 if max_steps > 0 else 1000)
    root = str(given.get("default_root_dir") or ".")
    config = TrainingConfig(
        output_dir=str(Path(root) / "lightning_logs"),  # each fit() writes in a new version_<N> of it
        accelerator=str(given.get("accelerator", "auto")), devices=given.get("devices", "auto"),
        mixed_precision=mixed_precision, num_train_epochs=float(epochs), max_steps=max_steps if max_steps else -1,
        max_grad_norm=float(given.get("gradient_clip_val") or 0.0),
        gradient_accumulation_steps=int(given.get("accumulate_grad_batches", 1)),
        logging_steps=int(given.get("log_every_n_steps", 50)), lr_scheduler_type="constant",
        disable_tqdm=not given.get("enable_progress_bar", True), compile="false", pad_to_buckets=False,
        save_in_background=False, save_total_limit=1,
        save_strategy="epoch" if given.get("enable_checkpointing", True) else "no")
    sanity = given.get("num_sanity_val_steps")
    return LightningOptions(config, callbacks, given.get("enable_checkpointing", True), root,
                            validates=given.get("limit_val_batches") != 0,
                            val_every_n_epochs=int(given.get("check_val_every_n_epoch") or 1),
                            sanity_batches=2 if sanity is None else int(sanity),
                            val_check_interval=given.get("val_check_interval") or 1.0)


__all__ = ["LightningOptions", "PRECISIONS", "lightning_options"]
