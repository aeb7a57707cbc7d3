"""Lightning-format ``.ckpt`` files written by ``braeburn.lightning.Trainer``, for ``Model.load_from_checkpoint``.

braeburn's own checkpoints are folders (``version_N/checkpoint-S``), which Lightning's classmethod
``load_from_checkpoint`` cannot read (it raises ``IsADirectoryError``) and braeburn cannot intercept. So wherever a
Lightning user gets a path to hand to it, braeburn gives a file Lightning reads:

- each checkpoint braeburn saves (one per epoch, the last kept, as Lightning's default ``ModelCheckpoint``) has a
  ``version_N/checkpoints/epoch=E-step=S.ckpt`` beside it, where Lightning puts its own; the previous one braeburn
  wrote there is removed (``trainer.checkpoint_callback.best_model_path`` names the latest);
- ``trainer.save_checkpoint(path)`` writes one at ``path``.

Each holds what ``load_from_checkpoint`` reads, as Lightning writes it: ``state_dict`` (the module's), the
hyperparameters of ``save_hyperparameters()`` (``hyper_parameters``, ``hparams_name``; a datamodule's too),
``epoch``, ``global_step`` and ``pytorch-lightning_version``: the content of Lightning's ``weights_only=True``
files, without their ``loops`` counters. The optimizer, schedulers, random states and data position stay in
braeburn's folder, which ``fit(ckpt_path=...)`` resumes (given such a ``.ckpt``'s path too); Lightning's own
``fit(ckpt_path=<this file>)`` refuses it ("contains only the model"), so it never restarts a run silently.

Writes are atomic (a temporary file renamed over the name) and never replace a file braeburn did not write: in the
run's folder the ownership record (checkpoints/ownership.py) proves it; elsewhere, only a file this process wrote
(and nobody changed since) or a Lightning checkpoint file (read as data: an earlier run's ``save_checkpoint``, which
Lightning writes over too) is replaced; a link, a folder or any other file is not.
"""

from __future__ import annotations

import os
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from ...checkpoints import no_follow, ownership
from .callbacks import OWN_TRAINER
from .checks import LightningArgumentError, not_here

FOLDER = "checkpoints"  # in version_N, as Lightning's default ModelCheckpoint names it
_EPOCH_FILE = re.compile(r"^epoch=(\d+)-step=(\d+)\.ckpt$")
# Lightning's names, for a module or datamodule that does not carry them (a duck-typed module)
_HPARAMS_KEYS = {"module": ("hyper_parameters", "hparams_name"),
                 "datamodule": ("datamodule_hyper_parameters", "datamodule_hparams_name")}


class CkptWriteError(FileExistsError):
    """A ``.ckpt`` path holds a file braeburn did not write: nothing is written over it."""


def lightning_version() -> str:
    """The installed Lightning's version (load_from_checkpoint migrates older checkpoints by it)."""
    for package in ("lightning", "pytorch-lightning"):
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return "2.0.0"  # (no Lightning here: nothing will migrate this file)


def checkpoint_content(module: torch.nn.Module, datamodule: Any, epoch: int, global_step: int) -> dict[str, Any]:
    """What Lightning's ``dump_checkpoint(weights_only=True)`` writes for ``module``, without ``loops``."""
    content: dict[str, Any] = {"epoch": epoch, "global_step": global_step,
                               "pytorch-lightning_version": lightning_version(), "state_dict": module.state_dict()}
    for kind, obj in (("module", module), ("datamodule", datamodule)):
        hparams = getattr(obj, "hparams", None) if obj is not None else None
        if not hparams:
            continue
        key_default, name_default = _HPARAMS_KEYS[kind]
        if hasattr(obj, "_hparams_name"):
            content[getattr(obj, "CHECKPOINT_HYPER_PARAMS_NAME", name_default)] = obj._hparams_name
        content[getattr(obj, "CHECKPOINT_HYPER_PARAMS_KEY", key_default)] = dict(hparams)
    state = datamodule.state_dict() if callable(getattr(datamodule, "state_dict", None)) else None
    if state:
        content[type(datamodule).__qualname__] = state
    return content


