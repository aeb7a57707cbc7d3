"""``save_state`` / ``load_state`` of ``braeburn.Accelerator`` as Accelerate's users write them: Accelerate's file
names where the content is Accelerate's, ``register_for_checkpointing``, and automatic checkpoint naming
(``ProjectConfiguration``) with ``total_limit``. A mixin of :class:`~braeburn.compat.accelerate.api.AccelerateCompat`,
filling the core's hooks ``_checkpoint_dir``, ``_after_automatic_save``, ``_save_custom_objects``,
``_load_custom_objects`` and ``_latest_automatic_checkpoint``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from ...accelerator.core import say_once
from ...checkpoints import state as state_io

SAVED_AS_ACCELERATE = "model.safetensors, optimizer.bin, scheduler.bin and custom_checkpoint_<i>.pkl"
SAVED_BY_BRAEBURN = "rng_state_<rank>.pt, dataloader_<i>.pt, accelerator.pt and manifest.json"


class AccelerateCheckpointing:
    """Accelerate's checkpoint names and calls (see the module doc)."""

    _state_names = state_io.ACCELERATE_NAMES  # optimizer.bin, scheduler.bin, custom_checkpoint_0.pkl

    def save_state(self, output_dir: str | os.PathLike | None = None, **kwargs: Any) -> None:
        """Accelerate's save_state(): its file names where the content is its own; braeburn's own files beside them.
        What differs is said once, by the main process."""
        if self.is_main_process:
            say_once(f"braeburn: save_state() writes {SAVED_AS_ACCELERATE} as Accelerate does, and its own "
                     f"{SAVED_BY_BRAEBURN} where Accelerate writes random_states_<rank>.pkl (a pickle braeburn would "
                     "have to load unsafely); while this run lives, .<folder>.braeburn.lock beside the newest folder "
                     "keeps other processes from saving into it: docs/migrating.md")
        _refuse_unreadable_states(self._custom_objects)
        if kwargs.get("safe_serialization") is False and self.is_main_process:
            say_once("braeburn: save_state(safe_serialization=False) writes the weights as model.safetensors all the "
                     "same (Accelerate writes pytorch_model.bin): braeburn writes no pickled weights")
        super().save_state(output_dir, **kwargs)

    def load_state(self, input_dir: str | os.PathLike | None = None, **kwargs: Any) -> None:
        """Accelerate's load_state(); a prepared DataLoader saved mid-epoch resumes there, which it says."""
        input_dir = input_dir if input_dir is not None else self._latest_automatic_checkpoint()
        _refuse_accelerates_folder(input_dir)
        super().load_state(input_dir, **kwargs)
        for i, loader in enumerate(self._dataloaders):
            if loader.batches_yielded and self.is_main_process:
                say_once(f"braeburn: load_state() resumes prepared DataLoader {i} at batch {loader.batches_yielded} "
                         "of its epoch, in the saved order (Accelerate starts it over, shuffled anew, unless "
                         f"skip_first_batches(loader, {loader.batches_yielded}) is called, which gives the same "
                         "batches here)")

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Objects with ``state_dict()`` / ``load_state_dict()`` that save_state/load_state should include."""
        bad = [type(obj).__name__ for obj in objects
               if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)))]
        if bad:
            raise ValueError(f"register_for_checkpointing: {', '.join(bad)} has no state_dict() and "
                             "load_state_dict(); give it both methods, or save it yourself")
        self._custom_objects.extend(objects)

    def _save_custom_objects(self, directory: Path) -> None:
        for i, obj in enumerate(self._custom_objects):
            state_io.save_file(obj.state_dict(), directory, self._state_names.name("custom_checkpoint", i))

    def _load_custom_objects(self, directory: Any) -> None:
        for i, obj in enumerate(self._custom_objects):
            name = state_io.state_file(directory, self._state_names, "custom_checkpoint", i)
            if not os.path.exists(os.path.join(directory, name)):
                raise ValueError(f"{directory} holds no {name}, but {len(self._custom_objects)} "
                                 "objects are registered for checkpointing: register the same objects, in the same "
                                 "order, as the run that saved it")
            obj.load_state_dict(state_io.load_file(directory, name))  # (weights_only: plain data, never code)

    def _checkpoint_dir(self, output_dir: Any) -> Any:
        """save_state()/load_state() without a folder: project_dir/checkpoints/checkpoint_<n> (automatic naming)."""
        config = self.project_configuration
        if output_dir is not None:
            return output_dir
        if not config.automatic_checkpoint_naming or config.project_dir is None:
            raise ValueError("save_state() needs a folder: pass save_state(output_dir), or Accelerator(project_config="
                             "ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=True))")
        folder = os.path.join(config.project_dir, "checkpoints", f"checkpoint_{config.iteration}")
        ahead = [p for p in Path(folder).parent.glob("checkpoint_*")
                 if p.name.split("_")[-1].isdigit() and int(p.name.split("_")[-1]) >= config.iteration]
        if ahead:  # an earlier run of the same script: never replaced, and this run's save never rotated away first
            raise FileExistsError(errno.EEXIST, _rerun_refusal(Path(folder), ahead, config.total_limit))
        return folder

    def _after_automatic_save(self, output_dir: Any) -> None:
        config = self.project_configuration
        if not config.automatic_checkpoint_naming:
            return
        config.iteration += 1
        folder = Path(output_dir).parent
        if config.total_limit is not None and self.is_main_process:
            from ...checkpoints import ownership

            found = sorted((p for p in folder.glob("checkpoint_*") if p.name.split("_")[-1].isdigit()
                            and ownership.saved_state(p)),  # its manifest says braeburn saved it
                           key=lambda p: int(p.name.split("_")[-1]))
            for old in found[:max(0, len(found) - config.total_limit)]:
                _remove_unless_held(old)
        self._release_older_checkpoint_locks(os.path.abspath(output_dir))

    def _release_older_checkpoint_locks(self, newest: str) -> None:
        """With automatic naming this run never writes an older checkpoint_<n> again (and another run into the
        same project_dir is refused by _checkpoint_dir), so only the newest one's lock is held: one
        ``.checkpoint_<n>.braeburn.lock`` beside the checkpoints during the run, none after it."""
        from ...checkpoints import output_lock

        for folder in [f for f in self._locked if f != newest and os.path.dirname(f) == os.path.dirname(newest)]:
            del self._locked[folder]
            output_lock.release(folder)

    def _latest_automatic_checkpoint(self) -> str:
        config = self.project_configuration
        folder = Path(config.project_dir or ".") / "checkpoints"
        found = sorted((p for p in folder.glob("checkpoint_*") if p.name.split("_")[-1].isdigit()),
                       key=lambda p: int(p.name.split("_")[-1]))
        if not config.automatic_checkpoint_naming or not found:
            raise ValueError("load_state() needs a folder: pass load_state(input_dir) (no automatically named "
                             f"checkpoint was found in {folder})")
        return str(found[-1])


def _refuse_unreadable_states(objects: list[Any]) -> None:
    """Before anything is written: each registered object's state_dict() must be what load_state() reads back
    (``torch.load(weights_only=True)``: tensors and plain data), else the saved state could never be resumed."""
    import io
    import pickle
    import re

    import torch

    for i, obj in enumerate(objects):
        buffer = io.BytesIO()
        torch.save(obj.state_dict(), buffer)
        buffer.seek(0)
        try:
            torch.load(buffer, weights_only=True)
        except pickle.UnpicklingError as error:
            found = re.search(r"GLOBAL ([\w.]+)", str(error))
            what = f"objects pickled as {found.group(1)}" if found else "objects other than tensors and plain data"
            raise ValueError(
                f"save_state(): the state_dict() of registered object {i} ({type(obj).__name__}) holds {what}, which "
                f"load_state() would refuse to read back from custom_checkpoint_{i}.pkl (braeburn loads plain data "
                "only: unpickling other objects could run code; Accelerate loads it with weights_only=False). "
                "Nothing was written. Fix: return tensors, numbers, strings, lists and dicts from state_dict() (a "
                "numpy array: torch.from_numpy(a) or a.tolist(); a numpy number: float(x); a dataclass: "
                "dataclasses.asdict(d))") from None


def _refuse_accelerates_folder(folder: Any) -> None:
    """A folder Accelerate's save_state() wrote (its random_states_<rank>.pkl, no accelerator.pt) named as such."""
    path = Path(folder)
    if (path / "accelerator.pt").exists() or not any(path.glob("random_states_*.pkl")):
        return
    raise ValueError(
        f"load_state({str(folder)!r}): this folder was written by Accelerate's save_state() (random_states_<rank>.pkl, "
        "no accelerator.pt), which braeburn does not resume: its random states are a pickle that only an unsafe "
        "unpickling reads, and it lacks the loader positions an exact resume needs. Fix: resume it with Accelerate, "
        "or carry its weights over: accelerator.unwrap_model(model).load_state_dict(safetensors.torch.load_file("
        f"{str(path / 'model.safetensors')!r})), optimizer.load_state_dict(torch.load({str(path / 'optimizer.bin')!r}, "
        "weights_only=True)); then save_state() writes a folder braeburn resumes")


