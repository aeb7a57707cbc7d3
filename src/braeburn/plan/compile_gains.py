"""What compiling is expected to gain and to cost for one model, before this run has measured it.

``compile="auto"`` weighs the eager time still ahead times the share compiling saves against what
compiling costs. Both numbers depend on the model and the machine, so they come from the best
source at hand:

1. **This machine's own record** of an earlier compiled run of the same model, batch size, precision,
   device and torch: the step times it measured eager and compiled, and how long compiling took.
   Records live in one small JSON file next to torch's compile caches (``TORCHINDUCTOR_CACHE_DIR``,
   by default ``<tmp>/torchinductor_<user>``), so they go when those caches go. A record means those
   caches hold this model's kernels, so the expected cost is the last compile seen with warm caches,
   or the first one times the warm/cold ratio measured for its family.
2. **A table per model family**, measured on an H100 in bf16 by ``benchmarks/compile_gains.py``
   (``benchmarks/results/h100-compile-gains/gains.json``; a test keeps the two equal).
3. **A default** for other models: a third of the step time saved, 45 s to compile.

The less is known, the larger the margin asked of the saving (:attr:`CompileEstimate.payback`).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORDS_FILE = "braeburn-compile-records.json"
RECORDS_VAR = "BRAEBURN_COMPILE_RECORDS"
MAX_RECORDS = 200


@dataclass(frozen=True)
class FamilyGain:
    gain: float  # the share of the eager step time a compiled step saves
    cold_seconds: float  # the first compiled step, torch's caches empty
    warm_seconds: float  # the same in a second process, torch's caches kept on disk
    measured_on: str = "an H100"  # where, in the words the Trainer prints


# GPT-2's whole and regional rows: the long GPT-2 recipe through braeburn's Trainer on an H200, bf16, torch 2.11,
# cold caches (benchmarks/compile_lengths.py; benchmarks/results/device-2026-11-26-s5/gpu1/out/lengths/
# compile_lengths.json): 42.4 ms/step eager, 24.0 whole after 23.6 s of compiling, 33.1 by regions after 10.4 s;
# the warm compiles from benchmarks/regional_compile.py on an H200 (benchmarks/results/h200-issue44/compile/regional/
# regional.json: 4.3 s whole, 3.9 s by regions). The H100 bare loop's 52.2 s cold compile made compile="auto" keep
# the 3,000-step recipe eager on the H200, where compiling whole was the fastest (115 s to step 3,000 against 140).
GPT2_H200 = "an H200, through the Trainer"
FAMILY_GAINS: dict[str, FamilyGain] = {
    # benchmarks/compile_gains.py on an H100, bf16, torch 2.11 (benchmarks/results/h100-compile-gains/gains.json),
    # GPT-2 as above; tests/plan/test_compile_gains.py fails when they differ.
    "gpt2": FamilyGain(gain=0.43, cold_seconds=23.6, warm_seconds=4.3, measured_on=GPT2_H200),  # batch 8 x 1,024
    "bert": FamilyGain(gain=0.32, cold_seconds=48.6, warm_seconds=5.5),  # BERT-base, batch 32 x 128
    "llama": FamilyGain(gain=0.56, cold_seconds=46.5, warm_seconds=7.0),  # 12 layers x 768, batch 8 x 1,024
}
REGIONAL_GAINS: dict[str, FamilyGain] = {
    # Regional compilation (braeburn.accelerator.compile.compile_regions: each repeated block, and the loss, as
    # regions), GPT-2 as above; tests/plan/test_compile_choice.py fails when the two differ.
    "gpt2": FamilyGain(gain=0.22, cold_seconds=10.4, warm_seconds=3.9, measured_on=GPT2_H200),
}
DEFAULT_GAIN = FamilyGain(gain=0.3, cold_seconds=45.0, warm_seconds=45.0)
PAYBACK = {"record": 1.25, "family": 1.5, "default": 2.0}
"""The saving must be this many times the compile cost: more margin where less is known about this model."""


@dataclass(frozen=True)
class CompileEstimate:
    gain: float
    compile_seconds: float
    source: str  # "record", "family" or "default"
    words: str  # where the numbers come from, for the decision line
    regional: "CompileEstimate | None" = None  # the same for regional compilation, where it was measured

    @property
    def payback(self) -> float:
        return PAYBACK[self.source]


def family_of(model: Any) -> str:
    """A Transformers model's ``config.model_type`` ("gpt2", "bert"); else the class name, lower case."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return str(model_type) if model_type else type(model).__name__.lower()


def model_key(model: Any, *, device: str, precision: str, batch_size: int | None, torch_version: str) -> str:
    """What makes two runs' compiles alike: the model's class and size, the batch size, precision, device, torch."""
    parameters = sum(p.numel() for p in model.parameters())
    return (f"{type(model).__module__}.{type(model).__qualname__}|{parameters}|batch {batch_size}|{precision}|"
            f"{device}|torch {torch_version}")


