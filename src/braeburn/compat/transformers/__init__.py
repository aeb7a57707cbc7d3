"""For the Transformers Trainer's users: its ``TrainingArguments`` names (``arguments``), its Trainer surface and
outputs (``trainer_api``), its overridable methods (``overrides``), its callbacks (``callbacks``) and its files on
disk (``files``: ``model.safetensors``, ``config.json``, tokenizer files)."""
