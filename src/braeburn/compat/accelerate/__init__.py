"""For Accelerate's users: ``braeburn.Accelerator`` (``accelerator``: braeburn's Accelerator with Accelerate's
arguments), its other names (``api``), its ``Accelerator(...)`` arguments (``options``) and its ``accelerate config``
files read as `braeburn launch` settings (``config_file``)."""
