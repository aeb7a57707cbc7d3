"""Config files are data, and bounded: size, nesting and YAML aliases are capped before anything is built.

A 360-byte YAML file of nested aliases (a "billion laughs") expands to billions of values; building
them, or printing one in an error message, hangs the process. So a YAML document is first composed
into its node graph (aliases share nodes, nothing is expanded yet), its expanded size and depth are
measured on that graph, and only a document within the limits is turned into Python values (libyaml's
loader when PyYAML has it: the pure-Python one takes half a minute on a 1 MB file). A key written twice in
one YAML table is refused with both lines (YAML would keep the last silently). TOML has no aliases (and
refuses repeated keys itself); its size and depth are capped the same way. :func:`excerpt` keeps any value printed in a
message short, whatever its size.

A value that is not one of its key's legal choices may be a secret pasted in the wrong place (a token under
``dynamo_config``, a password as ``main_process_ip``): messages show it through :func:`shown`, which keeps numbers,
true/false and legal choices, and says only the shape of anything else ("a mapping of 2 entries"). A syntax
error names the file, line and column, never the line's text (:func:`syntax_error_place`).
"""

from __future__ import annotations

import re
import reprlib
from pathlib import Path
from typing import Any

MAX_BYTES = 1_000_000  # a config file of a few hundred options is a few KB
MAX_DEPTH = 32  # options hold numbers, strings and short lists: two or three levels
MAX_VALUES = 10_000  # values after aliases are expanded
EXCERPT_CHARS = 200


class ConfigFileError(ValueError):
    """A config file that is too big, too deep or not readable: why, and the fix, in one line."""


_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxdict, _repr.maxlist, _repr.maxtuple, _repr.maxset = 3, 8, 8, 8, 8
_repr.maxstring, _repr.maxother, _repr.maxlong = 120, 120, 60


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)``, but bounded: nested, long or self-referring values are cut with '...'."""
    text = _repr.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def shape(value: Any) -> str:
    """What a value is, without what it holds: "a mapping of 2 entries", "a list of 1 item", "a string of 12
    characters"."""
    def count(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    if isinstance(value, dict):
        return f"a mapping of {count(len(value), 'entry', 'entries')}"
    if isinstance(value, (list, tuple)):
        return f"a list of {count(len(value), 'item', 'items')}"
    if isinstance(value, str):
        return f"a string of {count(len(value), 'character', 'characters')}"
    return f"a value of type {type(value).__name__}"


class HiddenValue:
    """A config file's value that a message leaves out (it may hold a secret): only its :func:`shape` is said."""

    def __init__(self, value: Any) -> None:
        self.shape = shape(value)

    def __repr__(self) -> str:
        return f"<{self.shape}, not shown>"


def shown(value: Any, legal: tuple[str, ...] = ()) -> Any:
    """``value`` itself where a message may show it (a number, true or false, null, or a string among
    ``legal``, in any case); else a :class:`HiddenValue`."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str) and value.strip().lower() in {choice.lower() for choice in legal}:
        return value
    return HiddenValue(value)


def syntax_error_place(error: Exception) -> tuple[str, int | None, int | None]:
    """(what the parser says is wrong, line, column) of a TOML, YAML or JSON syntax error, with no text of
    the file: the parsers' own messages can quote the line (PyYAML's pure-Python loader prints it)."""
    import json

    import yaml

    if isinstance(error, json.JSONDecodeError):
        return error.msg, error.lineno, error.colno
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        what = "; ".join(part for part in (error.context, error.problem) if part) or "not valid YAML"
        return what, (mark.line + 1 if mark else None), (mark.column + 1 if mark else None)
    message = str(error)  # tomllib: "Illegal character '\\n' (at line 2, column 26)"
    found = re.search(r"\(at line (\d+), column (\d+)\)", message)
    what = re.sub(r"\s*\(at .*\)$", "", message)
    return what, (int(found.group(1)) if found else None), (int(found.group(2)) if found else None)


def read_text(path: Path) -> str:
    """The file's text, refusing a file larger than :data:`MAX_BYTES` before reading it."""
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ConfigFileError(f"is {size:,} bytes, more than the {MAX_BYTES:,} a config file may have; "
                              "a config file holds option = value pairs (pass data sets and tensors as files "
                              "named by an option)")
    with open(path, encoding="utf-8-sig") as file:
        return file.read(MAX_BYTES + 1)


