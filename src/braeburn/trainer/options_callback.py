"""The config's options that act between steps, always on: ``logging_first_step``, ``logging_strategy="epoch"``,
``eval_on_start``, ``torch_empty_cache_steps``, ``load_best_model_at_end`` and the trackers of ``report_to``
beyond metrics.jsonl and TensorBoard (wandb, mlflow). Transformers' TrainingArguments options, done as there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .callbacks import Callback
from .checkpoint import CheckpointError
from .state import TrainerState

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer


class OptionsCallback(Callback):
    """The config's options that act between steps (see the module doc)."""

    def __init__(self) -> None:
        self.trackers: list[Any] = []
        self._acts_at_steps = True

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        config = trainer.config
        self._acts_at_steps = bool(config.logging_first_step or config.torch_empty_cache_steps)
        if trainer.is_main_process:
            self.trackers = _start_trackers(trainer)
        if config.eval_on_start and trainer.eval_dataset is not None and state.global_step == 0:
            trainer.evaluate()

    def idle_hooks(self) -> tuple[str, ...]:
        """Asked after on_train_begin: without logging_first_step and torch_empty_cache_steps, nothing at the steps."""
        return () if self._acts_at_steps else ("on_step_end",)

    def on_step_end(self, trainer: "Trainer", state: TrainerState) -> None:
        config = trainer.config
        if config.logging_first_step and state.global_step == 1 and config.logging_steps != 1:
            trainer.log_now()
        if config.torch_empty_cache_steps and state.global_step % config.torch_empty_cache_steps == 0:
            trainer.accelerator.plan.device.empty_cache()

    def on_epoch_end(self, trainer: "Trainer", state: TrainerState) -> None:
        if trainer.config.logging_strategy == "epoch" and trainer.has_unlogged_losses:
            trainer.log_now()

    def on_log(self, trainer: "Trainer", state: TrainerState, logs: dict[str, float]) -> None:
        for tracker in self.trackers:
            tracker.log(logs, step=state.global_step)

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        try:
            if trainer.config.load_best_model_at_end and state.best_checkpoint:
                try:
                    _load_best(trainer, Path(state.best_checkpoint))
                except CheckpointError as error:  # as Transformers: a run that trained to the end does not fail
                    trainer.accelerator.print(f"braeburn: warning: {error}")  # for it; the final weights are kept
        finally:
            for tracker in self.trackers:
                tracker.finish()
            self.trackers = []


def _start_trackers(trainer: "Trainer") -> list[Any]:
    """The trackers of report_to beyond metrics.jsonl and TensorBoard (which MetricsLogCallback writes)."""
    from ..accelerator import trackers as tracking

    names = tracking.resolve_log_with(trainer.config.report_to)
    names = [n for n in names if n not in ("jsonl", "tensorboard")]
    if not names:
        return []
    config = trainer.config
    run = config.run_name or Path(config.output_dir).name
    kwargs = {"wandb": {"name": run}, "mlflow": {"run_name": run}}
    started = tracking.start_trackers(names, config.project, config.output_dir, kwargs)
    for tracker in started:
        tracker.store_init_configuration(config.to_sanitized_dict())
    return started


def _load_best(trainer: "Trainer", folder: Path) -> None:
    from ..checkpoints import manifest as manifest_io
    from ..checkpoints import state as state_io

    acc = trainer.accelerator
    saver = getattr(trainer, "_saver", None)
    if saver is not None:
        saver.wait()  # the best checkpoint may be the last one, still being written in the background
    model = acc.unwrap_model(trainer._prepared_model)
    folder = trainer.checkpoints.best(str(folder))  # inside output_dir, present, checksums match; else an error
    if manifest_io.layout_of(folder) == manifest_io.SHARDED:
        acc.print(f"braeburn: warning: load_best_model_at_end: {folder} holds sharded (FSDP) weights; the model "
                  "keeps its final weights. Load the best one with --resume_from_checkpoint.")
        return
    model.load_state_dict(state_io.load_model_state(folder, 0, model.state_dict()))
    acc.print(f"braeburn: loaded the best model from {folder} ({trainer.config.metric_for_best_model} = "
              f"{trainer.state.best_metric:.6g})")


__all__ = ["OptionsCallback"]
