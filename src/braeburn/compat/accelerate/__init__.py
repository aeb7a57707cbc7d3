"""For Accelerate's users: its other names on the Accelerator (``api``), its ``Accelerator(...)`` arguments
(``options``) and its ``accelerate config`` files read as `braeburn launch` settings (``config_file``)."""
