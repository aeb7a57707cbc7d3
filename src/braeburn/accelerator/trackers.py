"""Experiment trackers behind Accelerate's names: ``init_trackers`` / ``log`` / ``get_tracker``.

A JSON-lines file (``jsonl``) is always available; TensorBoard when the ``tensorboard`` package is
installed; Weights & Biases (``wandb``) and MLflow (``mlflow``) when theirs are. A tracker asked for
by name whose package is missing is an error naming the ``pip install``; ``"all"`` means, as in Accelerate,
every one of Accelerate's installed (the JSON-lines file is braeburn's own: asked for by name only). Any
object subclassing :class:`GeneralTracker` can be passed as well (as in Accelerate).
Trackers live on the main process only; elsewhere ``log`` does nothing.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import secrets
import time
from pathlib import Path
from typing import Any

from ..checkpoints import ownership
from ..checkpoints.no_follow import open_append, write_atomic

JSONL_FILE = "metrics.jsonl"


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # a 0-d tensor or numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # strict JSON has no NaN
    return value


class GeneralTracker:
    """Base class of a tracker (Accelerate's interface): subclass it to plug your own into ``log_with``."""

    name: str = "general"
    requires_logging_directory: bool = False
    main_process_only: bool = True

    def __init__(self, _blank: bool = False):
        self._blank = _blank

    @property
    def tracker(self) -> Any:
        """The underlying object (a SummaryWriter, a wandb run, ...)."""
        return None

    def start(self) -> None:
        """Called by init_trackers before anything is logged (Accelerate's lazy start)."""

    def store_init_configuration(self, values: dict) -> None:
        """Record the run's hyperparameters."""

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        """Record ``values`` (name -> number or text) at ``step``."""

    def finish(self) -> None:
        """Flush and close."""


class JSONLinesTracker(GeneralTracker):
    """``logging_dir/run_name/metrics.jsonl``, one JSON object per ``log`` call, and ``config.json``."""

    name = "jsonl"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike, **kwargs: Any):
        super().__init__()
        self.folder = Path(logging_dir) / run_name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / JSONL_FILE
        self._file = None  # a file of the user's at the name (a model's logs): left alone, said once, not logged
        if ownership.may_write(self.folder, JSONL_FILE, "the jsonl tracker's metrics log"):
            self._file = open_append(self.path)  # (a link planted at its name is refused, not followed)

    @property
    def tracker(self) -> Any:
        return self._file

    def store_init_configuration(self, values: dict) -> None:
        text = json.dumps({k: _plain(v) for k, v in values.items()}, indent=1, default=str)
        if ownership.may_write(self.folder, "config.json", "the jsonl tracker's copy of the run's configuration"):
            write_atomic(self.folder / "config.json", text)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        if self._file is None or self._file.closed:
            return
        record = {"step": step, **{k: _plain(v) for k, v in values.items()}}
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()

    def finish(self) -> None:
        if self._file is not None:
            self._file.close()


