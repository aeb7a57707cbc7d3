"""Accelerate's ``ACCELERATE_*`` variables (set by ``accelerate launch`` and ``accelerate config``), read with
Accelerate 1.15's meaning and precedence by :func:`accelerate_env`; the ones braeburn cannot honour come back as notes
naming the variable and the fix, which the Accelerate-compatible Accelerator says once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...plan.envvars import env_value
from ...plan.rules import COMPILE_MODES


# Accelerate 1.15's Accelerator reads these, and braeburn cannot do what they ask (read only when they ask it).
ACCELERATE_UNSUPPORTED: dict[str, str] = {
    "ACCELERATE_USE_DEEPSPEED": "braeburn has no DeepSpeed; unset it, and pass Accelerator(strategy='fsdp') "
                                "(braeburn launch --strategy fsdp) to shard the model",
    "ACCELERATE_USE_FSDP": "braeburn reads no FSDP_* settings; unset it, and pass Accelerator(strategy='fsdp') "
                           "(braeburn launch --strategy fsdp)",
    "ACCELERATE_USE_MEGATRON_LM": "braeburn has no Megatron-LM; unset it, and pass Accelerator(strategy='fsdp')",
    "ACCELERATE_USE_PARALLELISM_CONFIG": "braeburn has no tensor/context parallelism; unset it, and pass "
                                         "Accelerator(strategy='ddp' or 'fsdp')",
    "ACCELERATE_USE_SAGEMAKER": "braeburn does not launch on SageMaker; unset it and use braeburn launch",
    "ACCELERATE_CPU_AFFINITY": "braeburn does not pin processes to CPU cores; unset it, and use taskset or numactl",
    "ACCELERATE_DEBUG_MODE": "braeburn does not check collective shapes across processes; unset it",
}
_VALUED_UNSUPPORTED = {  # these ask for something by being set at all
    "ACCELERATE_TORCH_DEVICE": "braeburn chooses the device itself; unset it, and pass Accelerator(accelerator=...) "
                               "or set BRAEBURN_DEVICE",
}
_PRECISIONS = ("no", "fp16", "bf16")


TRUE_WORDS = ("1", "true", "yes", "y", "t", "on")  # Accelerate's str_to_bool: these are True,
TRUTH_WORDS = TRUE_WORDS + ("0", "false", "no", "n", "f", "off")  # these and the false ones its only words


def _flag(value: str) -> bool:
    return value.strip().lower() in TRUE_WORDS


@dataclass
class AccelerateEnv:
    """What the ACCELERATE_* variables ask of an Accelerator, in braeburn's option names (None: not asked)."""

    cpu: bool = False
    mixed_precision: str | None = None
    gradient_accumulation_steps: int | None = None
    compile: bool | str | None = None  # True, or "regional" (ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION)
    regional_compilation: bool = False  # ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION, whatever the backend (it also
    # applies to Accelerator(dynamo_backend="inductor"), whose TorchDynamoPlugin reads it)
    compile_mode: str | None = None
    dynamo_mode: str = "default"  # TorchDynamoPlugin's mode, fullgraph and dynamic, as Accelerate reads them
    fullgraph: bool = False
    dynamic: bool | None = None
    notes: list[str] = field(default_factory=list)
    dynamo_refusals: list[tuple[str, str, str]] = field(default_factory=list)  # (variable, value, why and fix),
    dynamo_notes: list[str] = field(default_factory=list)  # both only when braeburn compiles as Accelerate asks


def accelerate_env(env: Mapping[str, str] | None = None) -> AccelerateEnv:
    """Read the ACCELERATE_* variables that Accelerate 1.15's Accelerator reads. Their precedence is the
    caller's, as Accelerate's: ACCELERATE_USE_CPU forces the CPU, ACCELERATE_MIXED_PRECISION fills an unset
    mixed_precision, ACCELERATE_GRADIENT_ACCUMULATION_STEPS replaces the argument (unless a plugin is given)."""
    env = os.environ if env is None else env
    found = AccelerateEnv(cpu=_flag(env.get("ACCELERATE_USE_CPU", "")))
    precision = env_value("ACCELERATE_MIXED_PRECISION", env)
    if precision is not None and precision.lower() in _PRECISIONS:
        found.mixed_precision = precision.lower()
    elif precision is not None:
        found.notes.append(f"ACCELERATE_MIXED_PRECISION={precision} is not supported by braeburn and is ignored; set "
                           f"it to one of {', '.join(_PRECISIONS)}, or unset it and pass Accelerator(mixed_precision=...)")
    steps = env_value("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", env)
    if steps is not None:
        try:
            found.gradient_accumulation_steps = int(steps)
        except ValueError:
            found.notes.append(f"ACCELERATE_GRADIENT_ACCUMULATION_STEPS={steps} is not a whole number and is ignored; "
                               "set it to one (e.g. 4), or unset it")
    _read_dynamo(env, found)
    for name, fix in ACCELERATE_UNSUPPORTED.items():
        if _flag(env.get(name, "")):
            found.notes.append(f"{name}={env[name]} is not supported by braeburn and is ignored: {fix}")
    for name, fix in _VALUED_UNSUPPORTED.items():
        if env_value(name, env) is not None:
            found.notes.append(f"{name}={env[name]} is not supported by braeburn and is ignored: {fix}")
    return found


