"""For Lightning's users: ``Trainer(...).fit(module)`` spelled as in Lightning (``trainer``), what braeburn reads from
a LightningModule (``module``) and Lightning's ``Trainer(...)`` arguments (``options``). Lightning is never
imported by braeburn's core; the public path is ``braeburn.lightning``."""
