"""Fill config dataclasses from the command line and a TOML/YAML file, collecting every error.

Generic over dataclasses (the script's own and TrainingConfig). Field docstrings (the string
literal under a field) or ``metadata={"help": ...}`` become the --help text; ``metadata=
{"aliases": ("--cpu",)}`` adds extra flag names. Config files are data only: YAML through
``yaml.SafeLoader`` and ``tomllib``, bounded in size, depth and alias expansion (``config_files``);
nothing is evaluated.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

from ..plan import config_files
from ..plan.rules import OptionError

_TRUE = ("true", "yes", "y", "1", "on")
_FALSE = ("false", "no", "n", "0", "off")
_NONE = ("none", "null")


class ConfigError(ValueError):
    """One or more configuration problems; ``errors`` lists them all."""

    def __init__(self, errors: list[OptionError]):
        self.errors = list(errors)
        lines = "\n".join(f"  - {error}" for error in self.errors)
        noun = "problem" if len(self.errors) == 1 else "problems"
        super().__init__(f"{len(self.errors)} {noun} in the configuration:\n{lines}")


@dataclasses.dataclass
class _Spec:
    owner: type
    name: str
    hint: Any
    help: str
    aliases: tuple[str, ...]
    hidden: bool = False

    @property
    def is_bool(self) -> bool:
        return _strip_optional(self.hint) is bool

    def default(self) -> Any:
        field = next(f for f in dataclasses.fields(self.owner) if f.name == self.name)
        if field.default is not dataclasses.MISSING:
            return field.default
        if field.default_factory is not dataclasses.MISSING:
            return field.default_factory()
        return dataclasses.MISSING


def field_docs(cls: type) -> dict[str, str]:
    """The docstrings written under the fields of ``cls`` (and its dataclass bases)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(getattr(after, "value", None), ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _strip_optional(hint: Any) -> Any:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else Union[tuple(rest)]
    return hint


def _specs(dataclass_types: tuple[type, ...]) -> list[_Spec]:
    specs: dict[str, _Spec] = {}
    for cls in dataclass_types:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"parse_config takes dataclass types; {cls!r} is not one")
        hints, docs = typing.get_type_hints(cls), field_docs(cls)
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            if field.name in specs:
                raise TypeError(f"field {field.name!r} is defined by both {specs[field.name].owner.__name__} and "
                                f"{cls.__name__}; rename one of them")
            help_text = field.metadata.get("help") or docs.get(field.name, "")
            hidden = help_text == argparse.SUPPRESS  # as argparse's own spelling, so Transformers' parser agrees
            specs[field.name] = _Spec(cls, field.name, hints[field.name], "" if hidden else help_text,
                                      tuple(field.metadata.get("aliases", ())), hidden)
    return list(specs.values())


def convert(hint: Any, value: Any) -> Any:
    """``value`` (a string from the command line, or data from a file) as type ``hint``; ValueError if not."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return _to_union(hint, value)
    if origin is Literal:
        return _to_literal(typing.get_args(hint), value)
    if hint is dict or origin is dict:
        return _to_dict(value)
    if origin is list:
        args = typing.get_args(hint)
        items = value if isinstance(value, list) else [value]
        return [convert(args[0] if args else str, item) for item in items]
    if hint in _SCALARS:
        return _SCALARS[hint](value)
    raise ValueError(f"unsupported field type {hint!r}")


def _to_union(hint: Any, value: Any) -> Any:
    args = typing.get_args(hint)
    if type(None) in args and (value is None or (isinstance(value, str) and value.lower() in _NONE)):
        return None
    for option in (a for a in args if a is not type(None)):
        try:
            return convert(option, value)
        except ValueError:
            continue
    raise ValueError(f"expected {_type_name(hint)}")


def _to_literal(choices: tuple, value: Any) -> Any:
    for choice in choices:
        if value == choice or str(value) == str(choice):
            return choice
    raise ValueError(f"choose one of {', '.join(map(str, choices))}")


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise ValueError("expected true or false")


def _to_int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("expected a whole number")
    try:
        return int(value) if not isinstance(value, str) else int(value.strip())
    except (TypeError, ValueError):
        raise ValueError("expected a whole number") from None


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number, e.g. 2e-5") from None


def _to_str(value: Any) -> str:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError("expected text")


def _to_dict(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        import json

        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    raise ValueError("expected a JSON object, e.g. {\"key\": 1}")


_SCALARS = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str, Path: lambda value: Path(str(value))}


def _type_name(hint: Any) -> str:
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "text", type(None): "none"}
    if typing.get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    return names.get(hint, getattr(hint, "__name__", str(hint)))


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so its errors join the others."""

    def error(self, message: str) -> typing.NoReturn:
        raise ConfigError([OptionError("command line", " ".join(self._argv), message)])


def _flags(name: str) -> list[str]:
    flags = [f"--{name}"]
    if "_" in name:
        flags.append(f"--{name.replace('_', '-')}")
    return flags


