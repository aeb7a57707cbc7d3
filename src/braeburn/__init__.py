"""braeburn: train PyTorch models fast on MPS, CUDA or the CPU, and on many GPUs, with one script."""

from . import _early  # first: records the environment before anything loads torch

_early.apply_import_defaults()  # PYTORCH_ENABLE_MPS_FALLBACK=1 on macOS for `python train.py` (user's value wins)

__version__ = "0.1.0"

__all__ = ["__version__", "Accelerator", "Trainer", "TrainingConfig"]


def __getattr__(name: str):
    # Lazy, so `import braeburn` does not load torch before _early has looked at the environment.
    if name == "Accelerator":
        from .accelerator import Accelerator

        return Accelerator
    if name in ("Trainer", "TrainingConfig"):
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'braeburn' has no attribute {name!r}")
