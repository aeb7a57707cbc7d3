"""Transformers' ``TrainingArguments.set_*`` helpers (``set_training``, ``set_evaluate``, ``set_testing``,
``set_save``, ``set_logging``, ``set_push_to_hub``, ``set_optimizer``, ``set_lr_scheduler``, ``set_dataloader``):
the signatures and defaults of Transformers 5.24, setting the same fields and returning ``self``. A value braeburn
cannot honour (one its Transformers field refuses, see ``UnsupportedFields``) is refused at the call, with the fix,
before any field changes; ``set_push_to_hub`` is refused whole (braeburn does not upload)."""

from __future__ import annotations

import copy
import warnings
from typing import Any

from ...plan.rules import OptionError
from ...trainer._argparse import ConfigError

_STRATEGIES = ("no", "steps", "epoch")
_SAVE_STRATEGIES = ("no", "steps", "epoch", "best")
_NAMED = ("optim", "lr_scheduler_type")  # Transformers' setters refuse a name they lack at the call (OptimizerNames)


def _strategy(setter: str, value: Any, choices: tuple[str, ...], steps: int) -> str:
    """As Transformers' IntervalStrategy(value) / SaveStrategy(value), and its 'steps requires steps' check (both
    ValueError, as there), each naming the call, the value and the fix."""
    strategy = str(getattr(value, "value", value))
    if strategy not in choices:
        raise ValueError(f"{setter}(strategy={strategy!r}): {strategy!r} is not a valid strategy; choose one of "
                         f"{', '.join(choices)}")
    if strategy == "steps" and steps == 0:
        raise ValueError(f"{setter}(strategy='steps', steps=0): setting `strategy` as 'steps' requires a positive "
                         "value for `steps`; pass steps=500 (or another positive number), or another strategy")
    return strategy


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)  # Transformers' str enums (OptimizerNames, SchedulerType) as their text


