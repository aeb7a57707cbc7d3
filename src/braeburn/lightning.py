"""Lightning's Trainer spelling for a LightningModule, run by braeburn: ``from braeburn.lightning import Trainer``
(the code is in compat/lightning/; docs/migrating.md, "Lightning", says what is covered)."""

from .compat.lightning.trainer import LightningArgumentError, Trainer

__all__ = ["Braeburn", "LightningArgumentError", "Trainer"]


def __getattr__(name: str):
    """``Braeburn``, braeburn inside Lightning's own Trainer: ``lightning.Trainer(..., callbacks=[Braeburn()])``
    (compat/lightning/extension.py). It loads Lightning, so only when first used: ``import braeburn`` never does
    (``pip install 'braeburn[lightning]'`` installs it)."""
    if name == "Braeburn":
        from .compat.lightning.extension import Braeburn

        return Braeburn
    raise AttributeError(f"module 'braeburn.lightning' has no attribute {name!r}")
