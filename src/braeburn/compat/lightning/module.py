"""What braeburn reads from a LightningModule, duck-typed (Lightning is never imported).

- :func:`split_optimizers`: ``configure_optimizers()``'s return, in any of Lightning's shapes, as
  (optimizer, scheduler or Lightning scheduler dict or None).
- :func:`step_loss`: ``training_step``'s return (a tensor, or a dict with "loss") as the loss tensor.
- :func:`unsupported_hooks`: the hooks a module or callback defines that braeburn would never call.
- :class:`StepLogger`: what ``self.log`` / ``self.log_dict`` record, reduced as Lightning reduces them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

# The hooks braeburn calls, on the module and on each callback, at Lightning's moments.
HOOKS = ("on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_train_epoch_start",
         "on_train_epoch_end", "on_validation_start", "on_validation_end", "on_validation_epoch_start",
         "on_validation_epoch_end")
# Methods that change how a step is done: a module that defines them would train differently here.
_STEP_OVERRIDES = ("optimizer_step", "optimizer_zero_grad", "backward", "lr_scheduler_step",
                   "configure_gradient_clipping", "configure_model", "configure_sharded_model")
_LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning")


def unsupported_hooks(obj: Any) -> list[str]:
    """The on_* hooks and step overrides that ``obj``'s own classes define (Lightning's no-op bases excluded)."""
    found = []
    for name in dir(type(obj)):
        if not (name.startswith("on_") or name in _STEP_OVERRIDES) or name in HOOKS:
            continue
        owner = next((k for k in type(obj).__mro__ if name in vars(k)), None)
        if owner is None or owner.__module__.split(".")[0] in _LIGHTNING_PACKAGES + ("torch", "builtins"):
            continue
        found.append(f"{type(obj).__name__}.{name}")
    return found


def split_optimizers(returned: Any) -> tuple[torch.optim.Optimizer, Any]:
    """(optimizer, scheduler or scheduler dict or None) from configure_optimizers(); more than one optimizer raises."""
    if isinstance(returned, torch.optim.Optimizer):
        return returned, None
    if isinstance(returned, Mapping):
        if "optimizer" not in returned:
            raise ValueError(f"configure_optimizers() returned a dict with keys {sorted(returned)}: it needs "
                             "'optimizer' (and optionally 'lr_scheduler'), as in Lightning")
        return returned["optimizer"], returned.get("lr_scheduler")
    if isinstance(returned, tuple) and len(returned) == 2 and isinstance(returned[0], Sequence):
        optimizers, schedulers = _one(returned[0], "optimizers"), list(returned[1])
        return optimizers, _one(schedulers, "schedulers") if schedulers else None
    if isinstance(returned, Sequence) and not isinstance(returned, str):
        if returned and isinstance(returned[0], Mapping):
            return split_optimizers(_one(returned, "optimizer dicts"))
        return _one(returned, "optimizers"), None
    raise ValueError(f"configure_optimizers() returned {type(returned).__name__}, which is not one of Lightning's "
                     "shapes: return an optimizer, [optimizer], ([optimizer], [scheduler]) or "
                     "{'optimizer': ..., 'lr_scheduler': ...}")


def _one(items: Sequence[Any], what: str) -> Any:
    if len(items) != 1:
        raise ValueError(f"configure_optimizers() returned {len(items)} {what}: braeburn.lightning trains with one "
                         "optimizer and at most one scheduler (Lightning's automatic optimization with several "
                         "optimizers is gone since Lightning 2.0 too); return one, or port the loop to "
                         "braeburn's Accelerator")
    return items[0]


def step_loss(returned: Any, hook: str) -> torch.Tensor | None:
    """The loss of a training/validation step's return: the tensor, or the dict's "loss" (None when there is none)."""
    if returned is None or isinstance(returned, torch.Tensor):
        return returned
    if isinstance(returned, Mapping):
        if hook == "training_step" and "loss" not in returned:
            raise ValueError(f"training_step returned a dict with keys {sorted(returned)}: Lightning's automatic "
                             "optimization needs its 'loss'; return {'loss': loss, ...} or the loss tensor")
        return returned.get("loss")
    raise ValueError(f"{hook} returned {type(returned).__name__}: return the loss tensor or a dict with 'loss'")


def batch_size_of(batch: Any) -> int:
    """The batch size Lightning infers for ``self.log`` without ``batch_size=``: the first dimension of the first
    tensor found in the batch (a 0-d tensor counts 1), as its ``extract_batch_size``; 1 when there is none."""
    if isinstance(batch, torch.Tensor):
        return 1 if batch.ndim == 0 else int(batch.size(0))
    if isinstance(batch, (str, bytes)):
        return 1
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, Sequence) else ()
    for item in items:
        if isinstance(item, (torch.Tensor, Mapping)) or (isinstance(item, Sequence) and not isinstance(item, str)):
            return batch_size_of(item)
    return 1


# The public names of Lightning's Logger classes (CSVLogger, TensorBoardLogger: pytorch-lightning 2.6).
LOGGER_NAMES = frozenset(("after_save_checkpoint", "experiment", "finalize", "group_separator", "log_dir",
                          "log_graph", "log_hyperparams", "log_metrics", "name", "root_dir", "save", "save_dir",
                          "version", "sub_dir"))


class StepLogger:
    """self.log's values, reduced as Lightning reduces them. Training: the last step's value of each name (on_step),
    and the epoch's mean (on_epoch); validation and ``on_train_epoch_end``: the epoch mean. Means are weighted by the
    batch size (``batch_size=``, else the size Lightning infers from the batch). A name logged both on_step and
    on_epoch is recorded as ``<name>_step`` and ``<name>_epoch`` (and ``<name>`` in callback_metrics), as in
    Lightning."""

    def __init__(self, reduce_mean: Any = None) -> None:
        self.training = True
        self.epoch_end = False  # in on_train_epoch_end: values go to the epoch, as Lightning's defaults there
        self.batch_size = 1  # the current batch's, set by the loop before each step
        self.reduce_mean = reduce_mean  # sync_dist=True: averaged over the processes
        self.step_values: dict[str, torch.Tensor] = {}
        self.epoch_sums: dict[str, tuple[torch.Tensor, float]] = {}
        self._metrics: dict[str, float] = {}
        self._plain_names: dict[str, str] = {}  # <name>_step / <name>_epoch -> <name>
        self.not_logged: set[str] = set()  # self.log(..., logger=False): in callback_metrics, not logged_metrics
        self.validation_steps: dict[str, torch.Tensor] = {}  # <name>_step of a validation: logged_metrics only
        self._new_steps = False  # step values logged since callback_metrics last took them

    def __getattr__(self, name: str) -> Any:
        if name in LOGGER_NAMES:  # what a Lightning Logger (CSVLogger, TensorBoardLogger) has
            from .checks import not_here

            raise not_here(f"trainer.logger.{name}", "is an attribute of Lightning's logger (braeburn's "
                           "trainer.logger records self.log only; trainer.log_dir is the run's folder, where "
                           "metrics.jsonl holds every logged value)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def callback_metrics(self) -> dict[str, float]:
        """The latest value of each name: step values as soon as they are logged (a read of the device then), as
        Lightning's callback_metrics holds them from the first step."""
        self._remember_new_steps()
        return self._metrics

    def _remember_new_steps(self) -> None:
        """The step values logged since the last look, in the latest values (once: an epoch mean taken after them
        stays the latest, as Lightning's)."""
        if self._new_steps:
            self._remember({name: float(value) for name, value in self.step_values.items()})
            self._new_steps = False

    def log(self, name: str, value: Any, prog_bar: bool = False, logger: bool | None = None,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean",
            sync_dist: bool = False, batch_size: int | None = None, **_ignored: Any) -> None:
        if reduce_fx not in ("mean", torch.mean):
            raise ValueError(f"self.log({name!r}, reduce_fx={reduce_fx!r}): braeburn.lightning reduces by the mean "
                             "only; log the value you want and leave reduce_fx out")
        value = torch.as_tensor(value).detach().float()
        if sync_dist and self.reduce_mean is not None:
            value = self.reduce_mean(value)
        stepping = self.training and not self.epoch_end
        on_step = stepping if on_step is None else on_step
        on_epoch = (not stepping) if on_epoch is None else on_epoch
        forked = on_step and on_epoch and (stepping or not self.training)  # (validation: on_step given True)
        (self.not_logged.add if logger is False else self.not_logged.discard)(name)
        if forked and not self.training:  # a validation's value of each batch goes to the logger alone
            self.validation_steps[self._name(name, "_step")] = value
        if on_step and stepping:
            self.step_values[self._name(name, "_step" if forked else "")] = value
            self._new_steps = True
        if on_epoch or not stepping:
            epoch_name = self._name(name, "_epoch" if forked else "")
            total, count = self.epoch_sums.get(epoch_name, (torch.zeros((), device=value.device), 0.0))
            weight = float(batch_size or self.batch_size or 1)
            self.epoch_sums[epoch_name] = (total + value.mean() * weight, count + weight)

    def reset(self) -> None:
        """Nothing logged yet (Lightning's validate() starts its metrics afresh)."""
        self._metrics, self.validation_steps, self.epoch_sums, self.step_values = {}, {}, {}, {}
        self._new_steps = False

    @property
    def forked_names(self) -> set[str]:
        """The plain names logged as ``<name>_step`` and ``<name>_epoch``."""
        return set(self._plain_names.values())

    def _name(self, name: str, suffix: str) -> str:
        if suffix:
            self._plain_names[name + suffix] = name
        return name + suffix

    def _remember(self, values: dict[str, float]) -> None:
        for name, value in values.items():
            self._metrics[name] = value
            if name in self._plain_names:
                self._metrics[self._plain_names[name]] = value

    def log_dict(self, values: Mapping[str, Any], **options: Any) -> None:
        for name, value in values.items():
            self.log(name, value, **options)

    def take_step_values(self) -> dict[str, float]:
        """The last logged step values (a read: waits for the device), cleared."""
        values = {name: float(value) for name, value in self.step_values.items()}
        self._remember(values)
        self.step_values, self._new_steps = {}, False
        return values

    @contextlib.contextmanager
    def forgotten(self) -> Iterator[None]:
        """What is logged inside is forgotten after it (Lightning's sanity check: its metrics are reset)."""
        metrics, sums, steps, new = dict(self._metrics), self.epoch_sums, self.step_values, self._new_steps
        self.epoch_sums, self.step_values = {}, {}
        try:
            yield
        finally:
            self._metrics, self.epoch_sums, self.step_values, self._new_steps = metrics, sums, steps, new

    def take_epoch_means(self) -> dict[str, float]:
        """Each name's mean over the epoch's logs (a read), cleared."""
        self._remember_new_steps()
        means = {name: float(total) / count for name, (total, count) in self.epoch_sums.items()}
        self._remember(means)
        self.epoch_sums = {}
        return means


__all__ = ["HOOKS", "StepLogger", "batch_size_of", "split_optimizers", "step_loss", "unsupported_hooks"]
