"""Training state on disk: atomic directory writes and the RNG states of every generator in use.

Model weights are written as safetensors (``model.safetensors``: what ``from_pretrained`` and the
safetensors package read, and no pickle); everything else with ``torch.save`` in a form
``torch.load(weights_only=True)`` accepts (tensors, numbers, strings, lists, tuples, dicts): nothing is
unpickled as code on load.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import pickle
import random
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from . import no_follow, ownership, safetensors_file
from ..devices.base import DeviceKind
from .host_copy import host_copy
from ..warn import warn


# -- random number generators -------------------------------------------------------------------
def _numpy_random():
    try:
        import numpy
    except ImportError:  # numpy is optional
        return None
    return numpy.random


def rng_state(kind: DeviceKind) -> dict[str, Any]:
    """The state of python's ``random``, numpy's global generator, torch's CPU one and ``kind``'s own."""
    state: dict[str, Any] = {"python": random.getstate(), "torch_cpu": torch.get_rng_state()}
    np_random = _numpy_random()
    if np_random is not None:
        name, keys, pos, has_gauss, cached = np_random.get_state(legacy=True)
        # numpy arrays are not weights_only-safe; a tensor of the uint32 keys is.
        state["numpy"] = (name, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(cached))
    device_state = kind.rng_state()
    if device_state is not None:
        state["device"] = {"kind": kind.name, "state": device_state}
    return state


def set_rng_state(state: dict[str, Any], kind: DeviceKind) -> None:
    """Restore what :func:`rng_state` returned."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch_cpu"])
    np_random = _numpy_random()
    if np_random is not None and "numpy" in state:
        import numpy

        name, keys, pos, has_gauss, cached = state["numpy"]
        np_random.set_state((name, keys.numpy().astype(numpy.uint32), pos, has_gauss, cached))
    device = state.get("device")
    if device is not None and device["kind"] == kind.name:
        kind.set_rng_state(device["state"])


def seed_everything(seed: int, kind: DeviceKind) -> None:
    """Seed python, numpy, torch (CPU) and ``kind``'s generators."""
    random.seed(seed)
    np_random = _numpy_random()
    if np_random is not None:
        np_random.seed(seed % 2**32)
    torch.manual_seed(seed)
    kind.manual_seed(seed)


# -- full determinism ---------------------------------------------------------------------------
# Inductor (torch.compile) skips its on-device benchmarking where the choice changes numerics. Read
# when torch.compile first loads its configuration; torch versions without the setting ignore it.
INDUCTOR_DETERMINISTIC_VAR = "TORCHINDUCTOR_DETERMINISTIC"


def enable_full_determinism(kinds: list[DeviceKind] | None = None) -> str | None:
    """Deterministic algorithms everywhere, as the Transformers Trainer's ``full_determinism`` does.

    Sets each device kind's variables (CUBLAS_WORKSPACE_CONFIG on CUDA) where the user set none,
    ``torch.use_deterministic_algorithms(True)`` (an operator without a deterministic version then
    raises, naming itself) and the kinds' own library switches (cuDNN). Seeding is the caller's.
    Warns (and returns the warning) when a variable came too late: the kind already ran work
    in this process, so a library may have read the old value.
    """
    from ..devices.registry import KINDS

    late = []
    for kind in KINDS if kinds is None else kinds:
        for name, value in {**kind.deterministic_env(), INDUCTOR_DETERMINISTIC_VAR: "1"}.items():
            if name not in os.environ:
                os.environ[name] = value
                if kind.libraries_started() and name != INDUCTOR_DETERMINISTIC_VAR:
                    late.append(f"{name}={value}")
        kind.use_deterministic_libraries()
    torch.use_deterministic_algorithms(True)
    if not late:
        return None
    message = (f"full_determinism: {', '.join(late)} was set after the GPU had run work in this process; a "
               "library that already ran keeps its earlier setting, so results may still differ between runs. "
               f"Export {' '.join(late)} before starting Python, or create the Trainer before any GPU work.")
    warn(message, stacklevel=3)
    return message


