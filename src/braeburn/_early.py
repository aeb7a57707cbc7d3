"""What the process environment held when braeburn was imported, and the defaults it adds then.

This module must stay free of torch imports: it records whether torch had already loaded, because
some variables (the MPS CPU fallback, the MPS memory watermarks) are read only once, when libtorch
starts. When torch has not loaded yet, :func:`apply_import_defaults` puts the device kinds'
import-time defaults in the environment (``PYTORCH_ENABLE_MPS_FALLBACK=1`` on macOS), so a plain
``python train.py`` gets what ``braeburn launch`` sets; a value the user set always wins, and one
torch could not parse is explained before ``import torch`` aborts on it.
"""

from __future__ import annotations

import os
import platform
import sys
import warnings
from collections.abc import MutableMapping

TORCH_LOADED_FIRST: bool = "torch" in sys.modules
# The environment at braeburn's import, plus the defaults apply_import_defaults() put in place then:
# what torch sees when it loads after braeburn.
ENV_AT_IMPORT: dict[str, str] = dict(os.environ)


def import_defaults(environ: MutableMapping[str, str], system: str, torch_loaded: bool) -> list[str]:
    """Set every kind's import-time defaults in ``environ`` (never over a value already there) unless
    torch has loaded; return the problems of the values torch would read (why, and the fix)."""
    from .devices.registry import KINDS  # no torch: device kinds import it only inside their methods

    problems: list[str] = []
    for kind in KINDS:
        if not torch_loaded:
            for name, value in kind.env_at_import(system).items():
                environ.setdefault(name, value)
        problems += kind.env_problems(environ, system)
    return problems


def apply_import_defaults() -> None:
    problems = import_defaults(os.environ, platform.system(), "torch" in sys.modules)
    ENV_AT_IMPORT.update({name: value for name, value in os.environ.items() if name not in ENV_AT_IMPORT})
    for problem in problems:
        warnings.warn(f"braeburn: {problem}", RuntimeWarning, stacklevel=3)
