"""Weights on disk as Transformers and Accelerate write them: ``model.safetensors`` (or ``pytorch_model.bin``),
sharded with an index file when larger than ``max_shard_size``; and the ``config.json`` beside them that makes a
checkpoint folder load with ``from_pretrained``."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import torch

from ...checkpoints import no_follow, ownership, safetensors_file
from ...checkpoints.state import without_shared_memory

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(size: int | str) -> int:
    """``"10GB"`` -> 10**10 bytes (an int is bytes already)."""
    if isinstance(size, int):
        return size
    match = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", str(size))
    if not match or match.group(2).upper() not in _UNITS:
        raise ValueError(f"max_shard_size={size!r}: write a size such as '10GB' or '500MB'")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper() or "B"])


def _shards(state: dict[str, torch.Tensor], limit: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    return shards


def save_weights(state: dict[str, Any], save_directory: str | os.PathLike, max_shard_size: int | str = "10GB",
                 safe_serialization: bool = True, model: Any = None) -> list[Path]:
    """Write ``state`` into ``save_directory``; returns the files written. ``model`` (whose state it is) chooses
    which name of tied weights is written, as ``save_pretrained`` would (:func:`braeburn.checkpoints.state.tied_names`)."""
    folder = Path(save_directory)
    if folder.is_file():
        raise ValueError(f"save_directory={str(folder)!r} is a file; pass a folder")
    folder.mkdir(parents=True, exist_ok=True)
    # safetensors holds no two names for one memory: tied names written once (from_pretrained ties them back)
    tensors = without_shared_memory({k: v for k, v in state.items() if isinstance(v, torch.Tensor)}, model)
    shards = _shards(tensors, parse_size(max_shard_size))
    stem, ext = ("model", "safetensors") if safe_serialization else ("pytorch_model", "bin")
    names = ([f"{stem}.{ext}"] if len(shards) == 1
             else [f"{stem}-{i + 1:05d}-of-{len(shards):05d}.{ext}" for i in range(len(shards))])
    for name, shard in zip(names, shards):
        if safe_serialization:  # (a link planted at that name: the link goes, its target stays)
            safetensors_file.write(shard, folder / name, {"format": "pt"})
        else:
            with no_follow.create_new(folder / name) as handle:
                torch.save(shard, handle)
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
                 "weight_map": {k: name for name, shard in zip(names, shards) for k in shard}}
        no_follow.write_atomic(folder / f"{stem}.{ext}.index.json", json.dumps(index, indent=2))
    return [folder / name for name in names]


TRAINING_ARGS = "training_args.bin"
FINAL_MODEL = ("model.safetensors", TRAINING_ARGS)  # what save_model() writes for any model


def training_args_bytes(training_args: Any) -> bytes:
    """``training_args.bin`` as Transformers writes it: ``torch.save`` of the arguments."""
    buffer = io.BytesIO()
    torch.save(training_args, buffer)
    return buffer.getvalue()


def final_model_names(model: Any, processing_class: Any) -> list[str]:
    """The names :func:`save_pretrained_files` writes for ``model`` and ``processing_class`` (before writing)."""
    return [*FINAL_MODEL, *pretrained_config_files(model), *processing_files(processing_class)]


def save_pretrained_files(folder: str | os.PathLike, model: Any, state: dict[str, Any] | None,
                          processing_class: Any, training_args: Any) -> list[str]:
    """What Transformers' ``Trainer.save_model`` writes into ``folder``: ``save_pretrained`` for a model that has it
    (config.json, model.safetensors), else the weights; the processing class's files; ``training_args.bin``.

    Transformers' writers open each name as it is, following a link planted there into a file outside the run.
    So they write into a fresh staging folder inside ``folder``, whose entries then replace braeburn's own of the
    same names by a rename (:func:`braeburn.checkpoints.ownership.staged`); an entry braeburn did not write there (a link, a
    user's file) refuses them all, before anything is moved. Returns the names written."""
    folder = Path(folder)
    with ownership.staged(folder, "save_model() writes the final model under that name",
                          f"Pass save_model() another folder, or move it out of {folder}") as staging:
        if callable(getattr(model, "save_pretrained", None)):
            model.save_pretrained(str(staging), state_dict=state, safe_serialization=True)
        else:
            save_weights(state if state is not None else model.state_dict(), staging, model=model)
        if processing_class is not None and callable(getattr(processing_class, "save_pretrained", None)):
            processing_class.save_pretrained(str(staging))
        with no_follow.create_new(staging / TRAINING_ARGS) as handle:
            handle.write(training_args_bytes(training_args))
        return sorted(p.name for p in staging.iterdir())


def pretrained_config_files(model: Any) -> dict[str, bytes]:
    """``config.json`` (and ``generation_config.json`` for a model that generates) as ``save_pretrained`` writes
    them, for a Transformers model: beside a checkpoint's ``model.safetensors`` they make the folder load with
    ``AutoModel.from_pretrained``. Empty for any other model, and for one with adapters. The live config is not
    changed (save_pretrained sets ``architectures`` and the dtype on it; here a copy gets them)."""
    transformers = sys.modules.get("transformers")  # (a Transformers model has imported it)
    if transformers is None or not isinstance(model, transformers.PreTrainedModel):
        return {}  # a PEFT wrapper too: its state dict is not the base model's, so a config.json would mislead
    if getattr(model, "_hf_peft_config_loaded", False):
        return {}  # adapters added in place: the weights' names are not those from_pretrained expects
    config = copy.deepcopy(model.config)
    config.architectures = [type(model).__name__]
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype):  # Transformers 5 calls it dtype, 4 torch_dtype
        setattr(config, "dtype" if hasattr(config, "dtype") else "torch_dtype", str(dtype).removeprefix("torch."))
    files = {"config.json": config.to_json_string(use_diff=True).encode("utf-8")}
    generation = getattr(model, "generation_config", None)
    can_generate = getattr(model, "can_generate", None)
    if generation is not None and callable(can_generate) and can_generate():
        files["generation_config.json"] = generation.to_json_string(use_diff=True).encode("utf-8")
    return files


def processing_files(processing_class: Any) -> dict[str, bytes]:
    """What ``processing_class.save_pretrained`` writes (a tokenizer's files), as Transformers' Trainer puts them in
    every checkpoint: ``AutoTokenizer.from_pretrained`` and ``pipeline`` then load the folder. Read back from a
    temporary folder (the save takes a folder), so that a background save writes the files of this moment."""
    if not callable(getattr(processing_class, "save_pretrained", None)):
        return {}
    with tempfile.TemporaryDirectory(prefix="braeburn-processing-") as folder:
        processing_class.save_pretrained(folder)
        return {path.relative_to(folder).as_posix(): path.read_bytes()
                for path in sorted(Path(folder).rglob("*")) if path.is_file()}


@contextlib.contextmanager
def transformers_quiet(quiet: bool = True) -> Iterator[None]:
    """Transformers' own output (its load report, its "Loading weights"/"Writing model shards" bars, its info
    and warnings) held back while the block runs, then put back as it was; errors still show. ``quiet=False``
    (``--log_level info`` or ``debug``) changes nothing."""
    transformers = sys.modules.get("transformers")
    if not quiet or transformers is None:
        yield
        return
    logging = transformers.utils.logging
    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()