# -- atomic directory writes --------------------------------------------------------------------
def staging_dir(output_dir: str | os.PathLike) -> Path:
    """Where a state directory is written before it is renamed into place (same filesystem)."""
    target = Path(output_dir)
    return target.parent / f".{target.name}.partial"


@contextlib.contextmanager
def atomic_directory(output_dir: str | os.PathLike, *, owner: bool = True) -> Iterator[Path]:
    """Yield a staging directory beside ``output_dir``; on success it replaces ``output_dir``.

    Readers see the old directory or the new one, never half of one: a crash leaves only the staging
    directory behind (cleared by the next save). With several processes, every process writes into the
    staging directory and only the ``owner`` renames it (call :func:`prepare_staging` / :func:`publish`
    with a barrier between them instead of this context manager).
    """
    staging = prepare_staging(output_dir) if owner else staging_dir(output_dir)
    yield staging
    if owner:
        publish(output_dir)


def prepare_staging(output_dir: str | os.PathLike) -> Path:
    staging = staging_dir(output_dir)
    no_follow.remove_tree(staging)  # left by a save that crashed (a link there: the link only)
    staging.mkdir(parents=True)
    return staging


def old_dir(output_dir: str | os.PathLike) -> Path:
    """Where :func:`publish` keeps the previous state while the new one is renamed into place."""
    target = Path(output_dir)
    return target.parent / f".{target.name}.old"


fsync_dir = no_follow.fsync_dir  # (one definition, below both this module and ownership)


def check_replaceable(output_dir: str | os.PathLike) -> None:
    """:func:`publish` replaces ``output_dir`` whole: refuse (one line, before anything is written) unless it is
    missing, an empty folder, or a state braeburn saved (its manifest vouches for every file in it)."""
    target = Path(output_dir)
    if not (target.exists() or target.is_symlink()) or (target.is_dir() and not target.is_symlink()
                                                        and not any(target.iterdir())):
        return
    if ownership.saved_state(target):  # a state braeburn saved, and save_state() was asked for this very folder
        return
    why = ownership.why_not(target.parent, target.name)
    if why is None and target.is_dir():
        return
    raise ownership.refusal(target, why or "it is a file", "save_state() replaces that folder whole with the new "
                            "state", fix=f"Pass save_state() another folder, or move {target.name} away")


def publish(output_dir: str | os.PathLike) -> Path:
    """Move the staged directory into place, replacing an older one; a complete state is always visible.

    The old state is renamed to ``.<name>.old`` before the new one takes its name, and deleted only
    after: a kill between the two renames leaves ``.<name>.old`` complete, and :func:`readable_dir`
    falls back to it. Every rename is fsynced in the parent directory.
    """
    target, staging, old = Path(output_dir), staging_dir(output_dir), old_dir(output_dir)
    for path in staging.rglob("*"):  # data on disk before the rename that makes it visible
        if path.is_file():  # (sharded checkpoints hold a folder of files)
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    if target.exists():  # the target is complete, so an older copy is not needed
        no_follow.remove_tree(old)
        os.replace(target, old)
        fsync_dir(target.parent)
    # (no target but an old one: a kill came between the renames last time; the old one is the good copy)
    os.replace(staging, target)
    fsync_dir(target.parent)
    if old.exists() or old.is_symlink():
        no_follow.remove_tree(old)  # (a state folder that was a link: the link only, never its target)
        fsync_dir(target.parent)
    return target


def readable_dir(input_dir: str | os.PathLike) -> Path:
    """``input_dir``, or the previous state kept beside it when a save was killed between its renames."""
    target, old = Path(input_dir), old_dir(input_dir)
    if not target.exists() and old.is_dir():
        print(f"braeburn: {target} is missing: a save_state() was stopped while replacing it. Loading the previous "
              f"state, kept in {old}, instead.", flush=True)
        return old
    return target


_captured: dict[str, bytes] | None = None


