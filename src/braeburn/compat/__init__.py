"""Adapters that translate a peer library's names and files onto braeburn's own concepts.

``accelerate_options``: Accelerate's ``Accelerator(...)`` arguments (kwargs handlers, DataLoaderConfiguration).
``accelerate_config``: an ``accelerate config`` YAML file, read as `braeburn launch` settings.
"""