class TensorBoardTracker(GeneralTracker):
    """A ``SummaryWriter`` in ``logging_dir/run_name``, written as Accelerate's tracker writes it: tensors as their
    numbers (Accelerate's ``listify``), numbers (``bool`` among them) as scalars, text as text, a dict's numbers as
    ``add_scalars`` writes them (tag ``key``, one run per entry, ``run_name/<key>_<entry>/``); the configuration as
    TensorBoard's hyperparameters in a run of its own, ``run_name/<time>/`` (where ``add_hparams`` puts them), and
    as ``run_name/<time>/hparams.yml``. A value Accelerate's tracker stops on with an error from inside TensorBoard (a
    list or a Path in the configuration, text in a dict of scalars) is refused first, naming the key and the way out.

    No event file can be caught by a link planted before: every one ends in random characters, and each
    ``<time>`` folder is made new by this tracker (a name that exists, a link among them, is never used; the
    hyperparameters' writer is opened in the new folder, not by ``add_hparams``, which would open whatever is
    there). A link at a ``<key>_<entry>`` folder is not written through: that entry is left out, said once."""

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike, **kwargs: Any):
        super().__init__()
        from torch.utils.tensorboard import SummaryWriter

        self.logging_dir = os.path.join(logging_dir, run_name)
        kwargs.setdefault("filename_suffix", _random_suffix())  # a name no link planted before can have
        self.writer = SummaryWriter(self.logging_dir, **kwargs)
        self._left_out: set[str] = set()  # add_scalars folders found to be links (said once each)

    @property
    def tracker(self) -> Any:
        return self.writer

    def store_init_configuration(self, values: dict) -> None:
        import yaml
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        for key, value in values.items():
            _check_hyperparameter(key, value)
        with SummaryWriter(str(_new_time_folder(self.logging_dir)), filename_suffix=_random_suffix()) as writer:
            for summary in hparams_summaries(values, {}):  # what add_hparams writes, in a folder made new here
                writer.file_writer.add_summary(summary)
        self.writer.flush()
        write_atomic(_new_time_folder(self.logging_dir) / "hparams.yml", yaml.dump(values))

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        values = _listify(values)
        for key, value in values.items():
            if isinstance(value, dict):
                _check_grouped(key, value)
        for key, value in values.items():  # (a value of another type is left out, as Accelerate's tracker does)
            if isinstance(value, (int, float)):
                self.writer.add_scalar(key, value, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                _add_scalars(self.writer, key, value, step, self._left_out, **kwargs)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


_HYPERPARAMETER_TYPES = (bool, int, float, str)


def _check_hyperparameter(key: str, value: Any) -> None:
    """Refuse what ``add_hparams`` stops on (Accelerate's tracker then fails inside TensorBoard)."""
    import torch

    if value is None or isinstance(value, _HYPERPARAMETER_TYPES):
        return
    if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.numel() >= 1:
        return  # (TensorBoard keeps its first number, as for Accelerate)
    what = "a 0-d tensor" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
    raise ValueError(
        f"init_trackers(config=...): config[{key!r}] is {what}; TensorBoard's hyperparameters take only bool, int, "
        "float, str, None or a tensor (Accelerate's TensorBoardTracker stops inside add_hparams here); pass "
        f"config[{key!r}] as a number or a str (value.item() for a tensor, str(value) for a list or a Path; a nested "
        "dict as flat keys such as 'optimizer.lr')")


def _is_number(value: Any) -> bool:
    import numpy

    return isinstance(value, (int, float, numpy.number, numpy.bool_))


def _check_grouped(key: str, group: dict) -> None:
    """Refuse what ``add_scalars`` stops on partway (Accelerate's tracker then fails inside TensorBoard)."""
    for entry, number in group.items():
        if not _is_number(number):
            raise ValueError(
                f"log({{{key!r}: {{{entry!r}: {number!r}, ...}}}}): a dict is written as TensorBoard's add_scalars "
                f"(one scalar per entry) and {entry!r} is a {type(number).__name__}, not a number (Accelerate's "
                f"TensorBoardTracker stops inside add_scalars here); log text as its own key: log({{'{key}_{entry}': "
                "text})")


def _listify(value: Any) -> Any:
    """Accelerate's ``listify``: every tensor, however nested, as its numbers (bfloat16 as float32)."""
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.dtype == torch.bfloat16 else value).tolist()
    if isinstance(value, dict):
        return type(value)({k: _listify(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return type(value)(_listify(v) for v in value)
    return value


def _add_scalars(writer: Any, key: str, group: dict, step: int | None, left_out: set[str],
                 walltime: float | None = None) -> None:
    """``SummaryWriter.add_scalars``: each entry as a scalar tagged ``key`` in a run of its own,
    ``<logdir>/<key>_<entry>/`` (its writer kept among the SummaryWriter's own, flushed and closed with it), with
    the writer's random file suffix; a link waiting at such a folder is not written through (the entry is left
    out, said once)."""
    from torch.utils.tensorboard.summary import scalar
    from torch.utils.tensorboard.writer import FileWriter

    from ..warn import warn

    walltime = time.time() if walltime is None else walltime
    logdir = writer._get_file_writer().get_logdir()
    for entry, number in group.items():
        folder = logdir + "/" + key.replace("/", "_") + "_" + str(entry)
        if folder not in writer.all_writers:
            if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
                if folder not in left_out:
                    left_out.add(folder)
                    warn(f"TensorBoard: {folder} is a symbolic link or not a folder; log({{{key!r}: ...}}) leaves "
                             f"out {entry!r} rather than write through it (remove it to log that entry)")
                continue
            writer.all_writers[folder] = FileWriter(folder, writer.max_queue, writer.flush_secs, writer.filename_suffix)
        writer.all_writers[folder].add_summary(scalar(key, number), step, walltime)


def _random_suffix() -> str:
    return f".{secrets.token_hex(4)}"


def _new_time_folder(parent: str | os.PathLike) -> Path:
    """``parent/<time.time()>``, made here: Accelerate's name for a folder of the hyperparameters. A name that is
    taken (the clock gave the same time, or something was put there) is passed over for the next time."""
    Path(parent).mkdir(parents=True, exist_ok=True)  # (the tracker's own folder, which its writer made)
    for _ in range(1000):
        folder = Path(parent) / str(time.time())
        try:
            folder.mkdir()  # not exist_ok: a folder or link that is there already is never written into
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}: no free <time> folder name for the TensorBoard hyperparameters")


class WandBTracker(GeneralTracker):
    """A Weights & Biases run: ``wandb.init(project=run_name, **init_kwargs)``."""

    name = "wandb"

    def __init__(self, run_name: str, **kwargs: Any):
        super().__init__()
        import wandb

        self.run = wandb.init(project=run_name, **kwargs)

    @property
    def tracker(self) -> Any:
        return self.run

    def store_init_configuration(self, values: dict) -> None:
        self.run.config.update(values, allow_val_change=True)

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)

    def finish(self) -> None:
        self.run.finish()


class MLflowTracker(GeneralTracker):
    """An MLflow run in the experiment ``run_name`` (the tracking URI from MLFLOW_TRACKING_URI or logging_dir)."""

    name = "mlflow"

    def __init__(self, run_name: str, logging_dir: str | os.PathLike | None = None, **kwargs: Any):
        super().__init__()
        import mlflow

        if logging_dir is not None and not os.environ.get("MLFLOW_TRACKING_URI"):
            mlflow.set_tracking_uri(Path(logging_dir).resolve().as_uri())
        mlflow.set_experiment(run_name)
        self._mlflow = mlflow
        self.active_run = mlflow.start_run(**kwargs)

    @property
    def tracker(self) -> Any:
        return self.active_run

    def store_init_configuration(self, values: dict) -> None:
        self._mlflow.log_params({k: str(v)[:500] for k, v in values.items()})

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        numbers = {k: float(_plain(v)) for k, v in values.items()
                   if isinstance(_plain(v), (int, float)) and not isinstance(v, bool)}
        self._mlflow.log_metrics(numbers, step=step)

    def finish(self) -> None:
        self._mlflow.end_run()


# name -> (class, the module that must be importable)
TRACKERS: dict[str, tuple[type[GeneralTracker], str | None]] = {
    "jsonl": (JSONLinesTracker, None), "tensorboard": (TensorBoardTracker, "tensorboard"),
    "wandb": (WandBTracker, "wandb"), "mlflow": (MLflowTracker, "mlflow")}


def is_available(name: str) -> bool:
    module = TRACKERS[name][1]
    return module is None or importlib.util.find_spec(module) is not None


def available_trackers() -> list[str]:
    return [name for name in TRACKERS if is_available(name)]


def _name(item: Any) -> str:
    return str(getattr(item, "value", item)).lower()  # Accelerate's LoggerType enum members too


def is_tracker(item: Any) -> bool:
    """A tracker object: braeburn's GeneralTracker, or any object with a tracker's methods (a subclass of
    Accelerate's ``accelerate.tracking.GeneralTracker`` among them)."""
    if isinstance(item, GeneralTracker):
        return True
    return not isinstance(item, str) and hasattr(item, "name") and all(
        callable(getattr(item, method, None)) for method in ("store_init_configuration", "log", "finish"))


def resolve_log_with(log_with: Any) -> list[Any]:
    """Names (and GeneralTracker instances) to start, from Accelerate's ``log_with``; errors name the fix."""
    if log_with is None:
        return []
    items = list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]
    if any(isinstance(i, str) and _name(i) == "none" for i in items):
        return []
    if any(not is_tracker(i) and _name(i) == "all" for i in items):  # Accelerate's: every installed one of its own
        chosen = [n for n in available_trackers() if n != "jsonl"] + [i for i in items if is_tracker(i)]
        return _importable(chosen, log_with)
    chosen: list[Any] = []
    for item in items:
        if is_tracker(item):
            chosen.append(item)
            continue
        name = _name(item)
        if name not in TRACKERS:
            raise ValueError(f"log_with={item!r}: braeburn has no tracker of that name; choose from "
                             f"{', '.join(TRACKERS)}, 'all', or pass an instance of braeburn.accelerator.trackers.GeneralTracker")
        if not is_available(name):
            raise ValueError(f"log_with={name!r}: the {TRACKERS[name][1]} package is not installed; "
                             f"pip install {TRACKERS[name][1]}, or choose from {', '.join(available_trackers())}")
        if name not in chosen:
            chosen.append(name)
    return _importable(chosen, log_with)