@contextlib.contextmanager
def capture_writes() -> Iterator[dict[str, bytes]]:
    """While active, :func:`save_file` and :func:`save_model_state` keep the bytes they would write in the yielded
    dict (name -> bytes) instead of writing them: a snapshot of the state at this moment. The bytes are those
    written by the same code (into a temporary folder, then read back)."""
    global _captured
    previous, _captured = _captured, {}
    try:
        yield _captured
    finally:
        _captured = previous


class DeferredWrite(NamedTuple):
    """A file of a snapshot taken by :func:`defer_writes`: how to write it (given the new file's path), and the
    host memory it holds."""

    write: Callable[[Path], None]
    nbytes: int


_deferred: dict[str, DeferredWrite] | None = None


@contextlib.contextmanager
def defer_writes() -> Iterator[dict[str, DeferredWrite]]:
    """While active, :func:`save_file` and :func:`save_model_state` copy what they would write to host memory now
    (the state of this moment) and keep, in the yielded dict, how to write it later: a snapshot whose serialising
    runs in another thread (trainer/background_save.py). The files then written are those a save at this moment
    writes; torch.save records the copies' location, the CPU, which is where braeburn loads them."""
    global _deferred
    previous, _deferred = _deferred, {}
    try:
        yield _deferred
    finally:
        _deferred = previous


def _write(directory: Path, name: str, obj: Any, write: Callable[[Any, Path], None]) -> None:
    """``write(obj, path)`` makes the file ``directory/name``; under :func:`defer_writes` a host copy of ``obj`` is
    kept to be written later, under :func:`capture_writes` the bytes are kept instead of written."""
    if _deferred is not None:
        copied, nbytes = host_copy(obj)
        _deferred[name] = DeferredWrite(lambda path: write(copied, path), nbytes)
        return
    if _captured is not None:
        with tempfile.TemporaryDirectory(prefix="braeburn-capture-") as folder:
            write(obj, Path(folder) / name)  # copies device tensors to the host now: the snapshot is of this moment
            _captured[name] = (Path(folder) / name).read_bytes()
        return
    write(obj, Path(directory) / name)


def _torch_save(obj: Any, path: Path) -> None:
    with no_follow.create_new(path) as handle:  # a full disk then raises OSError with its errno, not a torch enforce
        torch.save(obj, handle)


def save_file(obj: Any, directory: Path, name: str) -> None:
    _write(directory, name, obj, _torch_save)


def load_file(directory: str | os.PathLike, name: str, map_location: Any = "cpu") -> Any:
    path = Path(directory) / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: load_state() expects a directory written by save_state() "
                                "with the same prepared objects (same number of models, optimizers, "
                                "schedulers and dataloaders)")
    safetensors_file.require_regular_file(path)  # (torch.load of a named pipe would wait forever)
    try:
        with warnings.catch_warnings():  # torch's "Detected pickle protocol N" advice is about its loader, not the user
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:  # weights_only refused an object: loading it could run code
        from ..errors import UnsafeFileError

        found = _weights_only_refusal(error)
        what = (f"is a pickle torch's safe loader cannot read ({found}: written by pickle, not torch.save)"
                if found.startswith("Unsupported operand") else
                f"holds pickled objects other than tensors and plain data ({found})")
        raise UnsafeFileError(
            f"{path} {what}, which braeburn refuses to load: unpickling it could run arbitrary code. A file written "
            "by save_state() never does. Delete this checkpoint, or resume from one you wrote yourself.") from None


_TORCH_ADVICE = ("Weights only load failed", "(1)", "(2)", "Check the documentation", "This file can still be loaded")


def _weights_only_refusal(error: BaseException) -> str:
    """What torch's weights_only loader refused, from its many-line error: "Unsupported global: GLOBAL exec ...",
    "Trying to load unsupported GLOBAL posix.system ...", "Unsupported operand 149"; never its advice to load
    with weights_only=False or to file an issue."""
    for line in str(error).splitlines():
        line = line.strip()
        if "WeightsUnpickler error:" in line:
            line = line.split("WeightsUnpickler error:", 1)[1].strip()
        elif line.startswith(_TORCH_ADVICE):
            continue
        if line:
            return line.split(". ")[0].rstrip(".")
    return type(error).__name__


