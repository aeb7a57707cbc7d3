"""The settings of `braeburn launch`: one typed dataclass, its TOML file, and where each value came from.

Values come from four layers, the first that has a value winning: a command-line flag, an
environment variable, the config file, the default. Every layer is parsed by the same field
parsers, so a bad value gets the same message wherever it was written, naming that place. All
problems are collected and reported at once (:class:`ConfigError`). No device is named here:
whatever depends on the machine is decided by :func:`braeburn.plan.rules.make_plan`.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import tomli_w

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..plan.config_files import ConfigFileError, HiddenValue, excerpt, load_toml, read_text, shown, syntax_error_place
from ..devices.base import PRECISIONS
from ..plan.envvars import DEVICE_VAR
from ..plan.rules import STRATEGIES

CONFIG_DIR_NAME = "braeburn"
MAX_PROCESSES = 1_048_576  # world sizes: far above the largest jobs run, far below what breaks int math
MAX_MACHINES = 65_536
MAX_PROCESSES_PER_MACHINE = 1_024  # each loads torch (hundreds of MB): more is a typo, never a job
MAX_RESTARTS = 10_000
MAX_LISTED_UNKNOWN = 20  # unknown keys named one by one (with a did-you-mean); the rest are counted
CONFIG_FILE_NAME = "config.toml"
SOURCES = ("default", "file", "environment", "flag")


class Invalid(ValueError):
    """A value a field parser refuses: why, and the fix."""

    def __init__(self, why: str, fix: str):
        super().__init__(why)
        self.why, self.fix = why, fix


# -- field parsers: (value, from_text) -> the typed value, or Invalid ------------------------------
# ``from_text`` is True for flags and environment variables (always strings), False for TOML values
# (already typed: a TOML string where a number belongs is a mistake worth reporting).

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _bool(value: Any, from_text: bool) -> bool:
    if from_text and isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, bool):
        return value
    raise Invalid("must be true or false", "write true or false" + ("" if from_text else " (no quotes)"))


def _whole(low: int, high: int | None = None) -> Callable[[Any, bool], int]:
    span = f">= {low}" if high is None else f"from {low} to {high}"

    def parse(value: Any, from_text: bool) -> int:
        if from_text and isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid("must be a whole number", f"write a whole number {span}" + ("" if from_text else
                          " (no quotes)"))
        if value < low or (high is not None and value > high):
            raise Invalid(f"must be a whole number {span}", f"write a whole number {span}")
        return value

    return parse


def _ratio(value: Any, from_text: bool) -> float | None:
    if from_text and isinstance(value, str):
        if value.strip().lower() in ("", "none", "default"):
            return None
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Invalid("must be a number", "write a number >= 0 such as 1.0 (0.0 lifts the limit), or remove it "
                      "to keep torch's default")
    if not math.isfinite(value) or value < 0:
        raise Invalid("must be a finite number >= 0", "write a number >= 0 such as 1.0 (0.0 lifts the limit)")
    return float(value)


def _choice(*choices: str) -> Callable[[Any, bool], str]:
    def parse(value: Any, from_text: bool) -> str:
        text = value.strip().lower() if isinstance(value, str) else None
        if text not in choices:
            raise Invalid(f"is not one of {', '.join(choices)}", f"write one of {', '.join(map(repr, choices))}")
        return text

    return parse


def _compile(value: Any, from_text: bool) -> str | bool:
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text in ("auto", "regional"):
        return text
    if text in _TRUE + _FALSE:
        return text in _TRUE
    raise Invalid("must be auto, true, false or regional", "write \"auto\", true, false or \"regional\"")


def _gpu_ids(value: Any, from_text: bool) -> str:
    """'all', '0,1' or (in TOML) [0, 1] -> 'all' or '0,1'."""
    if isinstance(value, list) and not from_text:
        parts = value
    elif isinstance(value, str):
        if value.strip().lower() == "all":
            return "all"
        parts = [piece.strip() for piece in value.split(",")]
    else:
        parts = None
    try:
        ids = [int(part) for part in parts if not isinstance(part, bool)] if parts is not None else []
    except (TypeError, ValueError):
        ids = []
    if not ids or len(ids) != len(parts) or min(ids) < 0 or len(set(ids)) != len(ids):
        raise Invalid("must be \"all\" or distinct device indices >= 0", "write \"all\", or indices such as "
                      "\"0,1\" (in the config file also [0, 1])")
    return ",".join(str(i) for i in ids)


def _address(value: Any, from_text: bool) -> str | None:
    if isinstance(value, str) and value.strip() and not any(ch.isspace() for ch in value.strip()):
        return value.strip()
    raise Invalid("must be a host name or IP address", "write the address of machine 0, such as \"10.0.0.1\"")


def _setting(default: Any, parse: Callable[[Any, bool], Any], help: str, *, flags: tuple[str, ...] = (),
             env: str | None = None, metavar: str | None = None) -> Any:
    return field(default=default, metadata={"parse": parse, "help": help, "flags": flags, "env": env,
                                            "metavar": metavar})


@dataclass(frozen=True)
class LaunchSettings:
    """How `braeburn launch` runs a script. Each field's help is its --help text and its config-file comment."""

    cpu: bool = _setting(False, _bool, "train on the CPU even when an accelerator is usable", env=DEVICE_VAR)
    mixed_precision: str = _setting("auto", _choice("auto", *PRECISIONS),
                                    "mixed precision: auto (the best the device does well), no, fp16 or bf16",
                                    metavar="{auto,no,fp16,bf16}")
    num_processes: int = _setting(1, _whole(1, MAX_PROCESSES), "processes in total, on all machines (one per device)",
                                  metavar="N")
    num_machines: int = _setting(1, _whole(1, MAX_MACHINES), "machines taking part in the job", metavar="N")
    machine_rank: int = _setting(0, _whole(0, MAX_MACHINES - 1), "this machine's rank, 0 to num_machines-1 (0 hosts the rendezvous)",
                                 metavar="RANK")
    main_process_ip: str | None = _setting(None, _address, "address of machine 0, for jobs on several machines "
                                           "(without it the rendezvous is bound to 127.0.0.1)", metavar="ADDRESS")
    main_process_port: int | None = _setting(None, _whole(1, 65535), "rendezvous port (default: a free port on "
                                             "one machine, 29500 on several)", metavar="PORT")
    max_restarts: int = _setting(0, _whole(0, MAX_RESTARTS), "restart all workers up to this many times when one fails "
                                 "(elastic launch)", metavar="N")
    multi_gpu: bool = _setting(False, _bool, "Accelerate's --multi_gpu: DDP on the GPUs, one process per GPU "
                               "(num_processes defaults to the GPUs of every machine)")
    gpu_ids: str = _setting("all", _gpu_ids, "which devices to use: all, or indices such as 0,1",
                            flags=("--gpu-ids", "--gpu_ids", "--devices"), metavar="IDS")
    strategy: str = _setting("auto", _choice(*STRATEGIES), "distributed strategy with several processes: "
                             "auto (ddp), ddp or fsdp", metavar="{auto,ddp,fsdp}")
    compile: str | bool = _setting("auto", _compile, "torch.compile: auto (where it pays off), true, false or "
                                   "regional (the repeated blocks and the loss compiled, the rest eager)",
                                   metavar="{auto,true,false,regional}")
    mps_fallback: bool = _setting(True, _bool, "on Apple-silicon GPUs, run operators MPS lacks on the CPU "
                                  "instead of failing (PYTORCH_ENABLE_MPS_FALLBACK)")
    mps_high_watermark_ratio: float | None = _setting(
        None, _ratio, "on Apple-silicon GPUs, the memory limit as a share of the recommended maximum, 0.0 to 2.0; "
        "0.0 lifts it (PYTORCH_MPS_HIGH_WATERMARK_RATIO; torch's default 1.7)", metavar="RATIO")
    mps_low_watermark_ratio: float | None = _setting(
        None, _ratio, "on Apple-silicon GPUs, the level at which cached memory is given back; at most the high "
        "ratio (1.7 when unset, 2.0 when it is 0.0) (PYTORCH_MPS_LOW_WATERMARK_RATIO; torch's default 1.4)", metavar="RATIO")


