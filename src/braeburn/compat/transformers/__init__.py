"""For the Transformers Trainer's users: ``braeburn.Trainer`` (``trainer``: braeburn's Trainer with Transformers'
arguments), ``TrainingArguments`` (``arguments``), the methods scripts call and the parser (``trainer_api``), the
methods subclasses override (``overrides``), its callbacks (``callbacks``) and its files on disk (``files``:
``model.safetensors``, ``config.json``, tokenizer files)."""
