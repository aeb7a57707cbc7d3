"""Lightning's own package, for the extension (``extension.py``): imported here only, on first use of
``braeburn.lightning.Braeburn``, never by braeburn's core.

Lightning ships under two names with the same code: ``lightning`` (``import lightning as L``; its Trainer is in
``lightning.pytorch``) and ``pytorch_lightning`` (``import pytorch_lightning as pl``). Their classes are distinct, so
the extension derives from the one the script uses: the one already imported, else whichever is installed.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

# (the module holding Trainer and Callback, the name a user imports), in the order they are tried
_PACKAGES = (("lightning.pytorch", "lightning"), ("pytorch_lightning", "pytorch_lightning"))
INSTALL = ("pip install 'braeburn[lightning]', which installs pytorch-lightning (`import pytorch_lightning as pl`); "
           "a script that does `import lightning as L` needs pip install lightning")


class LightningMissingError(ImportError):
    """Neither of Lightning's packages is installed."""


def lightning_package() -> ModuleType:
    """``lightning.pytorch`` or ``pytorch_lightning``: the one the script imported, else the one installed."""
    for module, _ in _PACKAGES:
        if sys.modules.get(module) is not None:
            return sys.modules[module]
    for module, name in _PACKAGES:
        try:
            return importlib.import_module(module)
        except ImportError as error:
            if error.name not in (name, module):
                raise  # Lightning is there but broken: its own error says why
    raise LightningMissingError("braeburn.lightning.Braeburn extends Lightning's own Trainer, and Lightning is not "
                                f"installed: {INSTALL}")


__all__ = ["INSTALL", "LightningMissingError", "lightning_package"]
