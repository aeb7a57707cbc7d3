"""The logging window of the Trainer: each step's loss stays on the device until a log reads the window's mean
(one host sync), which is also where a NaN or infinite loss is found; the logs go to log_history and the
callbacks. A mixin of :class:`braeburn.trainer.loop.Trainer`; it uses the Trainer's accelerator, state,
callbacks and config.
"""

from __future__ import annotations

import time
from collections import deque

import torch

from ..devices.base import MemoryReading
from ..plan.compile_policy import outputs_are_overwritten
from .checkpoint import SaveLog
from .summary import non_finite_message


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite and nan_policy is "stop"."""


class LogWindowMixin:
    """The losses since the last log, the log itself (:meth:`log_now`) and train()'s metrics."""

    epoch_before_training = False  # a log before train() (evaluate() first) carries no epoch; a peer's may

    def _reset_window(self) -> None:
        """Fresh counters for a train() call: the losses since the last log stay on the device until read."""
        self._window_losses: list[torch.Tensor] = []
        self._window_checked = torch.empty(0)  # the window's first losses, reduced and checked at a save
        self._losses_overwritten = outputs_are_overwritten(self.accelerator.compile_mode)
        self._window_first_step = self.state.global_step + 1
        self._window_has_grads = False
        self._window_start = (time.perf_counter(), self.state.samples_seen)
        self._grad_norm: torch.Tensor | None = None
        self._step_lr: float | None = None
        self._skipped = 0
        self._drift_warned = False  # the MPS driver-memory drift is warned once per train()
        self._memory_readings: deque[MemoryReading] = deque(maxlen=64)  # the drift rules read the last few
        self._loss_total = (0.0, 0)
        self._save_log = SaveLog()

    def _check_finite(self) -> None:
        """Stops the run at a NaN/inf loss when nan_policy="stop" (one sync). The window stays whole for the next
        log, which averages every step since the last log as Transformers does; only its unchecked losses are
        averaged over the processes (one all-reduce), and kept so, so that no loss is reduced twice."""
        unchecked = self._window_losses[len(self._window_checked):]
        if not unchecked:
            return
        losses = self.accelerator.reduce(torch.stack(unchecked).float(), "mean")
        bad = (~torch.isfinite(losses)).nonzero()
        if bad.numel():  # .numel() of a nonzero() result waits for the device
            index = len(self._window_checked) + int(bad[0])
            step = self._window_first_step + index // self.config.gradient_accumulation_steps
            raise NonFiniteLossError(non_finite_message(self, step, float(losses[int(bad[0])])))
        self._window_checked = torch.cat([self._window_checked.to(losses.device), losses])

    def _take_window_loss(self) -> float | None:
        """The mean loss since the last log (one sync), checked first; the window starts afresh."""
        if not self._window_losses:
            return None
        self._check_finite()
        losses = self._window_checked
        mean, window_total, window_count = self._window_mean(losses)  # sync
        total, count = self._loss_total
        self._loss_total = (total + window_total, count + window_count)
        self._window_losses, self._window_checked = [], torch.empty(0)
        self._window_first_step = self.state.global_step + 1
        return mean

    def _window_mean(self, losses: torch.Tensor) -> tuple[float, float, int]:
        """The window's mean loss, its total and what the total counts (one sync): here a mean over micro-batches.
        A hook: a peer that adds its losses one by one, and averages over optimizer steps, does so."""
        mean = float(losses.mean())
        return mean, mean * len(losses), len(losses)

    @property
    def has_unlogged_losses(self) -> bool:
        """Whether a step trained since the last log (so that :meth:`log_now` has a loss to log)."""
        return bool(self._window_losses)

    def log_now(self) -> None:
        """Log the window since the last log: its mean loss (one host sync), the learning rate, the gradient
        norm, samples/s and device memory. The loop calls it every logging_steps; the options that log at other
        moments (logging_first_step, logging_strategy="epoch", a callback's should_log) call it too."""
        state, now = self.state, time.perf_counter()
        logs: dict[str, float] = {"epoch": self._logged_epoch()}
        loss = self._take_window_loss()
        if loss is not None:
            logs["loss"] = loss
        rate = self._step_lr if self._step_lr is not None else self.lr_scheduler.get_last_lr()[0]
        logs["learning_rate"] = float(rate)
        if self._grad_norm is not None:
            logs["grad_norm"] = float(self._grad_norm)  # cheap: the loss read above already synced
        started, samples = self._window_start
        if now > started:
            logs["samples_per_second"] = (state.samples_seen - samples) / (now - started)
        memory = self.accelerator.memory_stats()
        logs["memory_bytes"] = float(memory.get("allocated_bytes", memory.get("peak_bytes", 0)))
        if "driver_bytes" in memory:  # MPS: the driver's share grows with each new shape (warned once, below)
            logs["driver_memory_bytes"] = float(memory["driver_bytes"])
            self._warn_memory_drift(memory)
        if self._skipped:
            logs["skipped_steps"] = float(self._skipped)
        self._window_start = (now, state.samples_seen)
        self._emit_log(logs, start_time=started)

    def _emit_log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Record ``logs`` (with the epoch) in log_history and send them to the callbacks' on_log. A hook: a peer's
        Trainer routes it to a subclass's own ``log``."""
        if self.state.max_steps or self.epoch_before_training:
            logs = {**logs, "epoch": self._logged_epoch()}
        self._record(dict(logs))

    def _logged_epoch(self) -> float:
        """The epoch a log carries: optimizer steps over steps per epoch, to 4 digits. A hook: a peer logs its own."""
        return round(self.state.epoch_progress, 4)

    def _warn_memory_drift(self, memory: dict[str, int]) -> None:
        self._memory_readings.append(MemoryReading(self.state.global_step, memory, len(self._shapes)))
        drift = None if self._drift_warned else self.accelerator.plan.device.memory_drift(self._memory_readings)
        if drift:
            self._drift_warned = True
            self.accelerator.print(f"braeburn: warning at step {self.state.global_step}: {drift}")

    def _record(self, logs: dict[str, float]) -> None:
        self.state.log_history.append({"step": self.state.global_step, **logs})
        self.callbacks.on_log(self, self.state, logs)

    def _keep_loss(self, loss: torch.Tensor) -> None:
        """The step's loss joins the window, on the device (no sync), and the window has gradients to step with.
        Under CUDA graphs (torch_compile_mode reduce-overhead or max-autotune) the loss lives in the graph's pool,
        which the next step overwrites, so a copy is kept."""
        loss = loss.detach()
        self._window_losses.append(loss.clone() if self._losses_overwritten else loss)
        self._window_has_grads = True

    def _mean_training_loss(self) -> float:
        try:
            self._take_window_loss()
        except NonFiniteLossError:
            return float("nan")
        total, count = self._loss_total
        return total / count if count else 0.0  # no step trained (a finished resume): 0.0, as Transformers

    def _train_metrics(self, seconds: float, steps_done: int, samples: int) -> dict[str, float]:
        """train()'s metrics, as Transformers names them, also kept in log_history."""
        metrics = {"train_runtime": round(seconds, 4),
                   "train_samples_per_second": round(samples / seconds, 3) if seconds > 0 else 0.0,
                   "train_steps_per_second": round(steps_done / seconds, 3) if seconds > 0 else 0.0,
                   "train_loss": self._mean_training_loss(), "epoch": self._logged_epoch()}
        self._record_train_metrics(metrics)
        return metrics

    def _record_train_metrics(self, metrics: dict[str, float]) -> None:
        """train()'s metrics into log_history (not a log: no callback's on_log sees them). A hook: a peer's
        Trainer that logs them instead overrides it."""
        self.state.log_history.append({"step": self.state.global_step, **metrics})