def _read_dynamo(env: Mapping[str, str], found: AccelerateEnv) -> None:
    """ACCELERATE_DYNAMO_BACKEND/MODE/USE_REGIONAL_COMPILATION (TorchDynamoPlugin's): inductor is braeburn's
    compile=True, or compile="regional" with regional compilation (which, as in Accelerate, asks nothing without
    a backend)."""
    backend = (env_value("ACCELERATE_DYNAMO_BACKEND", env) or "no").lower()
    regional = env_value("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", env)
    found.regional_compilation = regional is not None and _flag(regional)
    if regional is not None and regional.lower() not in TRUTH_WORDS:  # Accelerate's str_to_bool raises here
        found.notes.append(f"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION={regional} is not true or false and is "
                           "ignored (Accelerate stops with 'invalid truth value'); set it to True or False")
    if backend == "inductor":
        found.compile = "regional" if found.regional_compilation else True
    elif backend != "no":
        found.notes.append(f"ACCELERATE_DYNAMO_BACKEND={env['ACCELERATE_DYNAMO_BACKEND']} is not supported by "
                           "braeburn and is ignored: braeburn compiles with inductor only; set it to inductor or no")
    _read_dynamo_options(env, found)


def _read_dynamo_options(env: Mapping[str, str], found: AccelerateEnv) -> None:
    """ACCELERATE_DYNAMO_MODE/USE_FULLGRAPH/USE_DYNAMIC, which TorchDynamoPlugin reads whatever the backend: the
    mode is braeburn's compile_mode; a fullgraph or dynamic braeburn cannot honour is refused where it compiles
    (`accelerate launch` sets USE_FULLGRAPH=False and USE_DYNAMIC=False by default)."""
    mode = env_value("ACCELERATE_DYNAMO_MODE", env) or "default"
    found.dynamo_mode = mode
    found.compile_mode = None if mode == "default" else mode
    if mode not in COMPILE_MODES:
        found.dynamo_refusals.append(("ACCELERATE_DYNAMO_MODE", mode, "is not a torch.compile mode; set it to one "
                                      f"of {', '.join(COMPILE_MODES[1:])}, or unset it"))
    fullgraph = _truth_value("ACCELERATE_DYNAMO_USE_FULLGRAPH", env, found)
    found.fullgraph = fullgraph is not None and _flag(fullgraph)
    if found.fullgraph:
        found.dynamo_refusals.append(("ACCELERATE_DYNAMO_USE_FULLGRAPH", fullgraph, "braeburn compiles with graph "
                                      "breaks allowed (fullgraph=False) and cannot promise one graph; set it to "
                                      "False or unset it"))
    dynamic = _truth_value("ACCELERATE_DYNAMO_USE_DYNAMIC", env, found)
    found.dynamic = None if dynamic is None else _flag(dynamic)
    if found.dynamic:
        found.dynamo_refusals.append(("ACCELERATE_DYNAMO_USE_DYNAMIC", dynamic, "braeburn lets torch.compile choose "
                                      "dynamic shapes (dynamic=None: static first, dynamic once a shape changes) "
                                      "and cannot compile dynamic from the start; unset it"))
    elif dynamic is not None:
        found.dynamo_notes.append(f"ACCELERATE_DYNAMO_USE_DYNAMIC={dynamic}: braeburn lets torch.compile choose "
                                  "dynamic shapes (dynamic=None), where Accelerate passes dynamic=False; the results "
                                  "are the same, but a changed shape compiles one dynamic graph instead of another "
                                  "static one; `accelerate launch` always sets it: launch with `braeburn launch` "
                                  "(which does not) or unset it to silence this")


def _truth_value(name: str, env: Mapping[str, str], found: AccelerateEnv) -> str | None:
    """Variable ``name`` where it is one of str_to_bool's words; another word is refused where braeburn compiles
    (Accelerate's TorchDynamoPlugin stops at it with 'invalid truth value'), and reads as unset."""
    value = env_value(name, env)
    if value is None or value.lower() in TRUTH_WORDS:
        return value
    found.dynamo_refusals.append((name, value, "is not true or false (Accelerate's TorchDynamoPlugin stops with "
                                  "'invalid truth value'); set it to True or False, or unset it"))
    return None


__all__ = ["ACCELERATE_UNSUPPORTED", "AccelerateEnv", "accelerate_env"]
