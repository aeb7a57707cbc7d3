"""What a user sees of a run's TensorBoard files, the same for a peer's run and braeburn's: the files' names with the
parts that differ between any two runs (the time, the writer's count) named, and what TensorBoard reads from each
event file (scalars, texts, hyperparameters). Without the tensorboard package no event file is written and both views
are empty."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

_TIME_FOLDER = re.compile(r"(^|/)\d{9,}\.\d+(?=/)")  # str(time.time()): Accelerate's folder of the hyperparameters
_DATE_FOLDER = re.compile(r"(^|/)[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_" + re.escape(socket.gethostname()) + "(?=/)")
_EVENT_FILE = re.compile(r"(?P<folder>(?:.*/)?)events\.out\.tfevents\.\d+\." + re.escape(socket.gethostname())
                         + rf"\.{os.getpid()}\.\d+(?P<suffix>\.[0-9a-f]{{8}})?")
RANDOM_SUFFIX = "<8 random hex>"


def shown(path: str) -> str:
    """A written file's path as compared: ``<time>`` for Accelerate's time folders, ``<date>_<host>`` for
    TensorBoard's run folders, ``events.out.tfevents.<time>.<host>.<pid>.<n>`` for an event file (plus
    ``RANDOM_SUFFIX`` where its name ends in one)."""
    path = _TIME_FOLDER.sub(r"\1<time>", path)
    path = _DATE_FOLDER.sub(r"\1<date>_<host>", path)
    match = _EVENT_FILE.fullmatch(path)
    if match:
        path = f"{match['folder']}events.out.tfevents.<time>.<host>.<pid>.<n>" + (
            f".{RANDOM_SUFFIX}" if match["suffix"] else "")
    return path


def unsuffixed(paths: list[str]) -> list[str]:
    """``paths`` (as ``shown`` gives them) with braeburn's random end of an event file's name left out."""
    return [path.removesuffix(f".{RANDOM_SUFFIX}") for path in paths]


def tensorboard_view(folder: Path) -> dict[str, Any]:
    """For each event file under ``folder`` (by its shown path; a second file of the same shown path in a folder, as
    a writer opened again writes it, as ``...<n>#2``): the scalars ``{tag: [(step, value)]}``, the texts
    ``{tag: [(step, text)]}`` and the hyperparameters ``{name: value}`` TensorBoard reads from it."""
    view, counts = {}, {}
    for events in sorted(folder.rglob("events.out.tfevents.*"), key=_written_order):
        path = shown(events.relative_to(folder).as_posix())
        counts[path] = counts.get(path, 0) + 1
        view[path if counts[path] == 1 else path.replace(".<n>", f".<n>#{counts[path]}", 1)] = _read(events)
    return dict(sorted(view.items()))


_WRITER = re.compile(r"events\.out\.tfevents\.(?P<time>\d+)\." + re.escape(socket.gethostname())
                     + r"\.\d+\.(?P<n>\d+)(\.[0-9a-f]{8})?")


def _written_order(events: Path) -> tuple:
    """A folder's event files in the order they were opened: by the time, then the writer's count, in the name."""
    match = _WRITER.fullmatch(events.name)
    return (str(events.parent), int(match["time"]), int(match["n"])) if match else (str(events.parent), 0, 0)


def _read(events: Path) -> dict[str, Any]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2
    from tensorboard.util import tensor_util

    accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in tags["scalars"]}
    texts = {tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto).tolist()) for e in accumulator.Tensors(tag)]
             for tag in tags["tensors"]}
    hparams = {}
    try:
        start = accumulator.PluginTagToContent("hparams").get("_hparams_/session_start_info")
    except KeyError:  # no hyperparameters in this file
        start = None
    if start is not None:
        info = plugin_data_pb2.HParamsPluginData.FromString(start).session_start_info.hparams
        hparams = {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
                   for name, value in info.items()}
    return {"scalars": scalars, "texts": texts, "hparams": hparams}
