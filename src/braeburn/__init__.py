"""braeburn: train PyTorch models fast on MPS, CUDA or the CPU, and on many GPUs, with one script."""

from . import _early  # first: records the environment before anything loads torch

from .devices.environment import apply_import_defaults  # noqa: E402  (no torch: device kinds import it in methods)

apply_import_defaults()  # PYTORCH_ENABLE_MPS_FALLBACK=1 on macOS for `python train.py` (user's value wins)

__version__ = "0.1.0"

# name -> module (relative); loaded lazily, so `import braeburn` does not load torch before _early has
# looked at the environment. Accelerate's and Transformers' names are here so that a script switches by
# its import (docs/migrating.md).
_WHERE = {
    "Accelerator": ".accelerator",
    "DistributedType": ".accelerate_compat", "GradientAccumulationPlugin": ".accelerate_compat",
    "ProjectConfiguration": ".accelerate_compat", "find_executable_batch_size": ".accelerate_compat",
    "skip_first_batches": ".accelerate_compat",
    "DataLoaderConfiguration": ".compat.accelerate_options",
    "DistributedDataParallelKwargs": ".compat.accelerate_options",
    "GeneralTracker": ".trackers",
    "Trainer": ".trainer", "TrainingConfig": ".trainer", "TrainingArguments": ".trainer",
    "EarlyStoppingCallback": ".trainer", "EvalPrediction": ".trainer", "HfArgumentParser": ".trainer",
    "TrainerCallback": ".trainer", "TrainerControl": ".trainer", "TrainerState": ".trainer",
}

__all__ = ["__version__", *sorted(_WHERE)]


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module 'braeburn' has no attribute {name!r}")
