"""What the Transformers Trainer logs, on braeburn's Trainer: the same keys in the same order, at the same moments.

- A training log is ``{"loss", "grad_norm", "learning_rate", "epoch"}``; braeburn's own values (samples/s, device
  memory) go to braeburn's callbacks (the progress line, metrics.jsonl, TensorBoard), not to ``log_history`` nor to a
  Transformers callback's ``on_log``.
- ``epoch`` is the fractional epoch unrounded (``state.epoch``), as Transformers' ``log()`` adds it.
- ``grad_norm`` is logged with ``max_grad_norm=0`` too (measured, not clipped).
- train() ends with ``log()`` of its summary (``train_runtime`` ... ``total_flos``, ``train_loss``), which callbacks
  see in ``on_log`` before ``on_train_end``; ``TrainOutput.metrics`` holds that summary only (without total_flos).
- The loop's flow is Transformers' DefaultFlowCallback's: the last step evaluates and saves with the ``steps``
  strategies, an epoch stopped part way through still ends (``on_epoch_end``), and the end of training saves only
  where Transformers would.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

BRAEBURN_ONLY = ("samples_per_second", "memory_bytes", "driver_memory_bytes", "skipped_steps")
TRAIN_ORDER = ("loss", "grad_norm", "learning_rate")
SUMMARY_ORDER = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss")


TENSORBOARD_ARGS_NOTE = (
    "braeburn: report_to={0}: TensorBoard's \"args\" text holds braeburn's TrainingArguments as JSON (its own fields "
    "and values, where Transformers writes its TrainingArguments'); the folder, tags, steps, values and "
    "\"model_config\" text are Transformers'")


TENSORBOARD_BEFORE_TRAIN_NOTE = (
    "braeburn: report_to=tensorboard: a log before train() (evaluate() first) goes to TensorBoard when train() "
    "begins, into the run's folder output_dir/runs/<date>_<host> with the training; Transformers' TensorBoardCallback "
    "writes it at once, and the training after it, into runs/<date>_<host> of the current directory, outside "
    "output_dir (set TENSORBOARD_LOGGING_DIR to choose one folder for both)")


def tensorboard_run_folder() -> str:
    """runs/<Mon DD_HH-MM-SS>_<host>: Transformers' (and torch's SummaryWriter's) default folder name."""
    import socket
    from datetime import datetime

    return os.path.join("runs", datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname())


def tensorboard_tags(logs: dict[str, Any]) -> dict[str, float | str]:
    """A log's numbers (and texts) tagged as Transformers' TensorBoardCallback tags them: eval_x as eval/x, test_x as
    test/x, the rest train/x (epoch included); braeburn's own values (samples/s, memory) stay in metrics.jsonl."""
    tags = {}
    for key, value in logs.items():
        if key in BRAEBURN_ONLY or key == "step" or not isinstance(value, (int, float, str)):
            continue
        for prefix in ("eval", "test"):
            if key.startswith(prefix + "_"):
                tags[f"{prefix}/{key[len(prefix) + 1:]}"] = value
                break
        else:
            tags[f"train/{key}"] = value
    return tags


def refuse_an_all_beyond_braeburn(report_to: list[str] | str | None) -> None:
    """``report_to="all"`` as Transformers means it: every integration installed here (the installed Transformers' own
    list). Where one is a tracker braeburn does not have (codecarbon, comet_ml, clearml, neptune ...), braeburn's
    "all" would report to fewer, a run that silently differs: a ValueError names them and the way out."""
    import importlib.util

    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "all" not in names or importlib.util.find_spec("transformers") is None:
        return
    from transformers.integrations import get_available_reporting_integrations

    from ...accelerator.trackers import available_trackers, beyond_braeburn, why_lacking

    lacking = beyond_braeburn(get_available_reporting_integrations())
    if lacking:
        ours = " ".join(name for name in available_trackers() if name != "jsonl") or "none"
        raise ValueError(f"report_to='all': Transformers' 'all' reports to every integration installed here, "
                         f"{', '.join(lacking)} among them, which braeburn {why_lacking(lacking)}; name the trackers "
                         f"braeburn should report to instead (--report_to {ours}), and add a TrainerCallback of yours "
                         f"for {', '.join(lacking)}")


