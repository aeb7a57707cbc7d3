"""Lightning's Trainer spelling for a LightningModule, run by braeburn: ``from braeburn.lightning import Trainer``
(the code is in compat/lightning/; docs/migrating.md, "Lightning", says what is covered)."""

from .compat.lightning.trainer import LightningArgumentError, Trainer

__all__ = ["LightningArgumentError", "Trainer"]