SETTING_NAMES: tuple[str, ...] = tuple(f.name for f in fields(LaunchSettings))
_FIELDS = {f.name: f for f in fields(LaunchSettings)}


def parse_setting(name: str, value: Any, from_text: bool = True) -> Any:
    """The typed value of setting ``name``, or :class:`Invalid` with why and the fix."""
    return _FIELDS[name].metadata["parse"](value, from_text)


def env_var_for(name: str) -> str:
    return _FIELDS[name].metadata["env"] or f"BRAEBURN_{name.upper()}"


def flags_for(name: str) -> tuple[str, ...]:
    dashed = "--" + name.replace("_", "-")
    return _FIELDS[name].metadata["flags"] or ((dashed, "--" + name) if "_" in name else (dashed,))


# -- problems -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SettingProblem:
    where: str  # the file, "environment variable X" or "flag --x"
    key: str
    value: Any
    why: str
    fix: str
    overridable: bool = False  # no problem when a flag or the environment gives the key instead
    note: bool = False  # not a problem: something the launch does differently from what the file seems to say

    def __str__(self) -> str:
        if self.value is _NO_VALUE:
            value = ""
        elif isinstance(self.value, HiddenValue):  # a config file's value that may hold a secret
            value = f" ({self.value.shape}, not shown)"
        else:
            value = f" = {excerpt(self.value)}"  # a huge value is cut short
        return f"{self.where}: {self.key}{value}: {self.why}. {'' if self.note else 'Fix: '}{self.fix}."