class HfLogsMixin:
    """The log hooks of braeburn's loop (log_window.py, loop.py), as Transformers' Trainer logs."""

    ends_epoch_at_stop = True
    epoch_before_training = True  # evaluate() before train() logs epoch 0, as Transformers' log() adds state.epoch
    flow_at_max_steps = True
    grad_norm_unclipped = True
    _flos_parameters: int | None = None

    def _order_callbacks(self, builtins: list[Any], users: list[Any]) -> list[Any]:
        """The options' actions (logging_first_step, logging_strategy="epoch", eval_on_start: OptionsCallback) after
        the user's hooks, as Transformers' DefaultFlowCallback only asks for them and its loop acts after the hooks."""
        from ...trainer.options_callback import OptionsCallback

        options = [c for c in builtins if isinstance(c, OptionsCallback)]
        return [c for c in builtins if c not in options] + users + options

    def _make_metrics_log(self) -> Any:
        """metrics.jsonl as braeburn writes it; TensorBoard as Transformers' TensorBoardCallback writes it: into
        output_dir/runs/<date>_<host> (or logging_dir, or TENSORBOARD_LOGGING_DIR), tagged train/loss, eval/loss..."""
        from ...trainer.metrics_log import MetricsLogCallback

        log = super()._make_metrics_log()
        if log.tensorboard:
            folder = os.getenv("TENSORBOARD_LOGGING_DIR") or self.config.logging_dir
            log = MetricsLogCallback(tensorboard=True, tensorboard_dir=folder and os.path.expanduser(folder),
                                     tensorboard_view=tensorboard_tags, default_dir=tensorboard_run_folder(),
                                     tensorboard_start=self._tensorboard_texts, name_default_dir=tensorboard_run_folder,
                                     before_training_note=TENSORBOARD_BEFORE_TRAIN_NOTE)
        return log

    def _tensorboard_texts(self, trainer: Any) -> dict[str, str]:
        """The texts Transformers' TensorBoardCallback writes when training begins: ``args`` (here braeburn's
        TrainingArguments, which one line says) and the model's ``model_config``."""
        texts = {"args": self.config.to_json_string()}
        config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
        if callable(getattr(config, "to_json_string", None)):
            texts["model_config"] = config.to_json_string()
        if self.accelerator.is_main_process:
            print(TENSORBOARD_ARGS_NOTE.format(",".join(self.config.report_to or [])), flush=True)
        return texts

    def _logged_epoch(self) -> float:
        return self.state.epoch

    def _emit_log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self._braeburn_extras = {key: logs.pop(key) for key in BRAEBURN_ONLY if key in logs}
        logs.pop("epoch", None)  # log() adds it last, as Transformers'
        ordered = {key: logs[key] for key in TRAIN_ORDER if key in logs}
        ordered.update((key, value) for key, value in logs.items() if key not in ordered)
        super()._emit_log(ordered, start_time)

    def _window_mean(self, losses: Any) -> tuple[float, float, int]:
        """As Transformers adds them: one float32 sum of the micro-batches' shares (each loss divided by its window's
        length, ``_keep_loss``), read once and divided in double precision by the optimizer steps since the last
        log, so a short last accumulation window weighs as a whole step (train_loss too)."""
        total = losses.new_zeros(())
        for loss in losses:
            total = total + loss
        window_total = float(total)  # sync
        steps = max(self.state.global_step - self._window_first_step + 1, 1)
        return window_total / steps, window_total, steps

    def _record(self, logs: dict[str, float]) -> None:
        extras, self._braeburn_extras = getattr(self, "_braeburn_extras", {}), {}
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.callbacks.on_log(self, self.state, {**logs, **extras}, peer_logs=logs)

    def _eval_metrics_in_train_output(self) -> dict[str, float]:
        return {}  # Transformers' TrainOutput.metrics is train()'s summary alone

    def _record_train_metrics(self, metrics: dict[str, float]) -> None:
        """The summary in Transformers' order, with total_flos, logged as its train() logs it (on_log too)."""
        logged = {**metrics, "total_flos": float(self.state.total_flos)}
        ordered = {key: logged[key] for key in SUMMARY_ORDER if key in logged}
        ordered.update((key, value) for key, value in logged.items() if key not in ordered)
        self._emit_log(ordered)  # TrainOutput.metrics has no total_flos: Transformers' printer pops it from there

    def floating_point_ops(self, inputs: Any) -> int:
        """Transformers' count for one batch: 6 x the main input's tokens x the parameters outside the embeddings,
        for a model with ``num_parameters`` (a Transformers model); else 0."""
        if isinstance(inputs, (tuple, list)) or not isinstance(inputs, Mapping):  # a TensorDataset's: nothing to count
            return 0
        model = self.accelerator.unwrap_model(self.model)
        main_input = getattr(model, "main_input_name", "input_ids")
        if main_input in inputs and hasattr(model, "num_parameters"):
            if self._flos_parameters is None:  # counted once: the parameters do not change during training
                self._flos_parameters = model.num_parameters(exclude_embeddings=True)
            return 6 * inputs[main_input].numel() * self._flos_parameters
        return 0

    def _micro_batch(self, model: Any, batch: Any) -> None:
        # a tuple or list batch counts 0 (floating_point_ops): not asked, unless a subclass (or a function set on the
        # instance, which Transformers' loop calls too) counts its own
        kind, counts = type(batch), type(self).floating_point_ops
        if (kind is not tuple and kind is not list or counts is not HfLogsMixin.floating_point_ops
                or "floating_point_ops" in self.__dict__):
            self.state.total_flos += float(self.floating_point_ops(batch))
        super()._micro_batch(model, batch)

    def _save_at_stop(self) -> None:
        """Transformers saves at the end only for a save it asked for (a signal here) or save_strategy="steps" at
        max_steps (saved already, at that step); an early stop saves nothing more."""
        state = self.state
        if state.should_save or (self.config.save_strategy == "steps" and state.global_step >= state.max_steps):
            super()._save_at_stop()


__all__ = ["BRAEBURN_ONLY", "HfLogsMixin", "refuse_an_all_beyond_braeburn"]
