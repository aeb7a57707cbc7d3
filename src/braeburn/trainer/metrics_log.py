"""The metrics log: one JSON object per line in ``output_dir/metrics.jsonl``, and TensorBoard when installed."""

from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..checkpoints.no_follow import PlantedLinkError, open_append, open_update
from .callbacks import Callback
from .state import TrainerState
from .write_faults import WriteWarnings

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer

METRICS_FILE = "metrics.jsonl"


def _json_value(value: Any) -> Any:
    # Strict JSON has no NaN or Infinity; keep them readable as strings.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsLogCallback(Callback):
    """Appends every log (training and evaluation) to metrics.jsonl; a resumed run appends to the same file.

    A write that fails (a full disk) warns once and never ends the run: the records not written are kept
    and written, in order, by the next log that succeeds; a line cut short by the failed write is
    removed first. TensorBoard stops at its first failed write (its writer thread cannot go on).
    """

    MAX_PENDING = 100_000  # records kept while the disk is full (about 200 bytes each)

    def __init__(self, tensorboard: bool = True, tensorboard_dir: str | Path | None = None,
                 tensorboard_view: Any = None, default_dir: str = "tensorboard", tensorboard_start: Any = None,
                 name_default_dir: Any = None, before_training_note: str | None = None):
        """``tensorboard_view(logs) -> {tag: value}``: what a log becomes in TensorBoard (default: each number but
        step and epoch, tagged by its key; a text value is written as text); ``default_dir``: the folder inside
        output_dir without a tensorboard_dir, or ``name_default_dir()``'s name, taken at the first train() (a name of
        that moment's time); ``tensorboard_start(trainer) -> {tag: text}``: texts written when the writer starts;
        ``before_training_note``: given, a log before train() (an evaluate() first) is held and written into
        TensorBoard when train() begins, and this line is printed. A peer's Trainer writes its own tags, texts and folder."""
        self.tensorboard, self.tensorboard_dir = tensorboard, tensorboard_dir
        self.tensorboard_view, self.default_dir = tensorboard_view or _scalars, default_dir
        self.tensorboard_start, self.name_default_dir = tensorboard_start, name_default_dir
        self.before_training_note = before_training_note  # given: logs before train() are held for TensorBoard
        self._held: list[tuple[int, dict[str, float]]] = []
        self._training = False  # between on_train_begin and on_train_end (outside: each log is flushed at once)
        self._file: IO[str] | None = None
        self._writer = None
        self._writer_folder: Path | None = None  # where this run's TensorBoard events go (None: off or not started)
        self.path: Path | None = None
        self._pending: list[str] = []
        self._good_size = 0  # bytes of whole records in the file
        self._warnings = WriteWarnings()

    def on_train_begin(self, trainer: "Trainer", state: TrainerState) -> None:
        if not trainer.is_main_process:
            return
        self.path = Path(trainer.output_dir) / METRICS_FILE
        self._pending, self._good_size = [], 0
        try:
            _drop_torn_last_line(self.path)  # (this process holds output_dir's lock: the only writer)
        except OSError as error:
            self._warnings.failed(self.path, error, "a torn last line could not be dropped")
        self._reopen(repair=False)
        self._training = True
        if self.tensorboard:
            self._start_tensorboard(trainer)
        held, self._held = self._held, []
        for step, logs in held if self._writer is not None else ():  # logs from before train() (evaluate() first)
            self._tensorboard_scalars(step, logs)

    def _start_tensorboard(self, trainer: "Trainer") -> None:
        if self.name_default_dir is not None:  # named once, as the peer keeps its folder for later runs
            self.default_dir, self.name_default_dir = self.name_default_dir(), None
        folder = Path(self.tensorboard_dir or Path(trainer.output_dir) / self.default_dir)
        try:
            if self.tensorboard_dir is None:  # the run's folders: through a link, events would go elsewhere
                inside = Path(self.default_dir)
                for part in (inside, *inside.parents[:-1]):  # runs/<date>_<host>, then runs ("." left out)
                    if (Path(trainer.output_dir) / part).is_symlink():
                        raise PlantedLinkError(Path(trainer.output_dir) / part)
            self._writer = _tensorboard_writer(folder)
            self._writer_folder = folder if self._writer is not None else None
            self._write_start_texts(trainer)
        except OSError as error:
            self._writer_folder = None
            self._warnings.failed(folder, error, "TensorBoard logging is off for this run")

    def _write_start_texts(self, trainer: "Trainer") -> None:
        if self._writer is not None and self.tensorboard_start is not None:
            for tag, text in self.tensorboard_start(trainer).items():
                self._writer.add_text(tag, text)

    def on_log(self, trainer: "Trainer", state: TrainerState, logs: dict[str, float]) -> None:
        if self.path is None:  # a log before train() (evaluate() first): TensorBoard only, where the peer writes it
            self._log_before_training(trainer, state, logs)
            return
        record = {"step": state.global_step, **{key: _json_value(value) for key, value in logs.items()}}
        self._append(json.dumps(record))
        after_training = not self._training
        if after_training and self._writer is None and self._writer_folder is not None:  # trainer.log() or evaluate()
            self._writer = _tensorboard_writer(self._writer_folder)  # after train(): a new event file in the run's
        if self._writer is not None:  # folder, as Transformers' TensorBoardCallback opens one
            self._tensorboard_scalars(state.global_step, logs)
        if after_training and self._writer is not None:
            self._flush_writer()

    def _append(self, line: str) -> None:
        self._pending = (self._pending + [line + "\n"])[-self.MAX_PENDING:]
        self._write_pending()

    def _write_pending(self) -> None:
        if self._file is None and not self._reopen(repair=True):
            return
        try:
            self._file.write("".join(self._pending))
            self._file.flush()
        except OSError as error:
            self._warnings.failed(self.path, error, "its records are kept and written once the disk has room "
                                  "(they are also in trainer.state.log_history and each checkpoint)")
            self._close_quietly()
            return
        self._good_size = os.fstat(self._file.fileno()).st_size
        self._pending = []

    def _reopen(self, repair: bool) -> bool:
        """Open the log for appending; after a failed write, first cut off the partial line it left."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open_append(self.path)  # (a link planted at its name is refused, not followed)
            if repair and os.fstat(self._file.fileno()).st_size > self._good_size:
                os.ftruncate(self._file.fileno(), self._good_size)
            self._good_size = os.fstat(self._file.fileno()).st_size
            return True
        except OSError as error:
            self._warnings.failed(self.path, error, "its records are kept and written once the disk has room "
                                  "(they are also in trainer.state.log_history and each checkpoint)")
            self._file = None
            return False

    def _close_quietly(self) -> None:
        file, self._file = self._file, None
        try:
            file.close()  # flushes what is buffered once more; the partial line is cut on reopening
        except OSError:
            pass

    def _tensorboard_scalars(self, step: int, logs: dict[str, float]) -> None:
        try:
            for tag, value in self.tensorboard_view(logs).items():
                if isinstance(value, str):
                    self._writer.add_text(tag, value, step)
                else:
                    self._writer.add_scalar(tag, value, step)
        except OSError as error:
            self._warnings.failed(Path(self._writer.log_dir), error, "TensorBoard logging stops here "
                                  "(metrics.jsonl goes on)")
            writer, self._writer, self._writer_folder = self._writer, None, None
            _close_quietly(writer)

    def _log_before_training(self, trainer: "Trainer", state: TrainerState, logs: dict[str, float]) -> None:
        """Transformers' TensorBoardCallback writes an evaluate() before train() (and then the training, in the same
        writer); with ``before_training_note`` braeburn holds such logs and writes them first when train() begins,
        in the writer it opens in its run's folder (output_dir is checked then), and says so once."""
        if self.before_training_note is None or not self.tensorboard or not trainer.is_main_process:
            return
        if not self._held:
            print(self.before_training_note, flush=True)
        self._held.append((state.global_step, dict(logs)))

    def _flush_writer(self) -> None:
        """Outside training nothing else flushes the writer (train()'s end closes it): each log is on disk at once."""
        try:
            self._writer.flush()
        except OSError as error:
            self._warnings.failed(Path(self._writer.log_dir), error, "TensorBoard logging stops here "
                                  "(metrics.jsonl goes on)")
            writer, self._writer, self._writer_folder = self._writer, None, None
            _close_quietly(writer)

    def write_record(self, record: dict[str, Any]) -> None:
        """One more line that is not a log (the run's compile and shape report): metrics.jsonl only."""
        if self.path is not None:
            self._append(json.dumps(record, default=str))

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        self._training = False
        if self._pending and self.path is not None:  # a last try for the records the full disk held back
            self._write_pending()
        if self._file is not None:
            self._close_quietly()
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except OSError as error:
                self._warnings.failed(Path(writer.log_dir), error, "the last TensorBoard values may be missing")


