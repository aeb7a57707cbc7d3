"""`accelerate launch`'s flags that `braeburn launch` takes with Accelerate's meaning: --num_cpu_threads_per_process
(OMP_NUM_THREADS in every process, set whatever the environment says, as Accelerate's launcher sets it) and
--dynamo_backend with --dynamo_use_regional_compilation (braeburn's --compile: inductor is true, or regional with
regional compilation; no is false; another backend is refused with the fix)."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from .launch_config import ConfigError, Invalid, parse_setting


def add_accelerate_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-cpu-threads-per-process", "--num_cpu_threads_per_process",
                        dest="num_cpu_threads_per_process", type=_threads, default=None, metavar="N",
                        help="Accelerate's flag: OMP_NUM_THREADS=N in every process (default: the cores shared out "
                        "between the processes of a machine, or what OMP_NUM_THREADS says)")
    parser.add_argument("--dynamo-backend", "--dynamo_backend", dest="dynamo_backend", default=None,
                        metavar="{no,inductor}", help="Accelerate's flag: inductor compiles the prepared models "
                        "(--compile true; --compile regional, or --dynamo_use_regional_compilation, compiles them by "
                        "regions), no does not (--compile false); braeburn compiles with inductor only")
    parser.add_argument("--dynamo-use-regional-compilation", "--dynamo_use_regional_compilation",
                        dest="dynamo_use_regional_compilation", action="store_true", default=False,
                        help="Accelerate's flag: compile the repeated blocks and the loss, the rest eager "
                        "(--compile regional)")
    parser.add_argument("--dynamo-mode", "--dynamo_mode", dest="dynamo_mode", default=None, metavar="default",
                        help="Accelerate's flag: only default (torch.compile's default mode); pass another mode in "
                        "the script: Accelerator(compile_mode=...), or a Trainer's --torch_compile_mode")
    for name in ("use_fullgraph", "use_dynamic"):
        parser.add_argument(f"--dynamo-{name.replace('_', '-')}", f"--dynamo_{name}", dest=f"dynamo_{name}",
                            action="store_true", default=False, help="Accelerate's flag: not supported (refused "
                            "with the fix)")


def _threads(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of threads, 1 or more (OMP_NUM_THREADS "
                                         "of each process). Fix: --num_cpu_threads_per_process 4")
    return int(text)


def dynamo_as_compile(args: argparse.Namespace, flags: dict[str, Any], below: Callable[[], Any]) -> None:
    """Accelerate's --dynamo_backend and --dynamo_use_regional_compilation as braeburn's compile setting, in
    ``flags`` (see :func:`compile_from_dynamo`); ``below()``: the compile setting of the environment and the config
    file, read only for --dynamo_backend inductor without --compile."""
    unsupported = _unsupported_dynamo_flags(args)
    backend = getattr(args, "dynamo_backend", None)
    regional = bool(getattr(args, "dynamo_use_regional_compilation", False))
    if backend is None and not regional:
        if unsupported:
            raise ConfigError([], unsupported)
        return
    lower = below() if "compile" not in flags and str(backend).strip().lower() == "inductor" else None
    try:
        flags["compile"] = compile_from_dynamo(backend, regional, flags.get("compile"), lower)
    except ConfigError as error:
        raise ConfigError([], [*error.extra, *unsupported]) from None
    if unsupported:
        raise ConfigError([], unsupported)


def _unsupported_dynamo_flags(args: argparse.Namespace) -> list[str]:
    """Accelerate's --dynamo_mode (other than default), --dynamo_use_fullgraph and --dynamo_use_dynamic: what each
    asks that braeburn's launch cannot pass on, and the fix."""
    problems = []
    mode = getattr(args, "dynamo_mode", None)
    if mode is not None and str(mode).strip().lower() != "default":
        problems.append(f"--dynamo_mode={mode}: braeburn launch passes no torch.compile mode to the script. Fix: "
                        f"leave it out and pass Accelerator(compile_mode={str(mode).strip()!r}) in the script (a Trainer "
                        f"script: --torch_compile_mode {str(mode).strip()})")
    if getattr(args, "dynamo_use_fullgraph", False):
        problems.append("--dynamo_use_fullgraph: braeburn compiles without fullgraph (a graph break stays allowed). "
                        "Fix: leave it out")
    if getattr(args, "dynamo_use_dynamic", False):
        problems.append("--dynamo_use_dynamic: braeburn lets torch.compile choose dynamic shapes itself. Fix: leave "
                        "it out")
    return problems


def compile_from_dynamo(backend: str | None, regional: bool, compile_given: Any, below: Any = None) -> str:
    """The compile setting that --dynamo_backend ``backend`` (None: not given) and --dynamo_use_regional_compilation
    (``regional``) mean beside --compile ``compile_given`` (None: not given), a pure rule. inductor is true, or
    regional where regional compilation is asked (by either flag, or by ``below``: the environment's or the config
    file's setting, as Accelerate's launcher fills --dynamo_use_regional_compilation from its file); no is false;
    regional compilation alone is regional. Only real conflicts are refused: a backend braeburn lacks, no with
    compiling asked for, inductor with --compile false or auto, regional compilation with --compile true or false."""
    wanted = {None: None, "no": "false", "inductor": "true"}.get(None if backend is None else str(backend).strip().lower())
    if backend is not None and wanted is None:
        raise ConfigError([], [f"--dynamo_backend={backend}: braeburn compiles with torch.compile's inductor backend "
                               "only. Fix: --dynamo_backend inductor (or no), or leave it out"])
    given = None if compile_given is None else _spelled(compile_given)
    if given not in (None, "auto", "true", "false", "regional"):
        return compile_given  # not a compile setting: --compile's own check names it, its choices and the fix
    if regional:
        if wanted == "false":
            raise ConfigError([], [f"--dynamo_backend={backend} and --dynamo_use_regional_compilation disagree: "
                                   "backend no compiles nothing, so no region is compiled. Fix: "
                                   "--dynamo_backend inductor, or leave --dynamo_use_regional_compilation out"])
        if given not in (None, "regional"):
            raise ConfigError([], [f"--dynamo_use_regional_compilation and --compile={compile_given} disagree: "
                                   "regional compilation is --compile regional. Pass one of them"])
        return "regional"
    if given is None and wanted == "true" and below == "regional":
        return "regional"
    if given is None or given == wanted or (wanted == "true" and given == "regional"):
        return given or wanted
    means = "--compile true (or regional, compiling by regions)" if wanted == "true" else "--compile false"
    raise ConfigError([], [f"--dynamo_backend={backend} and --compile={compile_given} disagree: "
                           f"--dynamo_backend {backend} means {means}. Pass one of them"])


def _spelled(value: Any) -> str:
    """--compile's value as its setting reads it ("yes" is "true"); an invalid one as written (refused later)."""
    try:
        return str(parse_setting("compile", value)).lower()
    except Invalid:
        return str(value).strip().lower()


def threads_environment(args: argparse.Namespace) -> dict[str, str]:
    """OMP_NUM_THREADS for every process, when --num_cpu_threads_per_process was given."""
    threads = getattr(args, "num_cpu_threads_per_process", None)
    return {} if threads is None else {"OMP_NUM_THREADS": str(threads)}


__all__ = ["add_accelerate_flags", "compile_from_dynamo", "dynamo_as_compile", "threads_environment"]