def build_parser(specs: list[_Spec], argv: list[str]) -> _Parser:
    parser = _Parser(description="Options (a --config TOML/YAML file fills the same fields; "
                     "the command line wins).", allow_abbrev=False)
    parser._argv = argv
    parser.add_argument("--config", dest="__config__", default=argparse.SUPPRESS, metavar="FILE",
                        help="read options from a TOML or YAML file (data only)")
    groups: dict[type, Any] = {}
    for spec in specs:
        group = groups.get(spec.owner) or groups.setdefault(spec.owner, parser.add_argument_group(
            spec.owner.__name__, (spec.owner.__doc__ or "").strip().splitlines()[0] if spec.owner.__doc__ else None))
        default = spec.default()
        shown = "required" if default is dataclasses.MISSING else f"default: {default!r}"
        help_text = f"{spec.help} ({shown})".strip().replace("%", "%%")
        if spec.hidden:  # Transformers options braeburn refuses: parsed (to say so), not listed
            help_text = argparse.SUPPRESS
        if spec.is_bool:
            group.add_argument(*_flags(spec.name), *spec.aliases, dest=spec.name, nargs="?", const="true",
                               default=argparse.SUPPRESS, metavar="true|false", help=help_text)
            group.add_argument(*_flags(f"no_{spec.name}"), dest=spec.name, action="store_const", const="false",
                               default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        else:
            nargs = "+" if typing.get_origin(_strip_optional(spec.hint)) is list else None
            group.add_argument(*_flags(spec.name), *spec.aliases, dest=spec.name, default=argparse.SUPPRESS,
                               nargs=nargs, metavar=spec.name.upper(), help=help_text)
    return parser


def read_config_file(path: str) -> dict[str, Any]:
    """A TOML or YAML file of ``field = value`` pairs (tables are not code: nothing is evaluated).

    Bounded (``config_files``): a file too large, nested too deep, or whose YAML aliases expand too far
    is refused before any value is built.
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError([OptionError("config", path, "no such file; pass the path of a .toml or .yaml file")])
    try:
        text = config_files.read_text(file)
        is_toml = file.suffix.lower() == ".toml"
        data = config_files.load_toml(text) if is_toml else (config_files.load_yaml(text) or {})
    except config_files.ConfigFileError as error:
        raise ConfigError([OptionError("config", path, f"{error}")]) from None
    except Exception as error:  # a syntax error in the user's file: say where
        raise ConfigError([OptionError("config", path, f"cannot be read as {file.suffix or 'YAML'}: {error}")]) from None
    if not isinstance(data, dict):
        raise ConfigError([OptionError("config", path, "must hold a table of option = value pairs")])
    return data


MAX_LISTED_UNKNOWN = 20  # unknown options named one by one (with a did-you-mean); the rest are counted


def _unknown_options(names: list[str], known: list[str], where: str) -> list[OptionError]:
    listed = [_unknown(name, known, where) for name in names[:MAX_LISTED_UNKNOWN]]
    if len(names) > MAX_LISTED_UNKNOWN:
        listed.append(OptionError("unknown option", f"{len(names) - MAX_LISTED_UNKNOWN:,} more", (
            f"{where}, not listed (only the first {MAX_LISTED_UNKNOWN} are); is this the right file?")))
    return listed


def _unknown(name: str, known: list[str], where: str) -> OptionError:
    close = difflib.get_close_matches(name.lstrip("-").replace("-", "_"), known, n=1)
    hint = f"did you mean --{close[0]}?" if close else "see --help for the options"
    return OptionError("unknown option", name, f"{where}; {hint}")


def _leftover_errors(leftovers: list[str], known: list[str]) -> list[OptionError]:
    errors, after_unknown_flag = [], False
    for arg in leftovers:
        if arg.startswith("-"):
            errors.append(_unknown(arg.split("=")[0], known, "on the command line"))
            after_unknown_flag = "=" not in arg
        elif after_unknown_flag:  # the value of the unknown option just reported
            after_unknown_flag = False
        else:
            errors.append(OptionError("command line", arg, "unexpected value; options are spelled --name value"))
    return errors


def parse_dataclasses(dataclass_types: tuple[type, ...], argv: list[str] | None) -> tuple[tuple[Any, ...], list[OptionError]]:
    """Instances from defaults < config file < command line, and every problem found on the way.

    A field whose value cannot be converted keeps its default so that the instance can still be
    validated; an instance missing a required field is None.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    specs = _specs(dataclass_types)
    known = [spec.name for spec in specs]
    namespace, leftovers = build_parser(specs, argv).parse_known_args(argv)
    given = vars(namespace)
    errors = _leftover_errors(leftovers, known)
    values: dict[str, tuple[Any, str]] = {}
    if "__config__" in given:
        path, unknown = given.pop("__config__"), []
        for key, value in read_config_file(path).items():
            if key in known:
                values[key] = (value, f"in {path}")
            else:
                unknown.append(key)
        errors.extend(_unknown_options(unknown, known, f"in {path}"))
    values.update({key: (value, "on the command line") for key, value in given.items()})
    fields: dict[type, dict[str, Any]] = {cls: {} for cls in dataclass_types}
    incomplete: set[type] = set()
    for spec in specs:
        if spec.name in values:
            raw, where = values[spec.name]
            try:
                fields[spec.owner][spec.name] = convert(spec.hint, raw)
                continue
            except ValueError as error:
                errors.append(OptionError(spec.name, raw, f"{error} ({where})"))
        elif spec.default() is dataclasses.MISSING:
            errors.append(OptionError(spec.name, None, f"is required; pass --{spec.name} VALUE"))
        if spec.default() is dataclasses.MISSING:
            incomplete.add(spec.owner)
    instances = tuple(None if cls in incomplete else cls(**fields[cls]) for cls in dataclass_types)
    return instances, errors
