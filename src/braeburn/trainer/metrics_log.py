"""The metrics log: one JSON object per line in ``output_dir/metrics.jsonl``, and TensorBoard when installed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .callbacks import Callback
from .state import TrainerState

if TYPE_CHECKING:
    from .loop import Trainer

METRICS_FILE = "metrics.jsonl"


def _json_value(value: Any) -> Any:
    # Strict JSON has no NaN or Infinity; keep them readable as strings.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsLogCallback(Callback):
    """Appends every log (training and evaluation) to metrics.jsonl; a resumed run appends to the same file."""

    def __init__(self, tensorboard: bool = True, tensorboard_dir: str | Path | None = None):
        self.tensorboard, self.tensorboard_dir = tensorboard, tensorboard_dir
        self._file: IO[str] | None = None
        self._writer = None
        self.path: Path | None = None

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        if not trainer.is_main_process:
            return
        self.path = Path(trainer.output_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        if self.tensorboard:
            self._writer = _tensorboard_writer(Path(self.tensorboard_dir or Path(trainer.output_dir) / "tensorboard"))

    def on_log(self, trainer: "Trainer", state: TrainerState, logs: dict[str, float]) -> None:
        if self._file is None:
            return
        record = {"step": state.global_step, **{key: _json_value(value) for key, value in logs.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._writer is not None:
            for key, value in logs.items():
                if isinstance(value, (int, float)) and key not in ("step", "epoch"):
                    self._writer.add_scalar(key, value, state.global_step)

    def write_record(self, record: dict[str, Any]) -> None:
        """One more line that is not a log (the run's compile and shape report): metrics.jsonl only."""
        if self._file is None:
            return
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


_said_no_tensorboard = False


def _tensorboard_writer(folder: Path):
    global _said_no_tensorboard
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        if not _said_no_tensorboard:
            _said_no_tensorboard = True
            print("braeburn: TensorBoard logging is off (the tensorboard package is not installed; "
                  "pip install tensorboard to turn it on). Metrics still go to metrics.jsonl.")
        return None
    return SummaryWriter(log_dir=str(folder))


def read_metrics(output_dir: str | Path) -> list[dict[str, Any]]:
    """The records of ``output_dir/metrics.jsonl``, in order."""
    path = Path(output_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
