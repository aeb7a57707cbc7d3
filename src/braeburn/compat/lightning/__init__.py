"""For Lightning's users: ``Trainer(...).fit(module)`` spelled as in Lightning (``trainer``), what braeburn reads from
a LightningModule (``module``) and Lightning's ``Trainer(...)`` arguments (``options``). Lightning is never
imported by braeburn's core; the public path is ``braeburn.lightning``."""

# Before the package was laid out by concern this was a module that defined these two names (braeburn/lightning.py
# imported them from here); they load on first use, so the package's other modules import without the trainer.
_WHERE = {"Trainer": "trainer", "LightningArgumentError": "trainer"}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'braeburn.compat.lightning' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
