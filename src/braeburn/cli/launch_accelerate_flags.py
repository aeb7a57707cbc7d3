"""`accelerate launch`'s flags that `braeburn launch` takes with Accelerate's meaning: --num_cpu_threads_per_process
(OMP_NUM_THREADS in every process, set whatever the environment says, as Accelerate's launcher sets it) and
--dynamo_backend (braeburn's --compile: inductor or no; another backend is refused with the fix)."""

from __future__ import annotations

import argparse
from typing import Any

from .launch_config import ConfigError


def add_accelerate_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-cpu-threads-per-process", "--num_cpu_threads_per_process",
                        dest="num_cpu_threads_per_process", type=_threads, default=None, metavar="N",
                        help="Accelerate's flag: OMP_NUM_THREADS=N in every process (default: the cores shared out "
                        "between the processes of a machine, or what OMP_NUM_THREADS says)")
    parser.add_argument("--dynamo-backend", "--dynamo_backend", dest="dynamo_backend", default=None,
                        metavar="{no,inductor}", help="Accelerate's flag: inductor compiles the prepared models "
                        "(--compile true), no does not (--compile false); braeburn compiles with inductor only")


def _threads(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of threads, 1 or more (OMP_NUM_THREADS "
                                         "of each process). Fix: --num_cpu_threads_per_process 4")
    return int(text)


def dynamo_as_compile(args: argparse.Namespace, flags: dict[str, Any]) -> None:
    """Accelerate's --dynamo_backend as braeburn's compile setting (inductor: true, no: false)."""
    backend = getattr(args, "dynamo_backend", None)
    if backend is None:
        return
    compile_given = str(flags["compile"]).lower() if "compile" in flags else None
    wanted = {"no": "false", "inductor": "true"}.get(str(backend).strip().lower())
    if wanted is None:
        raise ConfigError([], [f"--dynamo_backend={backend}: braeburn compiles with torch.compile's inductor backend "
                               "only. Fix: --dynamo_backend inductor (or no), or leave it out"])
    if compile_given is not None and compile_given != wanted:
        raise ConfigError([], [f"--dynamo_backend={backend} and --compile={flags['compile']} disagree: "
                               f"--dynamo_backend {backend} means --compile {wanted}. Pass one of them"])
    flags["compile"] = wanted


def threads_environment(args: argparse.Namespace) -> dict[str, str]:
    """OMP_NUM_THREADS for every process, when --num_cpu_threads_per_process was given."""
    threads = getattr(args, "num_cpu_threads_per_process", None)
    return {} if threads is None else {"OMP_NUM_THREADS": str(threads)}


__all__ = ["add_accelerate_flags", "dynamo_as_compile", "threads_environment"]
