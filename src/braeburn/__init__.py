"""braeburn: train PyTorch models fast on MPS, CUDA or the CPU, and on many GPUs, with one script."""

from . import _early  # first: records the environment before anything loads torch

from .devices.environment import apply_import_defaults  # noqa: E402  (no torch: device kinds import it in methods)

apply_import_defaults()  # PYTORCH_ENABLE_MPS_FALLBACK=1 on macOS for `python train.py` (user's value wins)

__version__ = "0.1.0"

# name -> module (relative); loaded lazily, so `import braeburn` does not load torch before _early has
# looked at the environment. Accelerate's and Transformers' names are here so that a script switches by
# its import (docs/migrating.md): Accelerator, Trainer and TrainingConfig are braeburn's own classes
# (braeburn.accelerator.core.Accelerator, braeburn.trainer's CoreTrainer and CoreTrainingConfig) composed with the
# peers' layers in compat/.
_WHERE = {
    "Accelerator": ".compat.accelerate.accelerator",
    "DistributedType": ".compat.accelerate.api", "GradientAccumulationPlugin": ".compat.accelerate.api",
    "ProjectConfiguration": ".compat.accelerate.api", "find_executable_batch_size": ".compat.accelerate.api",
    "skip_first_batches": ".compat.accelerate.api",
    "DataLoaderConfiguration": ".compat.accelerate.options",
    "DistributedDataParallelKwargs": ".compat.accelerate.options",
    "GeneralTracker": ".accelerator.trackers",
    "Trainer": ".compat.transformers.trainer", "TrainingArguments": ".compat.transformers.arguments",
    "HfArgumentParser": ".compat.transformers.trainer_api", "TrainerCallback": ".compat.transformers.callbacks",
    "TrainerControl": ".compat.transformers.callbacks",
    "EarlyStoppingCallback": ".trainer", "EvalPrediction": ".trainer", "TrainerState": ".trainer",
}
_WHERE["TrainingConfig"] = ".compat.transformers.arguments"  # Transformers' fields too, with braeburn's defaults
_ALIASES: dict[str, str] = {}

__all__ = ["__version__", *sorted([*_WHERE, *_ALIASES])]


def __getattr__(name: str):
    name_there = _ALIASES.get(name, name)
    if name_there in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name_there], __name__), name_there)
    if name in ("DefaultFlowCallback", "PrinterCallback", "ProgressCallback"):  # Transformers' built-in callbacks
        from .compat.transformers.not_here import refuse_callback

        refuse_callback(name)
    raise AttributeError(f"module 'braeburn' has no attribute {name!r}")


def _give_public_names_at_old_paths() -> None:
    """braeburn.trainer.Trainer, braeburn.trainer.loop.Trainer, braeburn.accelerator.Accelerator ... (each core
    package's PUBLIC_NAMES) are the public classes, as before the layout: the core packages ask this module for them
    (the core never names a peer's layer). Both packages are light: no torch."""
    from . import accelerator, trainer

    accelerator.resolve_public = trainer.resolve_public = __getattr__


_give_public_names_at_old_paths()


# Where modules lived before the package was laid out by concern (docs/architecture.md). A script that imports an
# old path gets the same module object under its old name, so monkeypatching and isinstance checks still agree.
_MOVED = {
    "braeburn.precision": "braeburn.plan.precision", "braeburn.precision_trial": "braeburn.plan.precision_trial",
    "braeburn.compile_policy": "braeburn.plan.compile_policy", "braeburn.compile_gains": "braeburn.plan.compile_gains",
    "braeburn.envvars": "braeburn.plan.envvars", "braeburn.config_files": "braeburn.plan.config_files",
    "braeburn.fallback": "braeburn.devices.fallback",
    "braeburn.collate": "braeburn.data.collate", "braeburn.batch_size": "braeburn.data.batch_size",
    "braeburn.state": "braeburn.checkpoints.state", "braeburn.manifest": "braeburn.checkpoints.manifest",
    "braeburn.safetensors_file": "braeburn.checkpoints.safetensors_file",
    "braeburn.host_copy": "braeburn.checkpoints.host_copy", "braeburn.no_follow": "braeburn.checkpoints.no_follow",
    "braeburn.output_lock": "braeburn.checkpoints.output_lock",
    "braeburn.accelerator_compile": "braeburn.accelerator.compile",
    "braeburn.prepared_optim": "braeburn.accelerator.prepared_optim", "braeburn.trackers": "braeburn.accelerator.trackers",
    "braeburn.probe": "braeburn.accelerator.probe",
    "braeburn.launch_config": "braeburn.cli.launch_config", "braeburn.workloads": "braeburn.cli.workloads",
    "braeburn.report": "braeburn.cli.report",
    "braeburn.accelerate_compat": "braeburn.compat.accelerate.api",
    "braeburn.compat.accelerate_options": "braeburn.compat.accelerate.options",
    "braeburn.compat.accelerate_config": "braeburn.compat.accelerate.config_file",
    "braeburn.compat.lightning_module": "braeburn.compat.lightning.module",
    "braeburn.compat.lightning_options": "braeburn.compat.lightning.options",
    "braeburn.trainer.hf_compat": "braeburn.compat.transformers.trainer_api",
    "braeburn.trainer.hf_args": "braeburn.compat.transformers.arguments",
    "braeburn.trainer.hf_callbacks": "braeburn.compat.transformers.callbacks",
    "braeburn.trainer.hf_overrides": "braeburn.compat.transformers.overrides",
    "braeburn.hf_io": "braeburn.compat.transformers.files",
    "braeburn.ownership": "braeburn.checkpoints.ownership",
    "braeburn.option_spelling": "braeburn.plan.option_spelling",
    "braeburn.checkpoint_replay": "braeburn.accelerator.checkpoint_replay",
}


class _MovedModules:
    """A meta-path finder: an old module path imports the module at its new path (the same object)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in _MOVED:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, _MovedModules)

    @staticmethod
    def create_module(spec):
        import importlib

        module = importlib.import_module(_MOVED[spec.name])
        spec.loader_state = module.__spec__  # the import system sets the old path's spec on the module next
        return module

    @staticmethod
    def exec_module(module):
        # Give the module back its own spec: with the old path's, a relative import inside one of its functions
        # warns (__package__ != __spec__.parent; an error under -W error) and importlib.reload does nothing.
        if getattr(module.__spec__, "loader", None) is _MovedModules:
            module.__spec__ = module.__spec__.loader_state


def _install_moved_modules() -> None:
    import sys

    if not any(finder is _MovedModules for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules)


_install_moved_modules()
