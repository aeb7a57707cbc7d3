"""Adapters that translate a peer library's names and files onto braeburn's own concepts, one folder per peer:
``accelerate/`` (``braeburn.Accelerator`` and Accelerate's other names, arguments and ``accelerate config`` files),
``transformers/`` (``braeburn.Trainer``, ``TrainingArguments``, callbacks, files) and ``lightning/`` (what
``braeburn.lightning`` offers). The core never imports this package (docs/architecture.md).
"""
