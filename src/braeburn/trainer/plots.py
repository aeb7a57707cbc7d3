"""A PNG of the training curves (loss, eval metrics, learning rate) in output_dir at the end of training.

matplotlib is optional (the ``plot`` extra): without it, this says so once and draws nothing.
Only matplotlib's object API is used (no pyplot), so no global backend or figure state changes. A write
that fails (a full disk) warns once and leaves no temporary file; training still ends normally.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checkpoints.no_follow import create_temporary, remove_file
from .callbacks import Callback
from .state import TrainerState
from .write_faults import WriteWarnings

if TYPE_CHECKING:
    from .loop import CoreTrainer as Trainer

PLOT_FILE = "training_curves.png"
_said_no_matplotlib = False


def _series(history: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(h["step"], h[key]) for h in history if isinstance(h.get(key), (int, float)) and "step" in h]
    return [p[0] for p in points], [float(p[1]) for p in points]


def plot_history(history: list[dict[str, Any]], path: Path) -> Path | None:
    """Draw ``history`` (the TrainerState's log_history) to ``path``; None when matplotlib is missing."""
    global _said_no_matplotlib
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        if not _said_no_matplotlib:
            _said_no_matplotlib = True
            print(f"braeburn: no {PLOT_FILE} (matplotlib is not installed; pip install 'braeburn[plot]').")
        return None
    eval_keys = sorted({k for h in history for k in h if k.startswith("eval_") and k != "eval_loss"
                        and isinstance(h[k], (int, float)) and not k.endswith(("_runtime", "_per_second"))})
    figure = Figure(figsize=(12, 3.6))  # fixed margins: constrained layout took 0.23 s to draw instead of 0.12
    figure.subplots_adjust(left=0.06, right=0.99, bottom=0.15, top=0.9, wspace=0.3)
    FigureCanvasAgg(figure)
    loss_ax, metric_ax, lr_ax = figure.subplots(1, 3)
    for key, label in (("loss", "train loss"), ("eval_loss", "eval loss")):
        steps, values = _series(history, key)
        if steps:
            loss_ax.plot(steps, values, marker="o" if key == "eval_loss" else None, label=label)
    for key in eval_keys:
        steps, values = _series(history, key)
        metric_ax.plot(steps, values, marker="o", label=key)
    steps, values = _series(history, "learning_rate")
    lr_ax.plot(steps, values)
    for ax, title in ((loss_ax, "loss"), (metric_ax, "eval metrics"), (lr_ax, "learning rate")):
        ax.set_title(title)
        ax.set_xlabel("step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    handle, temporary = create_temporary(path)  # a fresh name: nothing that is there is touched
    try:
        with handle:
            figure.savefig(handle, format="png", dpi=100)
        os.replace(temporary, path)  # (replaces a link at ``path`` itself, never its target)
    except BaseException:
        remove_file(temporary)  # never leave a half-written picture behind
        raise
    return path


class PlotCallback(Callback):
    """Writes output_dir/training_curves.png when training ends.

    The drawing (importing matplotlib and rendering: about a second) runs in a thread while the last
    checkpoint is written; the Trainer calls :meth:`wait` before ``train()`` returns.
    """

    def __init__(self) -> None:
        self.path: Path | None = None
        self._thread: threading.Thread | None = None
        self._warnings = WriteWarnings()
        self.left_alone: str | None = None  # why output_dir's training_curves.png is not redrawn (not braeburn's)

    def leave_alone(self, path: Path, why: str) -> None:
        """Draw nothing this run: ``path`` is there, and braeburn cannot prove it wrote it (``why``)."""
        self.left_alone = (f"braeburn: no {PLOT_FILE} this run: {path} is there and braeburn cannot prove it wrote "
                           f"it ({why}), so it is left as it is (the numbers are in metrics.jsonl). Move it out of "
                           f"{path.parent} to get this run's curves.")

    def on_train_end(self, trainer: "Trainer", state: TrainerState) -> None:
        if not (trainer.is_main_process and state.log_history):
            return
        if self.left_alone is not None:
            print(self.left_alone, flush=True)
            return
        history, target = [dict(record) for record in state.log_history], Path(trainer.output_dir) / PLOT_FILE

        def draw() -> None:
            try:
                self.path = plot_history(history, target)
            except OSError as error:  # a full disk at the end must not end the run (nor skip the user's code after)
                self._warnings.failed(target, error, "no plot this time (the numbers are in metrics.jsonl)")

        self._thread = threading.Thread(target=draw, name="braeburn-plot", daemon=False)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
