"""An ``accelerate config`` file (YAML or JSON, Accelerate 1.15's keys), read as `braeburn launch` settings.

Each key is mapped onto braeburn's setting of the same meaning, accepted where its value changes nothing
on a launch (``main_training_function``, ``same_network``, TPU keys left empty), or refused with why braeburn
cannot honour it, and the fix. Every refusal is reported at once, with those of the flags and the
environment. A key left out means what it means to Accelerate: no mixed precision, no torch.compile.

The value of an unknown key, or of a key that must stay empty (``tpu_env``, ``deepspeed_config``...), is never
shown: such a value may hold a token. A known key's value is shown only where it is one of Accelerate's own
choices for that key (or a number, or true/false); anything else is said by its shape ("a mapping of 2
entries"). ``distributed_type: NO`` runs one process whatever ``num_processes`` says, as ``accelerate launch``
does (its simple launcher starts the script once); YAML 1.1 reads an unquoted ``NO`` as false, which means the
same.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from ...plan.config_files import ConfigFileError, load_json, load_yaml, read_text, shown
from .environment import TRUE_WORDS, TRUTH_WORDS

ACCELERATE_SUFFIXES = (".yaml", ".yml", ".json")  # braeburn's own file is TOML
VALUE_NOT_SHOWN = object()  # a refusal's value, left out of the message (it may hold a secret)

# Accelerate 1.15's distributed_type -> braeburn settings (None: braeburn cannot run it)
_DISTRIBUTED = {"NO": {}, "MULTI_CPU": {"cpu": True, "strategy": "ddp"}, "MULTI_GPU": {"multi_gpu": True},
                "FSDP": {"strategy": "fsdp"}}
_DISTRIBUTED_FIX = ("braeburn runs NO (one process), MULTI_CPU, MULTI_GPU (DDP on NVIDIA GPUs) and FSDP; "
                    "write one of those (FSDP to shard a large model)")
# Accelerate 1.15's own choices for the keys braeburn reads: such a value is shown in a message, any other is not
# (it may be a secret pasted in the wrong place). braeburn.DistributedType holds the same names (a test checks).
ACCELERATE_DISTRIBUTED_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA",
                                "MULTI_XPU", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM", "MULTI_HPU", "MULTI_NEURON")
_LEGAL = {
    "compute_environment": ("LOCAL_MACHINE", "AMAZON_SAGEMAKER"),
    "distributed_type": ACCELERATE_DISTRIBUTED_TYPES,
    "mixed_precision": ("no", "fp16", "bf16", "fp8"),
    "rdzv_backend": ("static", "c10d", "etcd", "etcd-v2"),  # torchrun's
    "dynamo_backend": ("NO", "EAGER", "AOT_EAGER", "INDUCTOR", "AOT_TS_NVFUSER", "NVPRIMS_NVFUSER", "CUDAGRAPHS",
                       "OFI", "FX2TRT", "ONNXRT", "TENSORRT", "AOT_TORCHXLA_TRACE_ONCE", "TORCHXLA_TRACE_ONCE", "TVM",
                       "HPU_BACKEND", "NEURON"),
}
# Keys copied as they are, under the same name, checked by the setting's own parser.
_SAME = ("num_machines", "machine_rank", "main_process_ip", "main_process_port", "gpu_ids")
# Keys that must stay empty (Accelerate's value when the feature is not used): why braeburn cannot honour more.
_EMPTY = {
    "deepspeed_config": "braeburn has no DeepSpeed; use distributed_type: FSDP to shard the model",
    "fsdp_config": "braeburn configures FSDP itself (torch's fully_shard: one unit for a model that fits on a "
                   "device, else one per block); remove it, and for a unit per block (TRANSFORMER_BASED_WRAP) pass "
                   "Accelerator(fsdp_units='block') or --fsdp_units block in a Trainer script",
    "megatron_lm_config": "braeburn has no Megatron-LM; use distributed_type: FSDP",
    "parallelism_config": "braeburn has no tensor or context parallelism; use MULTI_GPU or FSDP",
    "fp8_config": "braeburn has no fp8 training; use mixed_precision: bf16",
    "mpirun_config": "braeburn starts processes with torchrun, not mpirun; remove it",
    "tpu_name": "braeburn does not run on TPUs", "tpu_zone": "braeburn does not run on TPUs",
    "tpu_use_cluster": "braeburn does not run on TPUs", "tpu_use_sudo": "braeburn does not run on TPUs",
    "tpu_vm": "braeburn does not run on TPUs", "tpu_env": "braeburn does not run on TPUs",
    "command_file": "braeburn does not run on TPU pods", "commands": "braeburn does not run on TPU pods",
    "downcast_bf16": "a TPU setting; braeburn does not run on TPUs",
    "debug": "braeburn has no collective-checking debug mode (ACCELERATE_DEBUG_MODE)",
    "enable_cpu_affinity": "braeburn does not pin processes to CPU cores",
}
_EMPTY_SPELLING = {key: f"{key}: false" if key in ("tpu_use_cluster", "tpu_use_sudo", "debug", "enable_cpu_affinity")
                   else f"{key}: 'no'" if key == "downcast_bf16" else f"{key}: {{}}" if key.endswith("_config")
                   else f"{key}: []" if key in ("tpu_vm", "tpu_env", "commands") else f"{key}: null" for key in _EMPTY}
_ACCEPTED = ("main_training_function", "same_network")  # no effect on a script launched by torchrun
_DYNAMO_DEFAULTS = {"dynamo_mode": "default", "dynamo_use_fullgraph": False, "dynamo_use_dynamic": False,
                    "dynamo_use_regional_compilation": False}


def is_accelerate_file(path: Path) -> bool:
    return path.suffix.lower() in ACCELERATE_SUFFIXES


def read_accelerate_file(path: Path) -> Mapping[str, Any]:
    """The file's table (YAML, or JSON by its suffix); ConfigFileError or the parser's error when unreadable."""
    text = read_text(path)
    data = load_json(text) if path.suffix.lower() == ".json" else load_yaml(text)
    if not isinstance(data, Mapping):
        raise ConfigFileError(f"holds {type(data).__name__}, not a table of key: value lines")
    return data


def _is_empty(value: Any) -> bool:
    return value in (None, False, "no", "NO", "", [], {})


# Each key's reader: (value, settings so far) -> None, or (why, fix) when braeburn cannot honour it.
Refusal = tuple[str, str]


def _compute_environment(value: Any, out: dict[str, Any]) -> Refusal | None:
    if isinstance(value, str) and value.upper() == "LOCAL_MACHINE":
        return None
    return ("braeburn launches on the machines it runs on; it does not start SageMaker jobs",
            "write compute_environment: LOCAL_MACHINE and run braeburn launch on each machine")


def _distributed_type(value: Any, out: dict[str, Any]) -> Refusal | None:
    if value is None or value is False:  # an unquoted NO (YAML 1.1: false) runs one process under Accelerate too
        value = "NO"
    if value is True:
        return ("YAML reads an unquoted yes, on or true as true, which names no distributed_type",
                _DISTRIBUTED_FIX + ", in quotes")
    name = value.strip().upper() if isinstance(value, str) else None
    if name not in _DISTRIBUTED:
        known = name in ACCELERATE_DISTRIBUTED_TYPES
        return (f"braeburn cannot run {name}" if known else "is not one of Accelerate's distributed types"), \
            _DISTRIBUTED_FIX
    out.update(_DISTRIBUTED[name])
    out["_one_process"] = name == "NO"
    return None


def _mixed_precision(value: Any, out: dict[str, Any]) -> Refusal | None:
    if value is not None and value is not False and not isinstance(value, str):
        return "is not one of no, fp16 or bf16", "write mixed_precision: bf16 (or fp16, or 'no')"
    text = "no" if value in (None, False) else value.lower()  # YAML reads an unquoted no as false
    if text == "fp8":
        return "braeburn has no fp8 training", "write mixed_precision: bf16 (or fp16, or 'no')"
    out["mixed_precision"] = text  # checked by the setting's parser, with the others
    return None


def _use_cpu(value: Any, out: dict[str, Any]) -> Refusal | None:
    if value:
        out["cpu"] = value
    return None


def _num_processes(value: Any, out: dict[str, Any]) -> Refusal | None:
    if value == -1:  # what `accelerate config` writes for "given on the command line" (SLURM)
        out["_num_processes_from_command_line"] = True
        return None
    out["num_processes"] = value
    return None


def _rdzv_backend(value: Any, out: dict[str, Any]) -> Refusal | None:
    if value is None or value == "static":
        return None
    return ("braeburn's jobs meet with torchrun's static rendezvous at main_process_ip:main_process_port",
            "write rdzv_backend: static")


def _dynamo_config(value: Any, out: dict[str, Any]) -> Refusal | None:
    table = value if isinstance(value, Mapping) else {} if value is None else {"dynamo_backend": value}
    backend = table.get("dynamo_backend", "NO")
    backend = "NO" if backend is None or backend is False else backend.upper() if isinstance(backend, str) \
        else None  # an unquoted NO: false
    table = {k: _truth(v) if str(k).startswith("dynamo_use_") else v for k, v in table.items()}
    regional = table.get("dynamo_use_regional_compilation")  # beside NO it asks nothing, as there
    others = [k for k, v in table.items() if k != "dynamo_backend" and _DYNAMO_DEFAULTS.get(k, object()) != v
              and not (k == "dynamo_use_regional_compilation" and isinstance(regional, bool))]
    if backend not in ("NO", "INDUCTOR") or others:
        keys = f" ({', '.join(map(str, others))} cannot be honoured)" if others else ""
        return ("braeburn compiles with torch.compile's inductor backend and its default options only (or by "
                f"regions: dynamo_use_regional_compilation: true){keys}",
                "write dynamo_backend: INDUCTOR (or NO) and leave the other dynamo_* keys out")
    out["compile"] = "regional" if backend == "INDUCTOR" and regional is True else backend == "INDUCTOR"
    return None


def _truth(value: Any) -> Any:
    """A quoted "true"/"false" (any of str_to_bool's words), or an unquoted 1 or 0, as the bool `accelerate launch`
    makes of it: the launcher passes str(value) on and Accelerate's TorchDynamoPlugin reads it with str_to_bool;
    anything else as is."""
    if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).lower() in TRUTH_WORDS:
        return str(value).lower() in TRUE_WORDS
    return value


_READERS: dict[str, Callable[[Any, dict[str, Any]], Refusal | None]] = {
    "compute_environment": _compute_environment, "distributed_type": _distributed_type,
    "mixed_precision": _mixed_precision, "use_cpu": _use_cpu, "num_processes": _num_processes,
    "rdzv_backend": _rdzv_backend, "dynamo_config": _dynamo_config, "dynamo_backend": _dynamo_config,
}
KNOWN_KEYS = (*_READERS, *_SAME, *_EMPTY, *_ACCEPTED, "fp16")


def settings_from_accelerate(table: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any, str, str]]]:
    """braeburn settings from an Accelerate config table (pure): (values by setting name, refusals as
    (key, value, why, fix)). Values are not yet checked by the settings' parsers."""
    out: dict[str, Any] = {"mixed_precision": "fp16" if table.get("fp16") is True else "no", "compile": False}
    refusals, notes = [], []
    for key, value in table.items():
        refusal = None
        if key == "dynamo_config" and "dynamo_backend" in table:  # Accelerate's file: the top-level key replaces it
            notes.append(
                (key, _shown(key, value), "not used: the file also has a top-level dynamo_backend, which replaces "
                 "dynamo_config, as `accelerate launch` reads this file", "Keep one of the two; Accelerate 1.15 "
                 "writes dynamo_config"))
            continue
        if key in _READERS:
            refusal = _READERS[key](value, out)
        elif key in _SAME:
            if value is not None:
                out[key] = str(value) if key == "gpu_ids" and isinstance(value, int) else value
        elif key in _EMPTY:
            refusal = None if _is_empty(value) else (_EMPTY[key], f"remove {key}, or write {_EMPTY_SPELLING[key]}")
        elif key not in _ACCEPTED and key != "fp16":
            refusal = ("is not a key of Accelerate 1.15's config file (its value is not shown)",
                       "remove it; braeburn reads the keys `accelerate config` writes")
        if refusal is not None:
            refusals.append((key, _shown(key, value), *refusal))
    _one_process(out)
    out["_notes"] = notes + out["_notes"]
    return out, refusals


def _shown(key: str, value: Any) -> Any:
    """A refused key's value as a message may show it: an unknown key's or a key that must stay empty's never;
    a key braeburn reads shows one of Accelerate's own choices, a number or true/false, and the shape of the rest."""
    if key not in _READERS:
        return VALUE_NOT_SHOWN
    return shown(value, _LEGAL.get("dynamo_backend" if key == "dynamo_config" else key, ()))


def _one_process(out: dict[str, Any]) -> None:
    """distributed_type: NO starts the script once, as Accelerate's launcher does, whatever num_processes says:
    out["num_processes"] becomes 1, and out["_notes"] says so where the file asked for more (a --num-processes
    flag still wins, as every flag does). num_processes: -1 still asks for the flag, as in Accelerate."""
    notes = []
    count = out.get("num_processes")
    if out.pop("_one_process", False) and not out.get("_num_processes_from_command_line"):
        if count is not None and count != 1:
            notes.append(("num_processes", shown(count), "not used: distributed_type NO runs one process, as "
                          "`accelerate launch` does with this file", "To run several, write distributed_type: "
                          "MULTI_CPU (with use_cpu: true) or MULTI_GPU, or pass --num-processes N"))
        out["num_processes"] = 1
    out["_notes"] = notes


__all__ = ["ACCELERATE_DISTRIBUTED_TYPES", "ACCELERATE_SUFFIXES", "KNOWN_KEYS", "VALUE_NOT_SHOWN", "is_accelerate_file",
           "read_accelerate_file", "settings_from_accelerate"]