# -- model weights --------------------------------------------------------------------------------
ALIASES = "braeburn_aliases"  # metadata of files written before the package wrote them: {name dropped: name kept}


def model_file(index: int) -> str:
    """Accelerate's names: ``model.safetensors`` (what ``from_pretrained`` reads) for the first model."""
    return "model.safetensors" if index == 0 else f"model_{index}.safetensors"


@dataclass(frozen=True)
class StateNames:
    """The file names save_state() gives the optimizers', schedulers' and registered objects' states (their contents
    are the same under either naming: ``torch.save`` of the state dict). braeburn's own Accelerator writes
    ``optimizer_0.pt``; ``braeburn.Accelerator`` writes Accelerate's ``optimizer.bin``, ``optimizer_1.bin``, ... and
    reads either."""

    first_plain: bool  # Accelerate's: the first file has no index (optimizer.bin, then optimizer_1.bin)
    suffix: str
    custom_suffix: str

    def name(self, kind: str, index: int) -> str:
        """``kind``: "optimizer", "scheduler" or "custom_checkpoint"."""
        suffix = self.custom_suffix if kind == "custom_checkpoint" else self.suffix
        plain = self.first_plain and index == 0 and kind != "custom_checkpoint"
        return f"{kind}{suffix}" if plain else f"{kind}_{index}{suffix}"


BRAEBURN_NAMES = StateNames(first_plain=False, suffix=".pt", custom_suffix=".pt")
ACCELERATE_NAMES = StateNames(first_plain=True, suffix=".bin", custom_suffix=".pkl")
TRANSFORMERS_NAMES = StateNames(first_plain=True, suffix=".pt", custom_suffix=".pt")  # optimizer.pt, scheduler.pt
NAMINGS = (BRAEBURN_NAMES, ACCELERATE_NAMES, TRANSFORMERS_NAMES)


def state_file(directory: str | os.PathLike, names: StateNames, kind: str, index: int) -> str:
    """The name of ``kind``'s ``index``-th file in ``directory``: ``names``' own, else another naming's where only
    that one exists (a checkpoint written by another Accelerator class, or by braeburn's Transformers Trainer)."""
    name = names.name(kind, index)
    if os.path.lexists(Path(directory) / name):
        return name
    others = [other.name(kind, index) for other in NAMINGS if other is not names]
    return next((other for other in others if os.path.lexists(Path(directory) / other)), name)


def model_pickle(index: int) -> str:
    """The torch.save file of a model's weights: every earlier checkpoint, and now only a state dict
    that safetensors cannot hold (a non-tensor extra state, a sparse or quantized tensor)."""
    return f"model_{index}.pt"