_NO_VALUE = object()


class ConfigError(ValueError):
    """The settings cannot be used; ``problems`` lists every one."""

    def __init__(self, problems: list[SettingProblem], extra: list[str] = ()):
        self.problems, self.extra = list(problems), list(extra)
        lines = [f"  - {p}" for p in self.problems] + [f"  - {e}" for e in self.extra]
        count = len(lines)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in the launch settings:\n" + "\n".join(lines))


# -- the config file --------------------------------------------------------------------------------

def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/braeburn/config.toml``, else ``~/.config/braeburn/config.toml``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path(env.get("HOME") or Path.home()) / ".config"
    return root / CONFIG_DIR_NAME / CONFIG_FILE_NAME


def _syntax_place(path: Path, error: Exception) -> tuple[str, str]:
    """("FILE, line L, column C", what is wrong), never the line's text: it may hold a secret."""
    reason, line, column = syntax_error_place(error)
    where = str(path) + (f", line {line}" if line else "") + (f", column {column}" if line and column else "")
    return where, reason


def _toml_syntax_problem(path: Path, error: Exception) -> SettingProblem:
    where, reason = _syntax_place(path, error)
    return SettingProblem(where, "(syntax)", _NO_VALUE, f"not valid TOML ({reason})",
                          "correct that line (strings need quotes: mixed_precision = \"bf16\"), or rewrite the "
                          f"file with `braeburn config --default --force --config-file {path}`")


def read_config_file(path: Path) -> tuple[dict[str, Any], list[SettingProblem]]:
    """The file's valid settings, and a problem for every bad line, key or value. A .yaml, .yml or .json
    file is Accelerate's (``accelerate config``); braeburn's own is TOML."""
    from ..compat.accelerate import config_file as accelerate_config

    if accelerate_config.is_accelerate_file(path):
        return _read_accelerate_config(path)
    try:
        text = read_text(path)
    except FileNotFoundError:
        return {}, [SettingProblem(str(path), "(file)", _NO_VALUE, "the config file does not exist",
                                   f"check the path, or write one with `braeburn config --config-file {path}`")]
    except (OSError, UnicodeDecodeError) as error:
        return {}, [SettingProblem(str(path), "(file)", _NO_VALUE, f"cannot be read ({error})",
                                   "check the file's permissions and that it is UTF-8 text")]
    except ConfigFileError as error:  # too large: refused before it is read
        return {}, [SettingProblem(str(path), "(file)", _NO_VALUE, str(error), "keep only the launch settings "
                                   f"in it, or rewrite it with `braeburn config --default --force --config-file {path}`")]
    try:
        raw = load_toml(text)
    except tomllib.TOMLDecodeError as error:
        return {}, [_toml_syntax_problem(path, error)]
    except ConfigFileError as error:  # nested too deep
        return {}, [SettingProblem(str(path), "(file)", _NO_VALUE, str(error), "write one key = value per line")]
    return _values_from_table(path, raw)