def _importable(chosen: list[Any], asked: Any) -> list[Any]:
    """``chosen``, once TensorBoard, where among them, imports: an installed tensorboard package that fails on import
    (a broken install) is refused now, with the way out, not as its own error when the first value is logged."""
    if "tensorboard" in chosen:
        try:
            import torch.utils.tensorboard  # noqa: F401
        except Exception as error:  # noqa: BLE001 - whatever a broken package raises, the way out is the same
            raise ImportError(
                f"log_with / report_to {asked!r} starts TensorBoard, and the tensorboard package is installed but "
                f"importing torch.utils.tensorboard fails ({type(error).__name__}: {error}); repair it (pip install "
                "--force-reinstall tensorboard) or leave TensorBoard out (name the other trackers, or 'none')"
            ) from error
    return chosen


def beyond_braeburn(peer_all: list[str]) -> list[str]:
    """Of the trackers a peer's "all" starts here (``peer_all``, the peer's own list), those braeburn's "all" would
    not start: a name braeburn has no tracker for, or tensorboard where only tensorboardX is installed."""
    return [name for name in dict.fromkeys(peer_all) if name not in TRACKERS or not is_available(name)]


def why_lacking(names: list[str]) -> str:
    """Why braeburn starts none of ``names`` (from beyond_braeburn), in a few words for an error message."""
    if names == ["tensorboard"]:
        return "starts only with the tensorboard package (tensorboardX alone is installed: pip install tensorboard)"
    return "has no tracker for (TensorBoard: it needs the tensorboard package, not tensorboardX alone)" if \
        "tensorboard" in names else "has no tracker for"