def _write(path: Path, content: dict[str, Any]) -> os.stat_result:
    """``content`` torch.save'd at ``path`` whole or not at all; the new file's stat."""
    handle, temporary = no_follow.create_temporary(path)
    try:
        with handle:
            torch.save(content, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        no_follow.remove_file(temporary)
        raise
    no_follow.fsync_dir(path.parent)
    return os.stat(path, follow_symlinks=False)


class CkptFiles:
    """The ``.ckpt`` files one Trainer writes: its run folders' latest, and those of ``save_checkpoint``."""

    def __init__(self) -> None:
        self.latest: Path | None = None  # the run's newest epoch file (best_model_path)
        self._written: dict[Path, tuple[int, int, int, int]] = {}  # path -> (device, inode, size, mtime) written

    def save_to(self, path: str | os.PathLike, content: dict[str, Any]) -> Path:
        """``trainer.save_checkpoint(path)``: written, unless ``path`` is a file this process did not write."""
        target = Path(path).expanduser().absolute()
        if os.path.lexists(target) and self._written.get(target) != _identity(target) and \
                not _is_lightning_checkpoint(target):
            raise CkptWriteError(
                f"trainer.save_checkpoint({str(path)!r}): {target} exists and is not a Lightning checkpoint file "
                "(Lightning would write over it; braeburn writes over a .ckpt file, such as an earlier run's, but "
                "over no other file, nor a link or a folder). Remove it, or pass another path")
        target.parent.mkdir(parents=True, exist_ok=True)
        self._written[target] = _stat_identity(_write(target, content))
        return target

    def save_epoch(self, run_folder: Path, epoch: int, global_step: int, content: dict[str, Any]) -> Path:
        """``run_folder/checkpoints/epoch=E-step=S.ckpt``, the previous one braeburn wrote there removed."""
        folder = run_folder / FOLDER
        ownership.claim(run_folder, {FOLDER: ownership.FOLDER}, "braeburn writes the run's .ckpt files there")
        folder.mkdir(exist_ok=True)
        name = f"epoch={epoch}-step={global_step}.ckpt"
        ownership.claim(folder, {name: ownership.FILE}, "braeburn writes this epoch's .ckpt there")
        path = folder / name
        _write(path, content)
        # the one before (a restarted worker's first: each one braeburn recorded there), as ModelCheckpoint keeps 1
        stale = [self.latest.name] if self.latest is not None and self.latest.parent == folder else \
            [entry for entry in ownership.recorded(folder) if _EPOCH_FILE.match(entry)]
        self.latest = path
        for entry in stale:
            if entry != name and ownership.owns(folder, entry):
                no_follow.remove_file(folder / entry)
                ownership.forget(folder, [entry])
        return path


class CheckpointSaving:
    """braeburn.lightning.Trainer's checkpoint methods (a mixin: it reads the Trainer's options, run and module)."""

    @property
    def checkpoint_callback(self) -> CheckpointCallback | None:
        """The latest ``.ckpt`` written (``best_model_path``), as Lightning's default ModelCheckpoint names it; None
        with enable_checkpointing=False, as Lightning."""
        return CheckpointCallback(self) if self.options.checkpoints else None

    def save_checkpoint(self, filepath: str | os.PathLike, weights_only: bool | None = None,
                        storage_options: Any = None) -> None:
        """A ``.ckpt`` at ``filepath`` that ``Model.load_from_checkpoint`` reads (ckpt_files.py): the module's weights
        and hyperparameters, as Lightning writes them."""
        if storage_options is not None:
            raise LightningArgumentError([f"trainer.save_checkpoint(storage_options={storage_options!r}): braeburn "
                                          f"writes a local file only; leave storage_options out, or {OWN_TRAINER}"])
        if self._module is None:
            raise LightningArgumentError(["trainer.save_checkpoint() before fit(): there is no module to save yet "
                                          "(Lightning raises too); call it after trainer.fit(model, ...)"])
        if not self.is_global_zero:
            return
        content = checkpoint_content(self._module, self._datamodule, self.current_epoch, self.global_step)
        try:
            path = self._ckpts.save_to(filepath, content)
        except CkptWriteError as error:
            raise LightningArgumentError([str(error)]) from None
        self._say_ckpt(path)

    def _save_epoch_ckpt(self) -> None:
        """Beside the checkpoint braeburn just saved: its ``checkpoints/epoch=E-step=S.ckpt`` (main process)."""
        run, folder = self._run, self._run_folder
        last = run.state.last_checkpoint if run is not None else None
        if not (self.options.checkpoints and folder is not None and last and run.accelerator.is_main_process) or \
                Path(last).resolve() != (folder / f"checkpoint-{self.global_step}").resolve():
            return  # (a resumed run that trained nothing: its last checkpoint is the earlier run's, which has its .ckpt)
        latest = self._ckpts.latest
        if latest is not None and latest.parent.parent == folder and \
                latest.name.endswith(f"-step={self.global_step}.ckpt"):
            return  # this step's is written already
        content = checkpoint_content(self._module, self._datamodule, self.current_epoch, self.global_step)
        self._say_ckpt(self._ckpts.save_epoch(folder, self.current_epoch, self.global_step, content))

    def _say_no_logger(self) -> None:
        """With logger=False, Lightning's run has no version_N: trainer.log_dir is default_root_dir and its .ckpt files
        go to default_root_dir/checkpoints/. braeburn keeps its run folder (its checkpoints resume from there): said."""
        if not self._no_logger:
            return
        ckpts = (f", and its .ckpt files in {self._run_folder / 'checkpoints'} where Lightning writes them to "
                 f"{Path(self.options.root) / 'checkpoints'} (read the path from trainer.checkpoint_callback."
                 "best_model_path)") if self.options.checkpoints else ""
        self._say(f"braeburn: Trainer(logger=False): this run still writes into {self._run_folder} (trainer.log_dir: "
                  f"braeburn's checkpoint folders and metrics.jsonl are there; Lightning's log_dir is "
                  f"default_root_dir){ckpts}")

    def _say_ckpt(self, path: Path) -> None:
        """Once per Trainer: what its .ckpt files hold, and where the rest of the run's state is."""
        if self._ckpt_said:
            return
        self._ckpt_said = True
        self._say(f"braeburn: {path} holds the module's weights and hyperparameters, as Lightning's "
                  "save_checkpoint(weights_only=True) writes them (without its 'loops' counters): "
                  "Model.load_from_checkpoint reads it. The optimizer, schedulers and the run's position are in "
                  "braeburn's checkpoint folder (lightning_logs/version_N/checkpoint-S), which fit(ckpt_path=...) "
                  "resumes, given a checkpoints/epoch=E-step=S.ckpt path too; Lightning's own fit(ckpt_path=...) "
                  "refuses this file ('contains only the model')")


class CheckpointCallback:
    """``trainer.checkpoint_callback`` as Lightning's default ModelCheckpoint answers it (no monitor, the latest
    kept): ``best_model_path`` names the latest ``.ckpt`` (ckpt_files.py), ``last_model_path`` is ""
    (save_last is off); anything else it has in Lightning is refused by name."""

    def __init__(self, lightning: Any):
        self._lightning = lightning

    @property
    def best_model_path(self) -> str:
        latest = self._lightning._ckpts.latest
        return str(latest) if latest is not None and latest.exists() else ""

    last_model_path = ""
    best_model_score = None
    monitor = None

    @property
    def dirpath(self) -> str | None:
        folder = self._lightning._run_folder
        return str(folder / "checkpoints") if folder is not None else None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)  # (Python's and tools' own probes: copy, pickle, IPython)
        raise not_here(f"trainer.checkpoint_callback.{name}", "is an attribute of Lightning's ModelCheckpoint; "
                        "braeburn's has best_model_path, last_model_path, best_model_score, monitor and dirpath")


