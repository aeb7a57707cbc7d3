"""braeburn for Lightning's users (docs/migrating.md, "Lightning"):

- ``Braeburn``: braeburn inside Lightning's own Trainer, ``lightning.Trainer(..., callbacks=[Braeburn()])``
  (compat/lightning/extension.py; needs Lightning: ``pip install 'braeburn[lightning]'``);
- ``Trainer``: Lightning's Trainer spelling run by braeburn's own Trainer (compat/lightning/trainer.py), where it
  gives Lightning's results; what it cannot give is refused by name.

Lightning is imported only when ``Braeburn`` is first used, never by ``import braeburn``."""

from .compat.lightning.trainer import LightningArgumentError, Trainer

__all__ = ["Braeburn", "LightningArgumentError", "Trainer"]


def __getattr__(name: str):
    if name == "Braeburn":
        from .compat.lightning.extension import Braeburn

        return Braeburn
    raise AttributeError(f"module 'braeburn.lightning' has no attribute {name!r}")