def start_trackers(chosen: list[Any], project_name: str, logging_dir: str | os.PathLike | None,
                   init_kwargs: dict[str, dict] | None = None) -> list[GeneralTracker]:
    """Start every tracker in ``chosen`` for ``project_name``; ``init_kwargs`` is per tracker name."""
    started: list[GeneralTracker] = []
    init_kwargs = init_kwargs or {}
    for item in chosen:
        if is_tracker(item):  # made by the user, started as Accelerate starts it
            if callable(getattr(item, "start", None)):
                item.start()
            started.append(item)
            continue
        cls = TRACKERS[item][0]
        kwargs = dict(init_kwargs.get(item, {}))
        if cls.requires_logging_directory:
            if logging_dir is None:
                raise ValueError(f"the {item} tracker writes files and needs a folder: pass "
                                 "Accelerator(project_dir=...) (or project_config=ProjectConfiguration(...))")
            kwargs["logging_dir"] = logging_dir
        elif item == "mlflow" and logging_dir is not None:
            kwargs.setdefault("logging_dir", logging_dir)
        started.append(cls(project_name, **kwargs))
    return started


__all__ = ["GeneralTracker", "JSONLinesTracker", "MLflowTracker", "TensorBoardTracker", "TRACKERS", "WandBTracker",
           "available_trackers", "beyond_braeburn", "is_tracker", "resolve_log_with", "start_trackers", "why_lacking"]