def _scalars(logs: dict[str, Any]) -> dict[str, float]:
    return {key: value for key, value in logs.items()
            if isinstance(value, (int, float)) and key not in ("step", "epoch")}


def _close_quietly(writer) -> None:
    try:
        writer.close()
    except OSError:
        pass


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
    # An event file's name is the time, host and pid: a random end makes it one that no link planted before can have.
    return SummaryWriter(log_dir=str(folder), filename_suffix=f".{secrets.token_hex(4)}")


def _drop_torn_last_line(path: Path) -> None:
    """A run killed inside a write can leave half a record; the next append would glue onto it."""
    if not (path.is_file() or path.is_symlink()):
        return
    with open_update(path) as handle:  # (a link planted at its name is refused, not followed)
        data = handle.read()
        if not data or data.endswith(b"\n"):
            return
        handle.truncate(data.rfind(b"\n") + 1)
    print(f"braeburn: {path} ended in half a record (a run was stopped while writing it); that line was dropped.")


def read_metrics(output_dir: str | Path) -> list[dict[str, Any]]:
    """The complete records of ``output_dir/metrics.jsonl``, in order (a line still being written is left out)."""
    path = Path(output_dir) / METRICS_FILE
    lines = path.read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in lines[:-1] if line.strip()]  # lines[-1]: "" or a line not yet ended