def _format(path: Path) -> str:
    return "JSON" if path.suffix.lower() == ".json" else "YAML"


def _read_accelerate_config(path: Path) -> tuple[dict[str, Any], list[SettingProblem]]:
    import json

    import yaml

    from ..compat.accelerate.config_file import VALUE_NOT_SHOWN, read_accelerate_file, settings_from_accelerate

    try:
        table = read_accelerate_file(path)
    except FileNotFoundError:
        return {}, [SettingProblem(str(path), "(file)", _NO_VALUE, "the config file does not exist",
                                   "check the path (an `accelerate config` file is usually "
                                   "~/.cache/huggingface/accelerate/default_config.yaml)")]
    except (json.JSONDecodeError, yaml.MarkedYAMLError) as error:
        where, reason = _syntax_place(path, error)
        return {}, [SettingProblem(where, "(syntax)", _NO_VALUE, f"not valid {_format(path)} ({reason})",
                                   "correct that line, or write the file again with `accelerate config`")]
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as error:
        reason = " ".join(str(error).split())  # the file system's, the decoder's or braeburn's words: no file text
        return {}, [SettingProblem(str(path), "(file)", _NO_VALUE, f"cannot be read as Accelerate's config file "
                                   f"({excerpt(reason)})", "write it again with `accelerate config`, or give "
                                   "braeburn's TOML file (`braeburn config`)")]
    raw, refusals = settings_from_accelerate(table)
    problems = [SettingProblem(str(path), key, _NO_VALUE if value is VALUE_NOT_SHOWN else value, why, fix)
                for key, value, why, fix in refusals]
    problems += [SettingProblem(str(path), key, value, why, fix, overridable=True, note=True)
                 for key, value, why, fix in raw.pop("_notes", [])]
    if raw.pop("_num_processes_from_command_line", False):
        problems.append(SettingProblem(str(path), "num_processes", -1, "-1 means the count is given on the "
                                       "command line (as in Accelerate)", "pass --num-processes N", overridable=True))
    values, bad_values = _values_from_table(path, raw)
    return values, problems + bad_values


def _values_from_table(path: Path, raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[SettingProblem]]:
    values, problems, unknown = {}, [], 0
    for key, value in raw.items():
        if key not in _FIELDS:
            unknown += 1
            if unknown > MAX_LISTED_UNKNOWN:
                continue  # counted below: a did-you-mean for each of thousands of keys takes seconds
            close = difflib.get_close_matches(key, SETTING_NAMES, n=1)
            fix = f"did you mean {close[0]!r}? Known keys: " if close else "remove it; known keys: "
            problems.append(SettingProblem(str(path), key, _NO_VALUE, "unknown key (its value is not shown: it may "
                                           "hold a secret)", fix + ", ".join(SETTING_NAMES)))
            continue
        try:
            values[key] = _FIELDS[key].metadata["parse"](value, False)
        except Invalid as bad:  # not a legal value: shown only where it is a number or true/false
            problems.append(SettingProblem(str(path), key, shown(value), bad.why, bad.fix))
    if unknown > MAX_LISTED_UNKNOWN:
        problems.append(SettingProblem(str(path), f"({unknown - MAX_LISTED_UNKNOWN:,} more unknown keys)", _NO_VALUE,
                                       f"not listed (only the first {MAX_LISTED_UNKNOWN} are)",
                                       "is this the right file? Known keys: " + ", ".join(SETTING_NAMES)))
    return values, problems


