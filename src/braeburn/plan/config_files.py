"""Config files are data, and bounded: size, nesting and YAML aliases are capped before anything is built.

A 360-byte YAML file of nested aliases (a "billion laughs") expands to billions of values; building
them, or printing one in an error message, hangs the process. So a YAML document is first composed
into its node graph (aliases share nodes, nothing is expanded yet), its expanded size and depth are
measured on that graph, and only a document within the limits is turned into Python values (libyaml's
loader when PyYAML has it: the pure-Python one takes half a minute on a 1 MB file). A key written twice in
one YAML table is refused with both lines (YAML would keep the last silently). TOML has no aliases (and
refuses repeated keys itself); its size and depth are capped the same way. :func:`excerpt` keeps any value printed in a
message short, whatever its size.
"""

from __future__ import annotations

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


__all__ = ["ConfigFileError", "EXCERPT_CHARS", "MAX_BYTES", "MAX_DEPTH", "MAX_VALUES", "check_depth", "excerpt",
           "load_json", "load_toml", "load_yaml", "read_text"]