class TransformersSetters:
    """The ``set_*`` helpers of Transformers' TrainingArguments (module doc)."""

    def _set(self, setter: str, values: dict[str, Any]) -> Any:
        errors = self._setter_refusals(setter, values) + self._name_refusals(setter, values)
        if errors:
            raise ConfigError(errors)
        for name, value in values.items():
            setattr(self, name, value)
        return self

    def _name_refusals(self, setter: str, values: dict[str, Any]) -> list[OptionError]:
        """An optimizer or scheduler name braeburn has none for, refused at the call as Transformers' setter refuses
        a name it lacks (the field's own check, the one the Trainer makes, names the choices and the fix)."""
        asked = [name for name in _NAMED if name in values]
        if not asked:
            return []
        trial = copy.copy(self)
        for name in asked:
            setattr(trial, name, values[name])
        return [OptionError(error.option, error.value, f"(from {setter}) {error.message}")
                for error in trial.validate() if error.option in asked]

    def _setter_refusals(self, setter: str, values: dict[str, Any]) -> list[OptionError]:
        """The values braeburn cannot honour (the class that mixes this in knows which)."""
        raise NotImplementedError

    def _stored_report_to(self, value: Any) -> Any:
        """``report_to`` as the field stores it (the class that mixes this in knows how)."""
        raise NotImplementedError

    def set_training(self, learning_rate: float = 5e-5, batch_size: int = 8, weight_decay: float = 0,
                     num_epochs: float = 3, max_steps: int = -1, gradient_accumulation_steps: int = 1, seed: int = 42,
                     activation_checkpointing: bool = False, gradient_checkpointing: bool | None = None) -> Any:
        if gradient_checkpointing is not None:
            warnings.warn("`gradient_checkpointing` is deprecated and will be removed in v6. Use "
                          "`activation_checkpointing` instead.", FutureWarning, stacklevel=2)
            activation_checkpointing = gradient_checkpointing
        return self._set("set_training", dict(
            do_train=True, learning_rate=learning_rate, per_device_train_batch_size=batch_size,
            weight_decay=weight_decay, num_train_epochs=num_epochs, max_steps=max_steps,
            gradient_accumulation_steps=gradient_accumulation_steps, seed=seed,
            activation_checkpointing=activation_checkpointing, gradient_checkpointing=activation_checkpointing))

    def set_evaluate(self, strategy: Any = "no", steps: int = 500, batch_size: int = 8,
                     accumulation_steps: int | None = None, delay: float | None = None, loss_only: bool = False) -> Any:
        strategy = _strategy("set_evaluate", strategy, _STRATEGIES, steps)
        return self._set("set_evaluate", dict(
            eval_strategy=strategy, do_eval=strategy != "no", eval_steps=steps, per_device_eval_batch_size=batch_size,
            eval_accumulation_steps=accumulation_steps, eval_delay=delay, prediction_loss_only=loss_only))

    def set_testing(self, batch_size: int = 8, loss_only: bool = False) -> Any:
        return self._set("set_testing", dict(do_predict=True, per_device_eval_batch_size=batch_size,
                                             prediction_loss_only=loss_only))

    def set_save(self, strategy: Any = "steps", steps: int = 500, total_limit: int | None = None,
                 on_each_node: bool = False) -> Any:
        strategy = _strategy("set_save", strategy, _SAVE_STRATEGIES, steps)
        return self._set("set_save", dict(save_strategy=strategy, save_steps=steps, save_total_limit=total_limit,
                                          save_on_each_node=on_each_node))

    def set_logging(self, strategy: Any = "steps", steps: int = 500, report_to: str | list[str] = "none",
                    level: str = "passive", first_step: bool = False, nan_inf_filter: bool = False,
                    on_each_node: bool = False, replica_level: str = "passive") -> Any:
        """As Transformers', except that ``nan_inf_filter`` and ``on_each_node`` keep their fields at True (the
        setter's defaults, False, are not braeburn's: it logs on the main process only, and a NaN/inf loss is
        nan_policy's to stop or skip, never logged); ``report_to`` is stored as the field stores it."""
        return self._set("set_logging", dict(
            logging_strategy=_strategy("set_logging", strategy, _STRATEGIES, steps), logging_steps=steps,
            report_to=self._stored_report_to(report_to), log_level=level, logging_first_step=first_step,
            log_level_replica=replica_level))

    def set_push_to_hub(self, model_id: str, strategy: Any = "every_save", token: str | None = None,
                        private_repo: bool | None = None, always_push: bool = False,
                        revision: str | None = None) -> Any:
        return self._set("set_push_to_hub", dict(  # refused: braeburn does not upload
            push_to_hub=True, hub_model_id=model_id, hub_strategy=_plain(strategy), hub_token=token,
            hub_private_repo=private_repo, hub_always_push=always_push, hub_revision=revision))

    def set_optimizer(self, name: Any = "adamw_torch", learning_rate: float = 5e-5, weight_decay: float = 0,
                      beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, args: str | None = None) -> Any:
        return self._set("set_optimizer", dict(
            optim=_plain(name), learning_rate=learning_rate, weight_decay=weight_decay, adam_beta1=beta1,
            adam_beta2=beta2, adam_epsilon=epsilon, optim_args=args))

    def set_lr_scheduler(self, name: Any = "linear", num_epochs: float = 3.0, max_steps: int = -1,
                         warmup_steps: float = 0) -> Any:
        return self._set("set_lr_scheduler", dict(lr_scheduler_type=_plain(name), num_train_epochs=num_epochs,
                                                  max_steps=max_steps, warmup_steps=warmup_steps))

    def set_dataloader(self, train_batch_size: int = 8, eval_batch_size: int = 8, drop_last: bool = False,
                       num_workers: int = 0, pin_memory: bool = True, persistent_workers: bool = False,
                       prefetch_factor: int | None = None, multiprocessing_context: str | None = None,
                       in_order: bool = True, auto_find_batch_size: bool = False, ignore_data_skip: bool = False,
                       sampler_seed: int | None = None) -> Any:
        return self._set("set_dataloader", dict(
            per_device_train_batch_size=train_batch_size, per_device_eval_batch_size=eval_batch_size,
            dataloader_drop_last=drop_last, dataloader_num_workers=num_workers, dataloader_pin_memory=pin_memory,
            dataloader_persistent_workers=persistent_workers, dataloader_prefetch_factor=prefetch_factor,
            dataloader_multiprocessing_context=multiprocessing_context, dataloader_in_order=in_order,
            auto_find_batch_size=auto_find_batch_size, ignore_data_skip=ignore_data_skip, data_seed=sampler_seed))


__all__ = ["TransformersSetters"]