def settings_to_toml(settings: LaunchSettings) -> str:
    """The file `braeburn config` writes: every key with its help as a comment; unset keys commented out."""
    out = ["# braeburn launch settings (written by `braeburn config`; `braeburn config show` explains them).",
           "# Precedence: command-line flag, then environment variable, then this file, then the default.", ""]
    for f in fields(LaunchSettings):
        out.append(f"# {f.metadata['help']}  [flag {flags_for(f.name)[0]}, env {env_var_for(f.name)}]")
        value = getattr(settings, f.name)
        out.append(f"# {f.name} = (unset)" if value is None else tomli_w.dumps({f.name: value}).strip())
    return "\n".join(out) + "\n"


def write_config_file(settings: LaunchSettings, path: Path) -> None:
    """Check ``settings`` as a reader would, then write the file atomically (parent folders made)."""
    problems = check_settings(settings, {name: str(path) for name in SETTING_NAMES})
    text = settings_to_toml(settings)
    _values, read_problems = _values_from_table(path, tomllib.loads(text))
    if problems or read_problems:
        raise ConfigError(problems + read_problems)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


# -- checks across fields (pure) -------------------------------------------------------------------

def check_settings(settings: LaunchSettings, where: Mapping[str, str]) -> list[SettingProblem]:
    """Rules between fields that hold on any machine; what depends on the machine is make_plan's."""
    problems = []
    s = settings
    if s.machine_rank >= s.num_machines:
        problems.append(SettingProblem(where["machine_rank"], "machine_rank", s.machine_rank,
                                       f"must be below num_machines ({s.num_machines})",
                                       f"use a rank from 0 to {s.num_machines - 1}, or raise num_machines"))
    if s.num_machines > 1 and s.main_process_ip is None:
        problems.append(SettingProblem(where["num_machines"], "num_machines", s.num_machines,
                                       "several machines need the address of machine 0 to meet there",
                                       "pass --main-process-ip ADDRESS (the same on every machine)"))
    per_machine = -(-s.num_processes // s.num_machines)
    if per_machine > MAX_PROCESSES_PER_MACHINE:
        problems.append(SettingProblem(where["num_processes"], "num_processes", s.num_processes,
                                       f"would start {per_machine:,} processes on each machine, more than the "
                                       f"{MAX_PROCESSES_PER_MACHINE:,} braeburn allows (each loads torch; one per "
                                       "device or CPU core is the most that helps)",
                                       "pass --num-processes with one process per device (per CPU core with --cpu) "
                                       "of every machine"))
    if s.num_processes % s.num_machines:
        problems.append(SettingProblem(where["num_processes"], "num_processes", s.num_processes,
                                       f"is the total on all machines and must divide evenly by num_machines "
                                       f"({s.num_machines})", f"use a multiple of {s.num_machines}, such as "
                                       f"{s.num_machines * max(1, s.num_processes // s.num_machines)}"))
    return problems


# -- the merge: flag > environment > file > default ------------------------------------------------

@dataclass(frozen=True)
class Source:
    kind: str  # one of SOURCES
    detail: str  # the flag, variable or file; "" for a default

    def __str__(self) -> str:
        return f"{self.kind} ({self.detail})" if self.detail else self.kind


@dataclass(frozen=True)
class ResolvedSettings:
    settings: LaunchSettings
    sources: dict[str, Source]
    config_file: Path | None  # the file read, if any
    problems: list[SettingProblem]
    notes: list[SettingProblem] = field(default_factory=list)  # said before the launch, which goes on

    def raise_for_problems(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)


def _environment_layer(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str], list[SettingProblem]]:
    values, names, problems = {}, {}, []
    for name in SETTING_NAMES:
        var = env_var_for(name)
        raw = env.get(var, "").strip()
        if not raw:
            continue
        if var == DEVICE_VAR:  # BRAEBURN_DEVICE names a device; only "cpu" is this switch
            values[name], names[name] = raw.lower() == "cpu", var
            continue
        try:
            values[name], names[name] = _FIELDS[name].metadata["parse"](raw, True), var
        except Invalid as bad:
            problems.append(SettingProblem(f"environment variable {var}", name, raw, bad.why,
                                           f"{bad.fix}, or unset {var}"))
    return values, names, problems


