"""Checkpoints and the output folder: training state written atomically with every RNG state (``state``), the
manifest of what a saved state holds (``manifest``), weight files (``safetensors_file``), host copies for
background saves (``host_copy``), one writer per folder (``output_lock``) and writes that never follow a link out
of the folder (``no_follow``)."""
