"""Resuming ``braeburn.Trainer`` from a checkpoint folder Transformers' Trainer wrote, as Transformers resumes it.

Such a folder holds ``model.safetensors``, ``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth`` and
``trainer_state.json``. Each is read without running code from the file: the weights by the safetensors package,
the others by ``torch.load(weights_only=True)`` (with numpy's array types allowed for the random states, as
Transformers allows them); ``training_args.bin``, a pickle of arbitrary objects, is never read. The run continues
where Transformers' would: the weights, the optimizer and schedule, the step and log history, the data position
(``global_step`` steps into the epoch, the same shuffled order), and the random states, restored after the
resumed epoch has started, as Transformers restores them. braeburn's own checkpoints of the resumed run go into
its ``output_dir``, which must not be the folder holding the Transformers checkpoints (their names are not
braeburn's to replace).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

from ...trainer.checkpoint import CheckpointError, written_by_transformers

FILES = ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json")


def resumable(request: str | None, output_dir: Path) -> Path | None:
    """The folder of a Transformers checkpoint that ``request`` (a path) names, outside ``output_dir``, holding
    every file a resume reads; else None (braeburn's own rules then apply, and refuse it)."""
    if not request or request == "latest":
        return None
    folder = Path(request).expanduser().resolve()
    if not folder.is_dir() or not written_by_transformers(folder) or folder.parent == output_dir:
        return None
    return folder if all((folder / name).is_file() for name in FILES) else None


def refusal(request: str, output_dir: Path) -> str | None:
    """Why the Transformers checkpoint ``request`` names (a path, or "latest": the newest checkpoint-N of
    ``output_dir``) cannot be resumed, with the way out; None when it is not one, or resumes."""
    if request == "latest":
        found = [p for p in output_dir.glob("checkpoint-*") if p.name[11:].isdigit() and p.is_dir()]
        folder = max(found, key=lambda p: int(p.name[11:]), default=None)
    else:
        folder = Path(request).expanduser().resolve()
    if folder is None or not folder.is_dir() or not written_by_transformers(folder):
        return None
    what = f"{folder} is a checkpoint of Transformers' Trainer"
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        return (f"{what} without {', '.join(missing)} (--save_only_model writes none), so its run cannot be continued: "
                f"start a braeburn run from its weights (from_pretrained({str(folder)!r}) builds the model) without "
                "--resume_from_checkpoint.")
    if folder.parent == output_dir:
        return (f"{what}, in this run's output_dir, whose checkpoint-N names braeburn does not write over: resume "
                f"it into another folder, with --output_dir <a new folder> --resume_from_checkpoint {folder} "
                "(braeburn.Trainer continues Transformers' run from there).")
    return None


def resume(trainer: Any, folder: Path, loader: Any) -> None:
    """Load ``folder`` into the prepared run of ``trainer`` (model, optimizer, schedule, state, data position,
    random states)."""
    acc = trainer.accelerator
    model = acc.unwrap_model(trainer.prepared_model())
    _load_weights(model, folder)
    saved = _trainer_state(folder / "trainer_state.json")
    _applied(folder / "optimizer.pt", lambda: trainer.optimizer.load_state_dict(
        _regrouped(_load(folder / "optimizer.pt"), trainer.optimizer, model, folder)))
    _applied(folder / "scheduler.pt", lambda: trainer.lr_scheduler.load_state_dict(
        _per_group(_load(folder / "scheduler.pt"), len(trainer.optimizer.param_groups), folder)))
    random_states = _load(folder / "rng_state.pth", numpy_arrays=True)
    state = trainer.state
    state.global_step, state.epoch = saved["global_step"], float(saved["epoch"])
    state.log_history = list(saved.get("log_history", []))
    state.best_metric = saved.get("best_metric")
    epochs_done, steps_in_epoch = divmod(state.global_step, state.steps_per_epoch)
    state.epochs_ended = epochs_done
    state.samples_seen = state.global_step * trainer._samples_per_batch * trainer.config.gradient_accumulation_steps
    # The position as a resumed run's (the loader's own seed and order kept), not a bare skip_first_batches: the
    # resumed epoch starts without drawing from torch's generator, whose saved state is set here, before the epoch
    # starts; Transformers draws at the epoch's start and sets the saved state after it, the same numbers.
    loader.load_state_dict({**loader.state_dict(), "epoch": epochs_done,
                            "batches_yielded": steps_in_epoch * trainer.config.gradient_accumulation_steps})
    _applied(folder / "rng_state.pth", lambda: _set_random_states(random_states, acc.plan.device))
    acc.print(f"braeburn: resumed from Transformers' checkpoint {folder} at step {state.global_step} "
              f"(epoch {state.epoch:g}); braeburn's checkpoints of this run go into {trainer.output_dir}")


def _trainer_state(path: Path) -> dict[str, Any]:
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(saved, dict):
            raise ValueError("not a JSON object")
        step, epoch = saved.get("global_step"), saved.get("epoch")
        if type(step) is not int or step < 0:
            raise ValueError(f"global_step {step!r} is not a whole number of steps")
        if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or not 0 <= epoch < float("inf"):
            raise ValueError(f"epoch {epoch!r} is not a finite number of epochs")
        history, best = saved.get("log_history", []), saved.get("best_metric")
        if not isinstance(history, list) or not all(isinstance(record, dict) for record in history):
            raise ValueError("log_history is not a list of records")
        if best is not None and (isinstance(best, bool) or not isinstance(best, (int, float))):
            raise ValueError(f"best_metric {best!r} is not a number")
        return saved
    except (OSError, ValueError) as error:
        raise _unreadable(path, error) from None


def _applied(path: Path, apply: Any) -> None:
    """``apply()``, which puts the plain data read from ``path`` into the run; data of another shape than
    Transformers writes (a missing key, a wrong type) is said in one line naming the file."""
    try:
        apply()
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as error:
        raise _unreadable(path, error) from None


def _load(path: Path, numpy_arrays: bool = False) -> Any:
    try:
        if not numpy_arrays:
            return torch.load(path, map_location="cpu", weights_only=True)
        with torch.serialization.safe_globals(_numpy_types()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # (pickle.UnpicklingError: a global that is not plain data)
        raise _unreadable(path, error) from None


def _unreadable(path: Path, error: BaseException) -> CheckpointError:
    first = (str(error).strip().splitlines() or [""])[0]
    return CheckpointError(f"{path.parent} is a checkpoint of Transformers' Trainer whose {path.name} cannot be read "
                           f"as Transformers writes it ({type(error).__name__}: {first}); braeburn reads only plain "
                           "data from it. Resume it with Transformers' Trainer, or start a braeburn run from its "
                           f"weights (from_pretrained({str(path.parent)!r}) builds the model) without "
                           "--resume_from_checkpoint.")


def _regrouped(saved: dict[str, Any], optimizer: Any, model: torch.nn.Module, folder: Path) -> dict[str, Any]:
    """Transformers' optimizer state in this optimizer's parameter groups. Transformers' default optimizer groups
    the parameters it decays (by name) and then the others, always two groups; braeburn's decays by shape, one
    group without weight decay. Each parameter's state (AdamW's moments, its step) moves to that parameter's index
    here; the hyperparameters that the schedule changed (lr, initial_lr) come from the checkpoint."""
    theirs = [p for group in _transformers_groups(model) for p in group]
    ours = [p for group in optimizer.param_groups for p in group["params"]]
    saved_count = sum(len(group["params"]) for group in saved["param_groups"])
    shapes_fit = all(tuple(entry["exp_avg"].shape) == tuple(theirs[int(index)].shape)
                     for index, entry in saved["state"].items() if "exp_avg" in entry and int(index) < len(theirs))
    if saved_count != len(theirs) or len(ours) != len(theirs) or not shapes_fit:
        raise CheckpointError(f"{folder / 'optimizer.pt'} holds {saved_count} parameters in groups other than "
                              "Transformers' default optimizer makes for this model (a custom optimizer?), so braeburn "
                              "cannot place their state: resume it with Transformers' Trainer.")
    position = {id(p): index for index, p in enumerate(ours)}
    first = saved["param_groups"][0]
    keep = ("lr", "initial_lr")
    groups = [{**{k: v for k, v in group.items() if k != "params"}, **{k: first[k] for k in keep if k in first},
               "params": [position[id(p)] for p in group["params"]]} for group in optimizer.param_groups]
    return {"state": {position[id(theirs[int(index)])]: entry for index, entry in saved["state"].items()},
            "param_groups": groups}


def _per_group(saved: dict[str, Any], groups: int, folder: Path) -> dict[str, Any]:
    """The schedule's state with one entry per parameter group here (Transformers' groups share one schedule)."""
    lists = {key: value for key, value in saved.items() if isinstance(value, list)}
    if any(len({repr(item) for item in value}) != 1 for value in lists.values()):
        raise CheckpointError(f"{folder / 'scheduler.pt'} schedules its parameter groups differently, which "
                              "Transformers' default schedule does not: resume it with Transformers' Trainer.")
    return {**saved, **{key: value[:1] * groups for key, value in lists.items()}}


def _transformers_groups(model: torch.nn.Module) -> list[list[torch.nn.Parameter]]:
    """The parameters of Transformers' default optimizer, in its two groups (decayed by name, then the others)."""
    try:
        from transformers import Trainer
    except ImportError:
        raise CheckpointError("reading a Transformers checkpoint's optimizer.pt needs the transformers package "
                              "(its parameter groups are Transformers'): pip install transformers") from None
    decayed = set(Trainer.get_decay_parameter_names(None, model))
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    return [[p for name, p in named if name in decayed], [p for name, p in named if name not in decayed]]


def _numpy_types() -> list[Any]:
    import numpy

    core = getattr(numpy, "_core", None) or numpy.core
    return [core.multiarray._reconstruct, numpy.ndarray, numpy.dtype, type(numpy.dtype(numpy.uint32))]


def _load_weights(model: torch.nn.Module, folder: Path) -> None:
    from safetensors.torch import load_file

    try:
        weights = load_file(str(folder / "model.safetensors"))
    except Exception as error:  # (safetensors' own error type: a file that is not one)
        raise _unreadable(folder / "model.safetensors", error) from None
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {name for name in missing if _shares_memory_with_loaded(model, name, weights)}
    if unexpected or set(missing) - tied:
        names = ", ".join(sorted(unexpected or set(missing) - tied)[:3])
        raise CheckpointError(f"{folder / 'model.safetensors'} does not fit this model (for example {names}): "
                              "resume with the model the checkpoint was trained with.")


def _shares_memory_with_loaded(model: torch.nn.Module, name: str, weights: dict[str, torch.Tensor]) -> bool:
    """A tied weight save_pretrained wrote once, under its other name."""
    state = model.state_dict()
    return any(state[name].data_ptr() == state[other].data_ptr() for other in weights if other in state)


def _set_random_states(saved: dict[str, Any], kind: Any) -> None:
    random.setstate(saved["python"])
    import numpy

    numpy.random.set_state(saved["numpy"])
    torch.random.set_rng_state(saved["cpu"])
    device = saved.get(kind.name)
    if device is not None:  # one process saves its device's one generator; several, a list
        kind.set_rng_state([device] if isinstance(device, torch.Tensor) else device)
