"""Classification metrics for the examples: accuracy, F1, a per-class report, a confusion-matrix PNG.

numpy counts accuracy and F1; scikit-learn (in the ``examples`` extra) makes the per-class report and the
confusion matrix; matplotlib draws the picture with its file-only Agg canvas so the examples run on machines
without a display.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from braeburn.checkpoints.no_follow import write_atomic


def classification_metrics(labels: Sequence[int], predictions: Sequence[int], num_classes: int) -> dict[str, float]:
    """Accuracy and F1 as run_glue reports them: binary F1 (positive class 1) for two classes, macro F1 otherwise.

    The same numbers as scikit-learn's accuracy_score and f1_score (zero_division=0), counted with numpy: importing
    scikit-learn takes one to two seconds, a tenth of a short run, for two divisions.
    """
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape:
        raise ValueError(f"{labels.shape[0]} labels but {predictions.shape[0]} predictions: "
                         "the evaluation must predict exactly one class per example.")
    classes = np.arange(num_classes)[:, None]
    true_positives = ((labels == classes) & (predictions == classes)).sum(axis=1)
    both = (labels == classes).sum(axis=1) + (predictions == classes).sum(axis=1)  # F1 = 2 TP / (true + predicted)
    f1 = np.divide(2 * true_positives, both, out=np.zeros(num_classes), where=both > 0)
    return {"accuracy": float((labels == predictions).mean()) if labels.size else 0.0,
            "f1": float(f1[1] if num_classes == 2 else f1.mean())}


def per_class_report(labels: Sequence[int], predictions: Sequence[int], class_names: Sequence[str]) -> str:
    """Precision, recall, F1 and support for every class, as a printable table."""
    from sklearn.metrics import classification_report

    return classification_report(labels, predictions, labels=list(range(len(class_names))),
                                 target_names=[str(name) for name in class_names], digits=4, zero_division=0)


def confusion(labels: Sequence[int], predictions: Sequence[int], num_classes: int) -> np.ndarray:
    """Rows are true classes, columns predicted classes."""
    from sklearn.metrics import confusion_matrix

    return confusion_matrix(labels, predictions, labels=list(range(num_classes)))


def save_confusion_matrix_png(matrix: np.ndarray, class_names: Sequence[str], path: Path, title: str) -> Path:
    """Draw ``matrix`` with a count in every cell; returns the path written.

    matplotlib's object API with fixed margins: no pyplot (no global figure state, one import fewer) and
    no layout engine (``tight_layout`` took longer than the drawing itself).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    grid = max(3.0, 0.45 * len(class_names) + 1.5)  # inches for the cells
    names = 0.35 + 0.085 * max(len(str(name)) for name in class_names)  # room for the tick labels at 10 pt
    left, bottom = names + 0.3, (names if len(class_names) > 10 else 0.35) + 0.3  # + the axis label
    width, height = left + grid + 0.2, bottom + grid + 0.45
    figure = Figure(figsize=(width, height))
    figure.subplots_adjust(left=left / width, bottom=bottom / height, right=1 - 0.2 / width, top=1 - 0.45 / height)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.imshow(matrix, cmap="Blues")
    ticks = range(len(class_names))
    axes.set_xticks(ticks, [str(name) for name in class_names], rotation=90 if len(class_names) > 10 else 0)
    axes.set_yticks(ticks, [str(name) for name in class_names])
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title(title)
    threshold = matrix.max() / 2 if matrix.size else 0
    for row in range(matrix.shape[0]):
        for column in range(matrix.shape[1]):
            color = "white" if matrix[row, column] > threshold else "black"
            axes.text(column, row, str(matrix[row, column]), ha="center", va="center", color=color, fontsize=8)
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=120)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, image.getvalue())  # (a link planted at its name is replaced, never written through)


def write_json(values: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, json.dumps(values, indent=2, sort_keys=True) + "\n")