def _flag_layer(flags: Mapping[str, Any]) -> tuple[dict[str, Any], list[SettingProblem]]:
    values, problems = {}, []
    for name, raw in flags.items():
        try:
            values[name] = _FIELDS[name].metadata["parse"](raw, True)
        except Invalid as bad:
            problems.append(SettingProblem(f"flag {flags_for(name)[0]}", name, raw, bad.why, bad.fix))
    return values, problems


def resolve_settings(flags: Mapping[str, Any], env: Mapping[str, str], config_file: Path | None = None
                     ) -> ResolvedSettings:
    """Merge the layers; bad values fall back to the next layer and are listed in ``problems``.

    ``flags`` holds only the flags given on the command line (see :func:`flag_values`).
    ``config_file`` None means the default path, read only if it exists.
    """
    path = config_file if config_file is not None else default_config_path(env)
    file_values, problems = ({}, []) if config_file is None and not path.exists() else read_config_file(path)
    env_values, env_names, env_problems = _environment_layer(env)
    flag_values_, flag_problems = _flag_layer(flags)
    chosen, sources = {}, {}
    for name in SETTING_NAMES:
        if name in flag_values_:
            chosen[name], sources[name] = flag_values_[name], Source("flag", flags_for(name)[0])
        elif name in env_values:
            chosen[name], sources[name] = env_values[name], Source("environment", env_names[name])
        elif name in file_values:
            chosen[name], sources[name] = file_values[name], Source("file", str(path))
        else:
            sources[name] = Source("default", "")
    settings = replace(LaunchSettings(), **chosen)
    where = {name: _where(sources[name]) for name in SETTING_NAMES}
    problems = [p for p in problems if not (p.overridable and (p.key in flag_values_ or p.key in env_values))]
    notes = [p for p in problems if p.note]
    problems = [p for p in problems if not p.note] + env_problems + flag_problems + check_settings(settings, where)
    read = path if (config_file is not None or path.exists()) else None
    return ResolvedSettings(settings, sources, read, problems, notes)


def _where(source: Source) -> str:
    return {"flag": f"flag {source.detail}", "environment": f"environment variable {source.detail}",
            "file": source.detail}.get(source.kind, "default")


# -- command-line flags built from the fields ------------------------------------------------------

def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field (help from the field); absent flags stay out of the namespace."""
    parser.add_argument("--config-file", "--config_file", dest="config_file", type=Path, default=None,
                        metavar="PATH", help=f"settings file (default: {default_config_path()})")
    group = parser.add_argument_group("settings (flag > environment > config file > default)")
    for f in fields(LaunchSettings):
        default = "unset" if f.default is None else str(f.default).lower()
        text = f"{f.metadata['help']} [env {env_var_for(f.name)}; default {default}]"
        if f.metadata["parse"] is _bool:
            group.add_argument(*flags_for(f.name), dest=f"setting_{f.name}", action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=text)
        else:
            group.add_argument(*flags_for(f.name), dest=f"setting_{f.name}", default=argparse.SUPPRESS,
                               metavar=f.metadata["metavar"], help=text)


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags, by field name."""
    return {name: getattr(args, f"setting_{name}") for name in SETTING_NAMES if hasattr(args, f"setting_{name}")}


__all__ = ["ConfigError", "Invalid", "LaunchSettings", "ResolvedSettings", "SETTING_NAMES", "SettingProblem", "Source",
           "add_settings_arguments", "check_settings", "default_config_path", "env_var_for", "flag_values",
           "flags_for", "parse_setting", "read_config_file", "resolve_settings", "settings_to_toml", "write_config_file"]