def _remove_unless_held(folder: Path) -> None:
    """total_limit's removal of an old checkpoint, unless another live process holds its lock (a second run in the
    same project_dir that still saves there): that folder is kept, and one line says so."""
    from ...checkpoints import no_follow, output_lock

    lock_file = folder.parent / f".{folder.name}{output_lock.LOCK_FILE}"
    try:
        output_lock.acquire(folder, "removing an old checkpoint (total_limit)", state_folder=True)
    except output_lock.OutputDirBusyError:
        say_once(f"braeburn: save_state() kept {folder} past total_limit: another live process holds it "
                 f"({output_lock.describe_holder(lock_file)})")
        return
    except no_follow.PlantedLinkError as error:  # (the save itself succeeded: the old folder is only kept)
        say_once(f"braeburn: save_state() kept {folder} past total_limit: {error}")
        return
    try:
        no_follow.remove_tree(folder)  # (a mount point inside: refused, nothing removed)
    finally:
        output_lock.release(folder)


__all__ = ["AccelerateCheckpointing", "SAVED_AS_ACCELERATE", "SAVED_BY_BRAEBURN"]


def _number(path: Path) -> int:
    return int(path.name.split("_")[-1])


def _rerun_refusal(folder: Path, ahead: list[Path], total_limit: int | None) -> str:
    """Why save_state() refuses to save into ``folder`` (checkpoint_<iteration>) with ``ahead`` (checkpoint_<n>, n at
    or past the iteration) left by an earlier run: what Accelerate would do, and what that would cost."""
    taken, iteration = max(ahead, key=_number), _number(folder)
    existing = sorted((p for p in folder.parent.glob("checkpoint_*") if p.name.split("_")[-1].isdigit()), key=_number)
    doomed = existing[:max(0, len(existing) + 1 - total_limit)] if total_limit is not None else []  # Accelerate's
    lost = ", ".join(p.name for p in doomed if p in ahead)
    if folder.exists() and folder not in doomed:
        accelerate = (f"Accelerate {f'deletes {lost} for total_limit={total_limit} and then ' if lost else ''}refuses "
                      f"too (its ValueError: {folder.name} already exists)")
        why = " before deleting anything" if lost else " before writing anything"
    elif lost:
        accelerate = f"Accelerate would delete {lost} for total_limit={total_limit} and then write {folder.name}"
        why = ": that would delete the earlier run's checkpoint" + ("s" if "," in lost else "")
    else:
        accelerate = f"Accelerate would write {folder.name} below {taken.name}"
        why = f": load_state() would then resume the earlier run's {taken.name}, not this run's checkpoint"
    return (f"save_state(): the checkpoint folder {str(taken)!r} already exists at or after this save's iteration "
            f"{iteration}, written by an earlier run in this project_dir. {accelerate}; braeburn refuses{why}. "
            "Pass another project_dir, set accelerator.project_configuration.iteration = "
            f"{_number(taken) + 1} before the first save_state() (load_state() does not change it, as in Accelerate), "
            "or move the checkpoints folder away.")
