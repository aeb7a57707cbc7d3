"""The variables each device kind needs in place before torch loads, set at braeburn's import.

When torch has not loaded yet, :func:`apply_import_defaults` puts the device kinds' import-time defaults in the
environment (``PYTORCH_ENABLE_MPS_FALLBACK=1`` on macOS), so a plain ``python train.py`` gets what ``braeburn
launch`` sets; a value the user set always wins, and one torch could not parse is explained before ``import torch``
aborts on it. ``braeburn._early`` has recorded the environment before this runs.
"""

from __future__ import annotations

import os
import platform
import sys
import warnings
from collections.abc import MutableMapping

from .. import _early
from .registry import KINDS


def import_defaults(environ: MutableMapping[str, str], system: str, torch_loaded: bool) -> list[str]:
    """Set every kind's import-time defaults in ``environ`` (never over a value already there) unless
    torch has loaded; return the problems of the values torch would read (why, and the fix)."""
    problems: list[str] = []
    for kind in KINDS:
        if not torch_loaded:
            for name, value in kind.env_at_import(system).items():
                _early.put_default(environ, name, value)
        problems += kind.env_problems(environ, system)
    return problems


def apply_import_defaults() -> None:
    problems = import_defaults(os.environ, platform.system(), "torch" in sys.modules)
    _early.ENV_AT_IMPORT.update({name: value for name, value in os.environ.items() if name not in _early.ENV_AT_IMPORT})
    for problem in problems:
        warnings.warn(f"braeburn: {problem}", RuntimeWarning, stacklevel=3)


__all__ = ["apply_import_defaults", "import_defaults"]