def load_yaml(text: str) -> Any:
    """The document as Python data (``yaml.SafeLoader``: no tags that build objects), within the limits."""
    import yaml

    _check_yaml_lines(text)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # (the same safe constructors, in C)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigFileError(_too_deep()) from None
        except yaml.YAMLError as error:
            if "maximum nesting depth" in str(error):  # libyaml's own limit (1,000 levels)
                raise ConfigFileError(_too_deep()) from None
            raise
        if node is None:
            return None
        _check_yaml_graph(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_yaml_lines(text: str) -> None:
    """Before parsing (10 s for a flat 1 MB file, even in C): every line that is neither blank nor a comment
    holds at least one value (block scalars aside), so more such lines than :data:`MAX_VALUES` are too many."""
    lines = sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    if lines > MAX_VALUES:
        raise ConfigFileError(f"has {lines:,} lines of values, more than the {MAX_VALUES:,} a config file may hold; "
                              "a config file holds option = value pairs (a few hundred at most): is this the right "
                              "file?")


def _check_yaml_graph(root: Any) -> None:
    """Expanded size and depth of the node graph, each node measured once (aliases share nodes)."""
    import yaml

    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values when expanded, depth)
    in_progress: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _yaml_children(node, yaml)
        if not children_done:
            if isinstance(node, yaml.MappingNode):
                _check_repeated_keys(node, yaml)
            if key in in_progress:
                raise ConfigFileError("holds an alias that refers to itself (a value inside its own anchor); "
                                      "write the value out instead of the alias")
            in_progress.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        in_progress.discard(key)
        size = 1 + sum(sizes[id(child)][0] for child in children)
        depth = 1 + max((sizes[id(child)][1] for child in children), default=0)
        if size > MAX_VALUES:
            raise ConfigFileError(f"expands to more than {MAX_VALUES:,} values (its aliases, *name, repeat "
                                  "anchored values, and aliases of aliases multiply); write the options out "
                                  "without nested aliases")
        if depth > MAX_DEPTH:
            raise ConfigFileError(_too_deep())
        sizes[key] = (size, depth)


def _check_repeated_keys(mapping: Any, yaml: Any) -> None:
    """A key given twice in one table: YAML keeps the last value without a word; refuse, naming both lines."""
    first_line: dict[tuple[str, str], int] = {}
    for key, _ in mapping.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":  # (<<: *defaults)
            continue
        line, seen = key.start_mark.line + 1, first_line.get((key.tag, key.value))
        first_line.setdefault((key.tag, key.value), line)
        if seen is not None:
            raise ConfigFileError(f"gives the key {excerpt(key.value)} twice (lines {seen} and {line}); YAML would "
                                  "keep the last value without a word. Keep one of them.")


def _yaml_children(node: Any, yaml: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_toml(text: str) -> dict[str, Any]:
    """The TOML document as a dict, within the depth limit (tomllib raises its own syntax errors)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise ConfigFileError(_too_deep()) from None
    check_depth(data)
    return data


def load_json(text: str) -> Any:
    """The JSON document, within the depth and size limits (json raises its own syntax errors)."""
    import json

    try:
        data = json.loads(text)
    except RecursionError:  # thousands of nested brackets: json's own recursion limit
        raise ConfigFileError(_too_deep()) from None
    check_depth(data)
    return data


def check_depth(data: Any) -> None:
    """Refuse data (already built, without shared parts) nested deeper than :data:`MAX_DEPTH`, or holding
    more than :data:`MAX_VALUES` values."""
    stack, count = [(data, 1)], 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH:
            raise ConfigFileError(_too_deep())
        if count > MAX_VALUES:
            raise ConfigFileError(f"holds more than {MAX_VALUES:,} values; a config file holds option = value "
                                  "pairs (a few hundred at most): is this the right file?")
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def _too_deep() -> str:
    return (f"nests values more than {MAX_DEPTH} levels deep; options are numbers, strings, or short "
            "lists of them: flatten the file")


__all__ = ["ConfigFileError", "EXCERPT_CHARS", "HiddenValue", "MAX_BYTES", "MAX_DEPTH", "MAX_VALUES", "check_depth",
           "excerpt", "load_json", "load_toml", "load_yaml", "read_text", "shape", "shown", "syntax_error_place"]
