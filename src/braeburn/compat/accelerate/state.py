"""``accelerator.state`` and ``accelerator.gradient_state``: Accelerate's two state objects, as views.

Accelerate keeps its process facts in the singletons ``AcceleratorState`` and ``GradientState`` and scripts read them
through the Accelerator (``accelerator.state.distributed_type``, ``accelerator.gradient_state.end_of_dataloader``).
braeburn keeps those facts on the Accelerator itself, so each object here is a live view of one Accelerator: it reads
the Accelerator at every access and holds nothing of its own. The attributes are the ones Accelerate 1.15 has, with
its values (``gradient_state.adjust_scheduler`` is Accelerate's ``plugin_kwargs.get("adjust_scheduler", False)``:
False unless a GradientAccumulationPlugin set it to False, as there). Setting an attribute is refused: braeburn's
Accelerator decides these values, and a write here would change nothing. :class:`AcceleratePreparedLoader`: a
prepared DataLoader reporting Accelerate's ``batch_size`` and ``drop_last``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

from ...data.loader import DeviceDataLoader


class _View:
    """Reads ``accelerator`` live; refuses writes (see the module doc)."""

    __slots__ = ("_accelerator",)

    def __init__(self, accelerator: Any):
        object.__setattr__(self, "_accelerator", accelerator)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"accelerator.{self._name}.{name} = ... is not supported: braeburn's Accelerator decides "
                        f"{name} itself; pass it to Accelerator(...) instead")

    _name = "state"


class DynamoBackend(str, Enum):
    """Accelerate's DynamoBackend, for the two backends braeburn has (equal to Accelerate's members by value)."""

    NO = "NO"
    INDUCTOR = "INDUCTOR"


@dataclass(frozen=True)
class TorchDynamoPlugin:
    """Accelerate's TorchDynamoPlugin's fields, with the values Accelerate would hold for the same settings."""

    backend: DynamoBackend = DynamoBackend.NO
    mode: str = "default"
    fullgraph: bool = False
    dynamic: bool | None = None
    options: Any = None
    disable: bool = False
    use_regional_compilation: bool = False


class AcceleratorState(_View):
    """Accelerate's ``AcceleratorState``: where and how this process trains."""

    __slots__ = ()
    _name = "state"
    deepspeed_plugin = None
    fsdp_plugin = None
    megatron_lm_plugin = None
    torch_tp_plugin = None
    debug = False
    initialized = True
    fork_launched = False

    def __getattr__(self, name: str) -> Any:
        if name in ("distributed_type", "num_processes", "process_index", "local_process_index", "device",
                    "mixed_precision", "is_main_process", "is_local_main_process", "is_last_process",
                    "use_distributed", "is_fsdp2", "split_batches"):
            return getattr(self._accelerator, name)
        raise AttributeError(f"accelerator.state.{name}: braeburn's state has Accelerate's distributed_type, "
                             "num_processes, process_index, local_process_index, device, mixed_precision, "
                             "is_main_process, is_local_main_process, is_last_process, use_distributed, backend; "
                             f"{name} is not one of them")

    @property
    def backend(self) -> str | None:
        return self._accelerator.plan.backend if self._accelerator.num_processes > 1 else None

    @property
    def dynamo_plugin(self) -> "TorchDynamoPlugin | None":
        return getattr(self._accelerator, "_dynamo_plugin", None)

    @property
    def default_device(self) -> Any:
        return self._accelerator.device

    def wait_for_everyone(self) -> None:
        self._accelerator.wait_for_everyone()

    def __repr__(self) -> str:
        a = self._accelerator
        return (f"Distributed environment: {a.distributed_type}\nNum processes: {a.num_processes}\n"
                f"Process index: {a.process_index}\nLocal process index: {a.local_process_index}\n"
                f"Device: {a.device}\n\nMixed precision type: {a.mixed_precision}\n")


class GradientState(_View):
    """Accelerate's ``GradientState``: where the accumulation window and the current DataLoader stand."""

    __slots__ = ()
    _name = "gradient_state"
    initialized = True

    @property
    def sync_gradients(self) -> bool:
        return self._accelerator.sync_gradients

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        return self._accelerator._accumulation_plugin_kwargs()

    @property
    def num_steps(self) -> int:
        return self.plugin_kwargs.get("num_steps", 1)

    @property
    def adjust_scheduler(self) -> bool:
        return self.plugin_kwargs.get("adjust_scheduler", False)

    @property
    def sync_with_dataloader(self) -> bool:
        return self.plugin_kwargs.get("sync_with_dataloader", True)

    @property
    def active_dataloader(self) -> Any:
        return self._accelerator._tracker.active

    @property
    def in_dataloader(self) -> bool:
        return self.active_dataloader is not None

    @property
    def end_of_dataloader(self) -> bool:
        return self.in_dataloader and self.active_dataloader.end_of_dataloader

    @property
    def remainder(self) -> int:
        """Accelerate's: the samples of the dataset past the last whole global batch (-1 with drop_last, or
        outside a loop, or where the length is unknown)."""
        loader = self.active_dataloader
        if loader is None or loader.original.drop_last or not loader.total_batch_size:
            return -1
        try:
            return loader.total_dataset_length % loader.total_batch_size
        except TypeError:  # an IterableDataset without a length
            return -1

    def __repr__(self) -> str:
        return (f"Sync Gradients: {self.sync_gradients}\nAt end of current dataloader: {self.end_of_dataloader}\n"
                f"Extra samples added: {self.remainder}\nGradient accumulation plugin: {self.plugin_kwargs}\n")


class AcceleratePreparedLoader(DeviceDataLoader):
    """A prepared loader reporting Accelerate's values: its prepared map-style loader batches through a batch
    sampler, so ``batch_size`` is None and ``drop_last`` False there (``per_process_batch_size`` is the size)."""

    @property
    def batch_size(self) -> int | None:
        return self.original.batch_size if isinstance(self.original.dataset, torch.utils.data.IterableDataset) else None

    @property
    def drop_last(self) -> bool:
        return self.original.drop_last if isinstance(self.original.dataset, torch.utils.data.IterableDataset) else False


__all__ = ["AcceleratePreparedLoader", "AcceleratorState", "DynamoBackend", "GradientState", "TorchDynamoPlugin"]