def _is_lightning_checkpoint(path: Path) -> bool:
    """``path`` is a plain file holding a Lightning checkpoint (an earlier run's save_checkpoint, Lightning's or
    braeburn's), read as data only (weights_only: no code runs): save_checkpoint writes over it, as Lightning."""
    if not path.is_file() or path.is_symlink():
        return False
    try:
        content = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001  (not a torch file, or one holding more than data: not written over)
        return False
    return isinstance(content, dict) and "state_dict" in content and "pytorch-lightning_version" in content


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        return _stat_identity(os.stat(path, follow_symlinks=False))
    except OSError:
        return None


def _stat_identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def epoch_ckpt_of(folder: str | os.PathLike) -> Path | None:
    """The ``checkpoints/epoch=E-step=S.ckpt`` written beside braeburn's checkpoint folder ``.../checkpoint-S``."""
    folder = Path(folder)
    step = folder.name.removeprefix("checkpoint-")
    beside = folder.parent / FOLDER
    if not step.isdigit() or not beside.is_dir():
        return None
    found = [path for path in beside.iterdir() if (match := _EPOCH_FILE.match(path.name)) and match.group(2) == step]
    return found[0] if len(found) == 1 and found[0].is_file() else None


def braeburn_folder_of(path: Path) -> Path | None:
    """The braeburn checkpoint folder an epoch ``.ckpt`` braeburn wrote stands for
    (``version_N/checkpoints/epoch=E-step=S.ckpt`` -> ``version_N/checkpoint-S``), when it is there."""
    match = _EPOCH_FILE.match(path.name)
    if match is None or path.parent.name != FOLDER:
        return None
    folder = path.parent.parent / f"checkpoint-{match.group(2)}"
    return folder if folder.is_dir() and not folder.is_symlink() else None


__all__ = ["CheckpointCallback", "CheckpointSaving", "CkptFiles", "CkptWriteError", "FOLDER", "braeburn_folder_of",
           "checkpoint_content", "epoch_ckpt_of", "lightning_version"]
