"""TrainerState: where a run is, saved with every checkpoint as JSON (data only)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..checkpoints.no_follow import write_atomic

STATE_FILE = "trainer_state.json"


@dataclass
class TrainerState:
    """The run's position and history. Callbacks read it; they stop a run with ``should_stop``."""

    global_step: int = 0  # optimizer steps done
    epoch: float = 0.0  # epochs done, as a fraction, as in Transformers (1.5: half way through the second epoch)
    max_steps: int = 0  # optimizer steps the run will do in all
    steps_per_epoch: int = 0  # optimizer steps in one epoch
    num_epochs: int = 0  # epochs the loop will enter
    epochs_ended: int = 0  # epochs whose end (epoch scheduler step, on_epoch_end, evaluation) has run: not again on resume
    samples_seen: int = 0  # training samples consumed, on all processes together
    # What one step was made of, and the rate braeburn's optimizer was made with (0 / None: not known,
    # a checkpoint written before they were kept); a resume compares them with its own (resume.py).
    per_device_train_batch_size: int = 0
    num_processes: int = 0
    gradient_accumulation_steps: int = 0
    learning_rate: float | None = None
    train_samples: int = 0  # len(train_dataset) (0: not known): a resume on another number of samples says so
    total_flos: float = 0.0  # Transformers' count of the floating-point operations trained (its Trainer fills it)
    best_metric: float | None = None
    best_checkpoint: str | None = None
    last_checkpoint: str | None = None
    run_id: str | None = None  # the run that wrote a checkpoint: rotation deletes only this run's (a resume keeps it)
    log_history: list[dict[str, Any]] = field(default_factory=list)
    # Not saved: the cadences Transformers' TrainerState carries (set by train() from the config; its defaults).
    logging_steps: int = field(default=500, metadata={"transient": True})
    eval_steps: int = field(default=500, metadata={"transient": True})
    save_steps: int = field(default=500, metadata={"transient": True})
    # Not saved: requests from callbacks to the loop, and why.
    should_stop: bool = field(default=False, metadata={"transient": True})
    should_save: bool = field(default=False, metadata={"transient": True})
    should_log: bool = field(default=False, metadata={"transient": True})  # log after this step's on_step_end
    should_evaluate: bool = field(default=False, metadata={"transient": True})  # after the step's log, as should_log
    stop_reason: str = field(default="", metadata={"transient": True})

    @property
    def epoch_progress(self) -> float:
        """Epochs done as a fraction (1.5 = half way through the second epoch)."""
        return self.global_step / self.steps_per_epoch if self.steps_per_epoch else 0.0

    @property
    def num_train_epochs(self) -> int:
        """Transformers' name of num_epochs."""
        return self.num_epochs

    @property
    def train_batch_size(self) -> int:
        """Transformers' name of per_device_train_batch_size."""
        return self.per_device_train_batch_size

    @property
    def best_model_checkpoint(self) -> str | None:
        """Transformers' name of best_checkpoint."""
        return self.best_checkpoint

    def request_stop(self, reason: str, save: bool = False) -> None:
        self.should_stop, self.stop_reason = True, reason
        self.should_save = self.should_save or save

    def to_dict(self) -> dict[str, Any]:
        """braeburn's fields, and Transformers' names of those a Transformers user's tools read from
        ``trainer_state.json`` (``best_model_checkpoint``, ``num_train_epochs``, ``train_batch_size``; not read back)."""
        data = asdict(self)
        own = {f.name: data[f.name] for f in fields(self) if not f.metadata.get("transient")}
        return {**own, "best_model_checkpoint": self.best_checkpoint, "num_train_epochs": self.num_epochs,
                "train_batch_size": self.per_device_train_batch_size}

    def save(self, folder: Path) -> Path:
        path = Path(folder) / STATE_FILE
        write_atomic(path, json.dumps(self.to_dict(), indent=1, allow_nan=True))  # (replaces a link, never follows)
        return path

    @classmethod
    def load(cls, folder: Path) -> "TrainerState":
        """Read ``trainer_state.json``; :class:`TrainerStateError` names the first value of a wrong type."""
        path = Path(folder) / STATE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise TrainerStateError(f"{path} cannot be read ({type(error).__name__}: {error})") from None
        if not isinstance(data, dict):
            raise TrainerStateError(f"{path} holds a JSON {type(data).__name__}, not an object of named values")
        known = {f.name for f in fields(cls) if not f.metadata.get("transient")}
        values = {key: value for key, value in data.items() if key in known}
        for key, value in values.items():
            problem = _type_problem(key, value)
            if problem:
                raise TrainerStateError(f"{path} gives {key}={_excerpt(value)}, {problem}")
        return cls(**values)


class TrainerStateError(ValueError):
    """``trainer_state.json`` is unreadable or holds a value of the wrong type."""


_COUNTS = ("global_step", "max_steps", "steps_per_epoch", "num_epochs", "samples_seen",
           "per_device_train_batch_size", "num_processes", "gradient_accumulation_steps", "train_samples")
_PATHS = ("best_checkpoint", "last_checkpoint", "run_id")  # strings or null


def _type_problem(key: str, value: Any) -> str | None:
    if key in _COUNTS:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else "but it must be a whole number >= 0"
    if key == "epoch":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
        return None if ok else "but it must be a number >= 0"
    if key in ("best_metric", "learning_rate"):
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        return None if ok else "but it must be a number or null"
    if key in _PATHS:
        return None if value is None or isinstance(value, str) else "but it must be a path (a string) or null"
    if key == "log_history":
        ok = isinstance(value, list) and all(isinstance(entry, dict) for entry in value)
        return None if ok else "but it must be a list of objects"
    return None


def _excerpt(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
