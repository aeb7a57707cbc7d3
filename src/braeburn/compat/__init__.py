"""What braeburn does for each peer's users, one folder per peer: ``accelerate``, ``transformers``, ``lightning``.
Each translates the peer's names, arguments, callbacks and files onto braeburn's own concepts."""
