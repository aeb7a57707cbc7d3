"""What the process environment held when braeburn was imported, and which variables braeburn set as defaults.

This module must stay free of torch imports: it records whether torch had already loaded, because
some variables (the MPS CPU fallback, the MPS memory watermarks) are read only once, when libtorch
starts. ``braeburn.devices.environment`` then puts the device kinds' import-time defaults in place
(``PYTORCH_ENABLE_MPS_FALLBACK=1`` on macOS) through :func:`put_default`, which marks them as braeburn's,
so that a launcher, `braeburn check` and `doctor` tell braeburn's default from a value the user set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

# Lists the variables braeburn's import put in place as defaults, with their values ("NAME=VALUE,..."). It is
# inherited by child processes, so a launcher, `braeburn check` and `doctor` tell braeburn's default from a
# value the user set: an explicit option may replace the former, never the latter.
SET_BY_BRAEBURN_VAR = "BRAEBURN_DEFAULTS_SET"

TORCH_LOADED_FIRST: bool = "torch" in sys.modules
# The environment at braeburn's import, plus the defaults apply_import_defaults() put in place then:
# what torch sees when it loads after braeburn.
ENV_AT_IMPORT: dict[str, str] = dict(os.environ)


def set_by_braeburn(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables whose current value is the default braeburn's import set (not the user's)."""
    marked = dict(item.split("=", 1) for item in environ.get(SET_BY_BRAEBURN_VAR, "").split(",") if "=" in item)
    return {name: value for name, value in marked.items() if environ.get(name) == value}


def _mark(environ: MutableMapping[str, str], marked: Mapping[str, str]) -> None:
    if marked:
        environ[SET_BY_BRAEBURN_VAR] = ",".join(f"{name}={value}" for name, value in marked.items())
    else:
        environ.pop(SET_BY_BRAEBURN_VAR, None)


def put_default(environ: MutableMapping[str, str], name: str, value: str) -> None:
    """Set braeburn's default ``value`` unless the user set ``name``; record it as braeburn's."""
    if name in environ:
        return
    environ[name] = value
    _mark(environ, {**set_by_braeburn(environ), name: value})


def put_option(environ: MutableMapping[str, str], name: str, value: str) -> None:
    """Set the value an option asks for, over braeburn's default but never over the user's own value."""
    marked = set_by_braeburn(environ)
    if name in environ and name not in marked:
        return
    environ[name] = value
    if marked.get(name) != value:  # no longer braeburn's default: the option's value, as if the user set it
        marked.pop(name, None)
    _mark(environ, marked)