def estimate(model: Any, key: str, records: dict[str, dict]) -> CompileEstimate:
    """The expected gain and compile cost for ``model``: this machine's record, else its family's, else the default."""
    family = family_of(model)
    known = FAMILY_GAINS.get(family)
    record = records.get(key)
    if record:
        gain = max(0.0, 1.0 - record["compiled_step_seconds"] / record["eager_step_seconds"])
        warm = record.get("warm_compile_seconds")
        if warm is None:
            ratio = (known or DEFAULT_GAIN).warm_seconds / (known or DEFAULT_GAIN).cold_seconds
            warm = record["compile_seconds"] * ratio
        return CompileEstimate(gain, warm, "record", (
            f"compiled here before: {record['eager_step_seconds'] * 1000:.1f} -> "
            f"{record['compiled_step_seconds'] * 1000:.1f} ms/step ({gain:.0%} saved); "
            f"compiling costs about {warm:.0f} s with torch's caches warm "
            f"({record['compile_seconds']:.0f} s the first time)"))
    if known:
        return CompileEstimate(known.gain, known.cold_seconds, "family", (
            f"{family} models save about {known.gain:.0%} compiled and take about {known.cold_seconds:.0f} s "
            f"to compile (measured on {known.measured_on})"), regional_estimate(family))
    return CompileEstimate(DEFAULT_GAIN.gain, DEFAULT_GAIN.cold_seconds, "default", (
        f"a {family} model: assuming {DEFAULT_GAIN.gain:.0%} saved and about {DEFAULT_GAIN.cold_seconds:.0f} s "
        "to compile"))


def regional_estimate(family: str) -> CompileEstimate | None:
    """Regional compilation's expected gain and cold cost for ``family``, where it was measured; else None (the rule
    then weighs only eager against whole-model compiling)."""
    regional = REGIONAL_GAINS.get(family)
    if regional is None:
        return None
    return CompileEstimate(regional.gain, regional.cold_seconds, "family", (
        f"compiled by regions ({family}'s blocks and loss), about {regional.gain:.0%} saved and "
        f"{regional.cold_seconds:.0f} s to compile (measured on {regional.measured_on})"))


# -- this machine's records --------------------------------------------------------------------------
def records_path() -> Path:
    """The records file, in torch's compile cache folder (the folder torch.compile itself writes to);
    ``BRAEBURN_COMPILE_RECORDS`` names another file."""
    if os.environ.get(RECORDS_VAR):
        return Path(os.environ[RECORDS_VAR]).expanduser().absolute()
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not folder:
        try:
            user = getpass.getuser()
        except (KeyError, ModuleNotFoundError, OSError):
            user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
        folder = os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    return Path(folder).absolute() / RECORDS_FILE


def read_records(path: Path | None = None) -> dict[str, dict]:
    """The records kept on this machine; none when the file is missing, unreadable or not braeburn's."""
    path = path or records_path()
    try:
        if path.is_symlink() or path.stat().st_size > 1 << 20:
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    records = data.get("records") if isinstance(data, dict) else None
    return {k: v for k, v in records.items() if _valid(v)} if isinstance(records, dict) else {}


def _valid(record: Any) -> bool:
    numbers = ("eager_step_seconds", "compiled_step_seconds", "compile_seconds")
    return isinstance(record, dict) and all(isinstance(record.get(n), (int, float)) and record[n] > 0
                                            for n in numbers)


def remember(key: str, *, eager_step_seconds: float, compiled_step_seconds: float, compile_seconds: float,
             path: Path | None = None) -> None:
    """Keep what this run measured: a first compile is the cold cost, a later one (caches warm) the warm cost.
    Written atomically next to torch's caches; a failure to write only loses the record."""
    path = path or records_path()
    records = read_records(path)
    previous = records.pop(key, None)
    record = {"eager_step_seconds": eager_step_seconds, "compiled_step_seconds": compiled_step_seconds,
              "compile_seconds": compile_seconds, "runs": 1}
    if previous:
        record.update(compile_seconds=previous["compile_seconds"], warm_compile_seconds=compile_seconds,
                      runs=int(previous.get("runs", 1)) + 1)
    records[key] = record
    while len(records) > MAX_RECORDS:
        records.pop(next(iter(records)))
    partial, created = path.with_name(f".{path.name}.{os.getpid()}.tmp"), False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a new file of our own (never through a link planted under that name), then one rename
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        created = True
        with os.fdopen(descriptor, "w") as file:
            json.dump({"records": records}, file, indent=1)
        os.replace(partial, path)
    except OSError:  # a read-only or full disk: the record is lost, the run is not
        if created:
            partial.unlink(missing_ok=True)


__all__ = ["CompileEstimate", "FAMILY_GAINS", "FamilyGain", "REGIONAL_GAINS", "regional_estimate", "estimate", "family_of", "model_key", "read_records",
           "records_path", "remember"]