def tied_groups(state: dict[str, Any]) -> list[list[str]]:
    """The names of each tensor held under several names (tied weights: the same memory, offset, shape, strides and
    dtype), in the state dict's order."""
    groups: dict[tuple, list[str]] = {}
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            view = (*_storage_of(tensor), tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()),
                    tensor.dtype)
            groups.setdefault(view, []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def declared_ties(model: Any) -> list[str]:
    """The names a model declares as tied copies of another weight, as Transformers' ``save_pretrained`` collects
    them: the ``_tied_weights_keys`` of each of its modules (a ``{copy: source}`` dict in Transformers 5, a list in 4),
    prefixed by the module's name; each a regular expression. Read by duck typing (no Transformers import): empty for
    any model that declares none."""
    named_modules = getattr(model, "named_modules", None)
    if not callable(named_modules):
        return []
    patterns = []
    for prefix, module in named_modules():
        declared = getattr(module, "_tied_weights_keys", None) or ()
        names = declared.keys() if isinstance(declared, dict) else declared
        patterns += [f"{prefix}.{name}" if prefix else name for name in names if isinstance(name, str)]
    return patterns


def _declared(name: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        try:
            if re.search(pattern, name):
                return True
        except re.error:  # (not a regular expression: the name itself)
            if pattern == name:
                return True
    return False


def _kept_name(names: list[str], patterns: list[str]) -> str:
    """The name of a tied group that is written, as Transformers' ``save_pretrained`` chooses it: the names the
    model declares as tied copies are dropped (all of them but the last in sorted order, when it declares every
    name); of the others, the first in the state dict's order (a model that declares nothing: its first name)."""
    declared = [name for name in sorted(names) if _declared(name, patterns)]
    dropped = set(declared if len(declared) < len(names) else declared[:-1])
    return next(name for name in names if name not in dropped)


def tied_names(state: dict[str, Any], model: Any = None) -> dict[str, str]:
    """{name dropped: name kept} for each tensor held under several names (tied weights). The name kept is the one
    Transformers' ``save_pretrained`` keeps for ``model`` (:func:`_kept_name`): for XLM-R, the input embedding
    ``roberta.embeddings.word_embeddings.weight``, not ``lm_head.decoder.weight`` that comes first in its state
    dict, so ``AutoModel.from_pretrained`` of the folder gets the trained embedding. Without a model, or for one
    that declares no ties, the first name in the state dict's order."""
    patterns = declared_ties(model) if model is not None else []
    aliases: dict[str, str] = {}
    for names in tied_groups(state):
        kept = _kept_name(names, patterns)
        aliases.update({name: kept for name in names if name != kept})
    return aliases


def without_shared_memory(state: dict[str, torch.Tensor], model: Any = None) -> dict[str, torch.Tensor]:
    """Each tensor once (safetensors holds no two names for one memory), as Transformers writes tied weights: one
    name of each tied group is kept, the one ``save_pretrained`` keeps for ``model`` (:func:`tied_names`), and
    loading ties the others back (:func:`load_model_state`). A tensor overlapping another without being the same
    view is written as a copy: the resumed model shares its memory again, since loading copies into it."""
    dropped = tied_names(state, model)
    kept = {name: tensor for name, tensor in state.items() if name not in dropped}
    users = collections.Counter(_storage_of(t) for t in kept.values() if t.numel())
    return {n: _own_memory(t, users[_storage_of(t)]) for n, t in kept.items()}


def _own_memory(tensor: torch.Tensor, users: int) -> torch.Tensor:
    """``tensor``, or a copy of it where its memory is another kept tensor's too (the package refuses shared
    memory); an empty one is made afresh (a view of no elements still points into its storage)."""
    if not tensor.numel():
        return tensor.new_empty(tensor.shape)
    return tensor.clone(memory_format=torch.contiguous_format) if users > 1 else tensor


def _storage_of(tensor: torch.Tensor) -> tuple:
    return tensor.device, tensor.untyped_storage().data_ptr()


def save_model_state(state: dict[str, Any], directory: Path, index: int, model: Any = None) -> None:
    """A model's state dict as ``model.safetensors`` (``model_<i>.safetensors``); the torch.save file only
    when safetensors cannot hold it. ``model`` (whose state dict it is) chooses which name of tied weights is written.

    The metadata is ``{"format": "pt"}`` alone, as Transformers writes it: the package orders metadata entries
    at random, so a second entry would make two saves of one state differ in their bytes (and checksums)."""
    if not safetensors_file.can_hold(state):
        save_file(state, directory, model_pickle(index))
        return
    metadata = {"format": "pt"}  # what from_pretrained checks for
    _write(directory, model_file(index), without_shared_memory(state, model),
           lambda kept, path: safetensors_file.write(kept, path, metadata))


def model_source(directory: str | os.PathLike, index: int) -> Path:
    """The file :func:`load_model_state` reads: ``model.safetensors`` (``model_<i>.safetensors``), or the
    ``model_<i>.pt`` of a checkpoint written before."""
    path = Path(directory) / model_file(index)
    pickle_path = Path(directory) / model_pickle(index)
    return pickle_path if not path.exists() and pickle_path.exists() else path


def load_model_state(directory: str | os.PathLike, index: int,
                     model_state: dict[str, Any] | None = None) -> dict[str, Any]:
    """What :func:`save_model_state` wrote, or the ``model_<i>.pt`` of a checkpoint written before it. The tied
    names the file leaves out are filled in from ``model_state`` (the state dict of the model it is loaded into:
    its own ties, whichever of their names the file holds), or from the metadata of a file written before braeburn
    used the package."""
    path = Path(directory) / model_file(index)
    if not path.exists() and (Path(directory) / model_pickle(index)).exists():
        return load_file(directory, model_pickle(index))
    if not path.exists():
        return load_file(directory, model_file(index))  # (its error: the file is missing)
    tensors, metadata = safetensors_file.read(path)
    if ALIASES in metadata:
        aliases = _recorded_aliases(path, metadata[ALIASES], tensors)
    else:
        aliases = {}
        for names in tied_groups(model_state or {}):
            held = next((name for name in names if name in tensors), None)
            aliases.update({name: held for name in names if held is not None and name not in tensors})
    return {**tensors, **{alias: tensors[name] for alias, name in aliases.items()}}


def load_model_into(module: torch.nn.Module, directory: str | os.PathLike, index: int) -> None:
    """:func:`load_model_state` into ``module``; :class:`StateMismatchError` naming the file, in one line, when its
    weights (well formed) are another model's."""
    from ..errors import StateMismatchError, one_line

    weights = load_model_state(directory, index, module.state_dict())
    try:
        module.load_state_dict(weights)
    except RuntimeError as error:
        raise StateMismatchError(
            f"{model_source(directory, index)} does not fit model {index} prepared ({type(module).__name__}): "
            f"{one_line(error)}", "It was saved from another model: prepare that model (in the same order) before "
            "load_state()") from error


def load_optimizer_into(optimizer: Any, directory: str | os.PathLike, index: int,
                        names: StateNames = BRAEBURN_NAMES) -> None:
    """``optimizer_<i>.pt`` (or Accelerate's name: ``names``) into ``optimizer``; :class:`StateMismatchError` naming
    the file when it does not fit."""
    from ..errors import StateMismatchError, one_line

    name = state_file(directory, names, "optimizer", index)
    try:
        optimizer.load_state_dict(load_file(directory, name))
    except (ValueError, KeyError) as error:
        raise StateMismatchError(f"{Path(directory) / name} does not fit optimizer {index} prepared: "
                                 f"{one_line(error)}", "It was saved for another optimizer or model: prepare those "
                                 "(in the same order) before load_state()") from error


def _recorded_aliases(path: Path, text: str, tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """The tied names an earlier braeburn recorded in the file's metadata; MalformedFileError unless each maps a
    name the file does not hold to one it holds, once."""
    from ..errors import MalformedFileError

    try:
        aliases = json.loads(text, object_pairs_hook=safetensors_file.unique_names)
    except (ValueError, RecursionError):
        aliases = None
    if not (isinstance(aliases, dict) and all(isinstance(name, str) and name in tensors and alias not in tensors
                                              for alias, name in aliases.items())):
        raise MalformedFileError(f"{path} names tied weights ({ALIASES} in its metadata) that it does not hold, or "
                                 "names one twice, so it was not loaded. A file written by save_state() never does: "
                                 "delete this checkpoint, or resume from another one.")
    return aliases

__all__ = ["check_replaceable", "rng_state", "set_rng_state", "seed_everything", "atomic_directory", "prepare_staging", "publish",
           "staging_dir", "old_dir", "readable_dir", "fsync_dir", "save_file", "load_file",
           "model_file", "model_pickle", "model_source", "load_model_into", "load_optimizer_into",
           "save_model_state", "load_model_state", "tied_names", "tied_groups", "declared_ties",
           "without_shared_memory"]
