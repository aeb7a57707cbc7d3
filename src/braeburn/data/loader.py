"""Getting batches onto the device: batch moving, a sharding sampler, and the prepared DataLoader.

A prepared DataLoader (:class:`DeviceDataLoader`) gives each process its own shard of every global
batch, reshuffles each epoch from a seed, moves each batch to the device, and knows its position
(epoch, batches already yielded) so a resumed run draws exactly the batches the uninterrupted run
would have drawn.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import (BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler, SequentialSampler,
                              TensorDataset, default_collate)

from ..devices.host import HostFacts
from ..warn import warn


# -- walking nested batches --------------------------------------------------------------------
def apply_to_tensors(fn: Callable[[torch.Tensor], Any], data: Any) -> Any:
    """``data`` with ``fn`` applied to every tensor inside tuples, lists, namedtuples and mappings."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(apply_to_tensors(fn, item) for item in data))
    if isinstance(data, (tuple, list)):
        return type(data)(apply_to_tensors(fn, item) for item in data)
    if isinstance(data, Mapping):
        return _rebuild_mapping(data, {key: apply_to_tensors(fn, value) for key, value in data.items()})
    return data


def _rebuild_mapping(original: Mapping, items: dict) -> Mapping:
    # Keep the user's mapping type (OrderedDict, Transformers' ModelOutput...) where it can be copied.
    try:
        rebuilt = copy.copy(original)
        for key, value in items.items():
            rebuilt[key] = value
        return rebuilt
    except Exception:  # immutable or exotic mapping: a plain dict carries the same data
        return items


def move_to_device(data: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move every tensor in ``data`` to ``device``; objects with their own ``.to()`` (BatchEncoding) use it."""
    if isinstance(data, torch.Tensor):  # already there (the CPU): the same tensor .to() would return, without a call
        return data if data.device == device else data.to(device, non_blocking=non_blocking)
    if _has_to(data):
        try:
            return data.to(device, non_blocking=non_blocking)
        except TypeError:  # a .to() that takes no non_blocking
            return data.to(device)
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(move_to_device(item, device, non_blocking) for item in data))
    if isinstance(data, (tuple, list)):
        return type(data)(move_to_device(item, device, non_blocking) for item in data)
    if isinstance(data, Mapping):
        return _rebuild_mapping(data, {key: move_to_device(value, device, non_blocking) for key, value in data.items()})
    return data


def _has_to(data: Any) -> bool:
    return callable(getattr(data, "to", None)) and not isinstance(data, (str, bytes))


def _float64_names(data: Any, name: str = "batch") -> list[str]:
    """Where ``data`` holds float64 tensors: "batch['x']", "batch[0]"..."""
    if isinstance(data, torch.Tensor):
        return [name] if data.dtype == torch.float64 else []
    if isinstance(data, (tuple, list)):
        return [found for i, item in enumerate(data) for found in _float64_names(item, f"{name}[{i}]")]
    if isinstance(data, Mapping):
        return [found for key, value in data.items() for found in _float64_names(value, f"{name}[{key!r}]")]
    return []


def _holds_float64(data: Any) -> bool:
    """Whether ``data`` holds a float64 tensor (the walk of :func:`_float64_names`, with no names built)."""
    if isinstance(data, torch.Tensor):
        return data.dtype == torch.float64
    if isinstance(data, (tuple, list)):
        return any(_holds_float64(item) for item in data)
    if isinstance(data, Mapping):
        return any(_holds_float64(value) for value in data.values())
    return False


def model_is_float64(model: torch.nn.Module) -> bool:
    """True when the model computes in float64: its first floating-point parameter is float64 (as a model's
    ``dtype`` is read in Transformers)."""
    for tensor in model.parameters():
        if tensor.is_floating_point():
            return tensor.dtype == torch.float64
    return False


def float64_model_kept(model: torch.nn.Module, cast_reason: str | None) -> bool:
    """Where the device has no float64 (``cast_reason``, the device kind's ``float64_cast_reason``), a float64
    model is cast to float32 (:func:`cast_float64_model`); elsewhere a model the user made float64 trains in
    float64 as given, with one line saying so. True when a float64 model is kept: its batches then stay float64."""
    if cast_reason:
        cast_float64_model(model, cast_reason)
        return False
    if not model_is_float64(model):
        return False
    warn(f"braeburn: the model is float64: it trains in float64 as given (call model.float() before prepare() to "
         "train in float32, which is faster and what a device without float64 would use)", stacklevel=4)
    return True


def float64_batch_reason(cast_reason: str | None, float64_model: bool) -> str | None:
    """Why float64 batches become float32: the device has no float64 (``cast_reason``), or the model computes in
    float32 (float64 data, as numpy gives it, would fail in its first layer); None where a float64 model is fed."""
    if cast_reason:
        return cast_reason
    return None if float64_model else "the model computes in float32"


def cast_float64_model(model: torch.nn.Module, reason: str) -> None:
    """Cast ``model``'s float64 parameters and buffers to float32 in place (the same Parameter objects, so an
    optimizer made before keeps them); one line names them and gives ``reason`` (the device kind's
    ``float64_cast_reason``: on a device without float64, ``model.to(device)`` would fail with "Cannot convert a
    MPS Tensor to float64 dtype")."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    names = [name for name, tensor in tensors if tensor.dtype == torch.float64]
    if not names:
        return
    for _, tensor in tensors:
        if tensor.dtype == torch.float64:
            tensor.data = tensor.data.float()
            if tensor.grad is not None:
                tensor.grad = tensor.grad.float()
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    warn(f"braeburn: the model's {shown} {'is' if len(names) == 1 else 'are'} float64; {reason}: cast to float32 "
         "before moving the model (call model.float() before prepare() to make this explicit)", stacklevel=5)


def cast_float64(batch: Any, announced: set[str], reason: str) -> Any:
    """``batch`` with float64 tensors cast to float32, on the CPU before the copy (see :func:`cast_float64_model`
    for ``reason``); the first time a name is cast, one line says so (``announced`` remembers the names)."""
    if not _holds_float64(batch):  # the common case, without building a name for every tensor
        return batch
    names = _float64_names(batch)
    new = [name for name in names if name not in announced]
    if new:
        announced.update(new)
        warn(f"braeburn: {', '.join(new)} {'is' if len(new) == 1 else 'are'} float64; {reason}: casting to float32 "
             "on the way to the device (build the dataset with float32, e.g. torch.tensor(x, dtype=torch.float32), "
             "to skip the cast)", stacklevel=3)
    return apply_to_tensors(lambda t: t.float() if t.dtype == torch.float64 else t, batch)


def ready_as_is(batch: Any, device: torch.device, float64_kept: bool) -> bool:
    """Whether ``batch``, a plain tuple, list or dict of plain tensors, is already on ``device`` and holds no float64
    tensor to cast (``float64_kept``: none is cast): then the loader yields its tensors in a shallow copy of it (a
    tuple as it is), with none of the walks of :func:`cast_float64` and :func:`move_to_device`, which would give the
    same tensors in a new container."""
    kind = type(batch)
    if kind is dict:
        batch = batch.values()
    elif kind is not tuple and kind is not list:
        return False
    for item in batch:
        if type(item) is not torch.Tensor or item.device != device or (item.dtype is torch.float64 and not float64_kept):
            return False
    return True


def collates_ready(loader: DataLoader, device: torch.device, float64_kept: bool) -> bool:
    """Whether each batch ``loader`` collates is ready for ``device`` as it comes (:func:`ready_as_is`, asked once an
    epoch instead of at each batch): a TensorDataset's tensors, all on ``device`` with no float64 to cast, stacked by
    torch's default_collate (or a collate that hands it tuple samples as they are: ``hands_tuples_to_default_collate``)
    in this process, which builds a new container for each batch."""
    collate = loader.collate_fn
    if type(loader.dataset) is not TensorDataset or loader.num_workers or loader.pin_memory or not (
            collate is default_collate or getattr(collate, "hands_tuples_to_default_collate", False)):
        return False
    return all(type(t) is torch.Tensor and t.device == device and (float64_kept or t.dtype is not torch.float64)
               for t in loader.dataset.tensors)


def first_dim(data: Any) -> int | None:
    """The batch size of the first tensor found in ``data``."""
    if isinstance(data, torch.Tensor):
        return data.shape[0] if data.dim() else 1
    if isinstance(data, (tuple, list)):  # before the Mapping ABC, whose check costs more
        if data and type(data[0]) is torch.Tensor:  # a TensorDataset's batch: its first tensor, no loop
            return data[0].shape[0] if data[0].dim() else 1
    elif isinstance(data, Mapping):
        data = data.values()
    else:
        return None
    for item in data:  # the first tensor found, depth first (as apply_to_tensors walks), without rebuilding data
        if isinstance(item, torch.Tensor):
            return item.shape[0] if item.dim() else 1
        size = first_dim(item)
        if size is not None:
            return size
    return None


# -- sharding -----------------------------------------------------------------------------------
class ShardSampler(Sampler[int]):
    """This process's indices: each global batch of ``num_replicas * batch_size`` samples is split in
    contiguous pieces, one per rank, so concatenating the ranks' batches (all_gather) gives the global
    batch in order. Uneven datasets are padded to whole global batches by repeating samples from the
    start, as Accelerate's even_batches does; :attr:`padding` says how many, so metrics can drop them.

    ``order`` (with ``shuffle``): "seeded" shuffles epoch ``e`` with ``seed + e`` (Accelerate's seedable sampler);
    "drawn" as torch's RandomSampler without a generator (Accelerate's default on one process): each epoch's seed is
    drawn from torch's generator when the epoch starts (kept in ``seed``, so that a resumed epoch replays it without
    drawing); "stream" as one generator seeded with ``seed`` giving a permutation per epoch (Accelerate's default on
    several processes, whose RandomSampler gets a generator seeded when the loader is prepared); "loader generator" as
    ``DataLoader(shuffle=True, generator=g)`` with ``g`` seeded with ``seed``: each epoch ``g`` gives the iteration's
    base seed, then the permutation.
    """

    def __init__(self, dataset_len: int, *, batch_size: int, num_replicas: int = 1, rank: int = 0,
                 shuffle: bool = False, seed: int = 0, drop_last: bool = False, order: str = "seeded"):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must be in [0, num_replicas={num_replicas})")
        self.dataset_len, self.batch_size = dataset_len, batch_size
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.order = shuffle, seed, drop_last, order
        self.epoch, self.skip_batches = 0, 0
        self._resuming = False
        self.restored = False  # the next pass resumes a saved run (its epoch's seed given back by load_state)
        chunk = num_replicas * batch_size
        if drop_last:
            self.total_size, self.padding = dataset_len // chunk * chunk, 0
        else:  # as Accelerate's even_batches: whole global batches, the last one filled from the start of the order
            self.total_size = math.ceil(dataset_len / chunk) * chunk if num_replicas > 1 else dataset_len
            self.padding = self.total_size - dataset_len

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def global_order(self) -> list[int]:
        """Every rank's indices for this epoch, in global-batch order (padding at the end)."""
        if self.shuffle:
            order = self._permutation()
        else:
            order = list(range(self.dataset_len))
        if self.padding and order:
            order += (order * math.ceil(self.padding / len(order)))[: self.padding]
        return order[: self.total_size]

    def _permutation(self) -> list[int]:
        generator = torch.Generator()
        if self.order == "drawn":
            if not self._resuming:  # what RandomSampler draws at the start of an epoch (a resumed one drew it before)
                self.seed = int(torch.empty((), dtype=torch.int64).random_().item())
            generator.manual_seed(self.seed)
        elif self.order in ("stream", "loader generator"):
            generator.manual_seed(self.seed)
            # RandomSampler takes two permutations an epoch (the second for num_samples % n, here none of it); a
            # DataLoader's own generator (DataLoader(generator=g)) also gives each iteration its base seed first
            for _ in range(self.epoch):
                self._base_seed_draw(generator)
                torch.randperm(self.dataset_len, generator=generator)
                torch.randperm(self.dataset_len, generator=generator)
            self._base_seed_draw(generator)
        else:
            generator.manual_seed(self.seed + self.epoch)
        return torch.randperm(self.dataset_len, generator=generator).tolist()

    def _base_seed_draw(self, generator: torch.Generator) -> None:
        if self.order == "loader generator":
            torch.empty((), dtype=torch.int64).random_(generator=generator)

    def rank_indices(self) -> list[int]:
        if self.num_replicas == 1:  # one process: the whole order, without a slice per batch
            return self.global_order()
        order, chunk, mine = self.global_order(), self.num_replicas * self.batch_size, []
        for start in range(0, len(order), chunk):
            piece = order[start:start + chunk]
            share = len(piece) // self.num_replicas
            mine.extend(piece[self.rank * share:(self.rank + 1) * share])
        return mine

    def last_batch_real_samples(self) -> int:
        """How many samples of the last global batch are real (not padding)."""
        chunk = self.num_replicas * self.batch_size
        last = self.total_size - (math.ceil(self.total_size / chunk) - 1) * chunk if self.total_size else 0
        return last - self.padding

    def __iter__(self) -> Iterator[int]:
        skip, self.skip_batches = self.skip_batches, 0  # a resume skips once, then epochs run whole
        # A drawn order replays the saved epoch's seed only in a resume (skip_first_batches alone draws anew, as
        # RandomSampler does in a new iteration)
        self._resuming, self.restored = skip > 0 and self.restored, False
        return iter(self.rank_indices()[skip * self.batch_size:])

    def __len__(self) -> int:
        return self.total_size // self.num_replicas


# -- which batch is being yielded (gather_for_metrics, gradient accumulation) -------------------
@dataclass
class BatchTracker:
    """Set by the DeviceDataLoader that yielded the latest batch; read by the Accelerator."""

    end_of_dataloader: bool = False
    remainder: int = -1  # real samples in the final global batch; -1 when nothing is padded
    active: Any = None  # the DeviceDataLoader being iterated (None between loops): Accelerate's active_dataloader


def dataloader_workers_default(host: HostFacts) -> tuple[int, str]:
    """The Trainer's DataLoader workers (``--dataloader_num_workers``) by default here, and why."""
    if host.workers_start_by_spawn:
        return 0, ("batches are loaded in the training process: on this OS DataLoader workers start by spawn, each "
                   "re-importing your script and unpickling the dataset (one worker took 11 s to start on a no-op "
                   "dataset on macOS), again at every epoch unless persistent, and they can deadlock on Python 3.12; "
                   "for data already in memory no worker is fastest. For slow loading (decoding images), pass "
                   "--dataloader_num_workers 2 --dataloader_persistent_workers true and keep the script's work "
                   "under `if __name__ == '__main__':`")
    return 0, ("batches are loaded in the training process, as in Transformers; workers start by fork here, so "
               "--dataloader_num_workers N is cheap to try when loading is slow")


_warned_spawn = False


def _warn_spawn_workers(loader: DataLoader, host: HostFacts | None) -> None:
    global _warned_spawn
    context = loader.multiprocessing_context
    method = getattr(context, "get_start_method", lambda: context)() if context is not None else None
    spawns = method == "spawn" or (method is None and host is not None and host.workers_start_by_spawn)
    if _warned_spawn or loader.num_workers == 0 or loader.persistent_workers or not spawns:
        return
    _warned_spawn = True
    warn(
        f"DataLoader(num_workers={loader.num_workers}) starts its workers by spawn on this system, at every "
        "epoch: each worker re-imports your script and unpickles the dataset, which can take seconds. Pass "
        "persistent_workers=True to pay that once, or num_workers=0 for data already in memory "
        "(and keep the training code under `if __name__ == '__main__':`).", stacklevel=4)


class DeviceDataLoader:
    """A prepared DataLoader: shards, reshuffles per epoch, moves batches, and can resume mid-epoch."""

    def __init__(self, loader: DataLoader, device: torch.device, *, pin_memory: bool = False,
                 num_processes: int = 1, process_index: int = 0, seed: int = 0,
                 tracker: BatchTracker | None = None, host: HostFacts | None = None,
                 float64_to_float32: str | Callable[[], str | None] | None = None, order: str = "seeded"):
        self.original, self.device = loader, device
        self._float64_reason = float64_to_float32  # a callable asks at each batch: the model may be prepared later
        self._cast_names: set[str] = set()
        self.non_blocking = pin_memory  # async copies only from pinned memory
        self.tracker = tracker if tracker is not None else BatchTracker()
        self.num_processes, self.seed = num_processes, seed
        self.epoch, self.batches_yielded, self._skip = 0, 0, 0
        self._restored = False  # load_state_dict of a saved run: the next pass resumes it
        self.end_of_dataloader = False  # this loader's latest batch was its last
        _warn_spawn_workers(loader, host)
        self.sampler: ShardSampler | None = None
        if _can_reshard(loader):
            self.sampler = ShardSampler(len(loader.dataset), batch_size=loader.batch_size,
                                        num_replicas=num_processes, rank=process_index,
                                        shuffle=isinstance(loader.sampler, RandomSampler), seed=seed,
                                        drop_last=loader.drop_last, order=order)
            self.loader = _rebuild(loader, self.sampler, pin_memory)
        elif num_processes > 1:
            raise ValueError(_cannot_shard_message(loader, num_processes))
        else:
            self.loader = loader  # a custom sampler, batch sampler or iterable dataset: used as it is

    @property
    def float64_to_float32(self) -> str | None:
        """Why float64 batches become float32 here; None: kept (cast_float64)."""
        reason = self._float64_reason
        return reason() if callable(reason) else reason

    # what code written for a DataLoader looks at
    @property
    def dataset(self):
        return self.original.dataset

    @property
    def per_process_batch_size(self) -> int | None:
        """Samples per batch on this process (the DataLoader's batch_size, or its batch sampler's)."""
        size = self.original.batch_size
        return size if size is not None else getattr(self.original.batch_sampler, "batch_size", None)

    @property
    def batch_size(self) -> int | None:
        """The DataLoader's batch_size (braeburn.Accelerator's loaders report Accelerate's value instead)."""
        return self.original.batch_size

    @property
    def drop_last(self) -> bool:
        """The DataLoader's drop_last."""
        return self.original.drop_last

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step across all processes."""
        size = self.per_process_batch_size
        return None if size is None else size * self.num_processes

    @property
    def total_dataset_length(self) -> int:
        """Samples in the dataset (all processes together), as Accelerate's prepared loader says."""
        return len(self.dataset)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` (the same seed and epoch always give the same order)."""
        if epoch != self.epoch:
            self.epoch, self.batches_yielded, self._skip = epoch, 0, 0

    def __iter__(self) -> Iterator[Any]:
        skip, self._skip = self._skip, 0
        batches = self._batches(skip)
        total = self._length()
        reason = self.float64_to_float32  # asked once an epoch: the model is prepared before its batches are drawn
        ready = total is not None and collates_ready(self.loader, self.device, reason is None)  # each batch as it is
        dataset = self.loader.dataset
        tensors = dataset.tensors if ready else None  # (tensors the dataset is given mid-epoch: checked as they come)
        if total is None:  # an IterableDataset without a length: one batch ahead tells the last one
            # each batch on the device before the next is collated, as Accelerate's loaders do: a collator that
            # fills the same dict or list each time must not change the batch about to be yielded
            batches = _with_last(self._on_device(batch, reason) for batch in batches)
        self.batches_yielded = skip
        outer, self.tracker.active = self.tracker.active, self  # (an eval loop inside a training loop: restored after)
        for item in batches:
            self.batches_yielded += 1
            if total is None:
                batch, last = item  # on the device already
            else:
                as_is = ready and dataset.tensors is tensors
                batch, last = item if as_is else self._on_device(item, reason), self.batches_yielded >= total
            self.tracker.end_of_dataloader = self.end_of_dataloader = last
            self.tracker.remainder = self._remainder() if last else -1
            yield batch
        self.epoch, self.batches_yielded = self.epoch + 1, 0
        if self.tracker.active is self:
            self.tracker.active = outer if outer is not self else None

    def _on_device(self, batch: Any, reason: str | None) -> Any:
        """``batch`` as the loop above yields it (float64 cast where ``reason`` says so, on the device)."""
        if ready_as_is(batch, self.device, reason is None):  # the common case: one walk, no rebuilt batch
            # a new list or dict (a tuple cannot change): a compute_loss that pops "labels" must not empty a
            # container the collator keeps (a pre-batched dataset), as move_to_device's copy never did
            return batch if type(batch) is tuple else batch.copy()
        if reason:
            batch = cast_float64(batch, self._cast_names, reason)
        return move_to_device(batch, self.device, non_blocking=self.non_blocking)

    def _length(self) -> int | None:
        try:
            return len(self)
        except TypeError:
            return None

    def _batches(self, skip: int) -> Iterator[Any]:
        restored, self._restored = self._restored, False
        if self.sampler is not None:
            self.sampler.set_epoch(self.epoch)
            self.sampler.skip_batches = skip  # skips indices, so skipped batches are never loaded
            self.sampler.restored = restored
        elif hasattr(self.loader.sampler, "set_epoch"):
            self.loader.sampler.set_epoch(self.epoch)
        if not skip or not restored:  # (skip_first_batches alone: a new pass, drawing as any does)
            iterator = iter(self.loader)
            if skip and self.sampler is None:
                for _ in range(skip):  # a sampler we do not own: skipping means drawing
                    next(iterator, None)
            return iterator
        # Starting an iterator draws a seed from torch's global generator. The saved run drew it at the
        # start of this epoch, before its state was saved, so a resumed epoch must not draw it again.
        saved_rng = torch.get_rng_state()
        iterator = iter(self.loader)
        torch.set_rng_state(saved_rng)
        if self.sampler is None:
            for _ in range(skip):  # a sampler we do not own: skipping means drawing
                next(iterator, None)
        return iterator

    def _remainder(self) -> int:
        if self.sampler is None or self.sampler.padding == 0:
            return -1
        return self.sampler.last_batch_real_samples()

    def state_dict(self) -> dict[str, Any]:
        if self.sampler is None:
            return {"epoch": self.epoch, "batches_yielded": self.batches_yielded, "seed": self.seed}
        # the order the run follows, and its seed (a drawn order: this epoch's), so that a resume follows it too
        return {"epoch": self.epoch, "batches_yielded": self.batches_yielded, "seed": self.sampler.seed,
                "order": self.sampler.order}

    def rebatch(self, batch_size: int) -> None:
        """Batches of ``batch_size`` from the next iteration on, in the same sample order (set the position
        with :meth:`load_state_dict`): auto_find_batch_size after an out-of-memory error. Only for a
        loader braeburn shards (a map-style dataset with batch_size=..., shuffle=True/False)."""
        if self.sampler is None:
            raise ValueError(f"rebatch({batch_size}): this loader has a sampler braeburn does not own, so its "
                             "batches cannot be regrouped; build it with batch_size=... and shuffle=True/False")
        old = self.sampler
        self.original = _rebuild(self.original, self.original.sampler, self.original.pin_memory, batch_size)
        self.sampler = ShardSampler(old.dataset_len, batch_size=batch_size, num_replicas=old.num_replicas,
                                    rank=old.rank, shuffle=old.shuffle, seed=old.seed, drop_last=old.drop_last,
                                    order=old.order)
        self.loader = _rebuild(self.original, self.sampler, self.non_blocking)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next batches are those the saved run would have drawn next."""
        self.epoch, self._skip = int(state["epoch"]), int(state["batches_yielded"])
        self.batches_yielded = self._skip
        if "seed" in state:  # load_state (skip_first_batches gives only the position)
            self._restored = True
        if "seed" in state and self.sampler is not None:
            self.seed = self.sampler.seed = int(state["seed"])
        if "order" in state and self.sampler is not None:
            self.sampler.order = str(state["order"])

    def __repr__(self) -> str:
        return (f"DeviceDataLoader(batches={len(self)}, batch_size={self.per_process_batch_size}, "
                f"device={self.device}, processes={self.num_processes}, epoch={self.epoch})")


def _with_last(batches: Iterator[Any]) -> Iterator[tuple[Any, bool]]:
    """(batch, is it the last one), reading one batch ahead (as Accelerate's prepared loaders do)."""
    iterator = iter(batches)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True


def _can_reshard(loader: DataLoader) -> bool:
    """Only the samplers DataLoader makes itself (shuffle=True/False) are replaced by a ShardSampler."""
    if isinstance(loader.dataset, IterableDataset) or loader.batch_size is None:
        return False
    sampler = loader.sampler
    if isinstance(sampler, RandomSampler):
        return not sampler.replacement and sampler.num_samples == len(loader.dataset)
    return isinstance(sampler, SequentialSampler) and type(loader.batch_sampler) is BatchSampler


def _cannot_shard_message(loader: DataLoader, num_processes: int) -> str:
    what = ("an IterableDataset" if isinstance(loader.dataset, IterableDataset)
            else f"a custom sampler ({type(loader.sampler).__name__}) or batch_sampler")
    return (f"prepare() got a DataLoader with {what}, which braeburn cannot split across {num_processes} "
            "processes. Build it with a map-style dataset and batch_size=..., shuffle=True/False (braeburn "
            "then shards it), or shard it yourself and keep it out of prepare().")


def _rebuild(loader: DataLoader, sampler: Sampler, pin_memory: bool, batch_size: int | None = None) -> DataLoader:
    extra: dict[str, Any] = {}
    if loader.num_workers > 0:
        extra = {"prefetch_factor": loader.prefetch_factor, "persistent_workers": loader.persistent_workers}
    batch_size = loader.batch_size if batch_size is None else batch_size
    return DataLoader(loader.dataset, batch_size=batch_size, sampler=sampler, drop_last=loader.drop_last,
                      collate_fn=loader.collate_fn, num_workers=loader.num_workers, pin_memory=pin_memory,
                      timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
                      multiprocessing_context=loader.multiprocessing_context, generator=loader.generator, **extra)


def truncate_padding(data: Any, keep: int) -> Any:
    """``data`` with only the first ``keep`` rows of every tensor (sequences of samples too)."""
    if isinstance(data, torch.Tensor):
        return data[:keep]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)) and not any(
            isinstance(item, (torch.Tensor, Mapping)) for item in data):
        return data[:keep]
    return apply_to_tensors(lambda tensor: tensor[:keep], data)


__all__ = ["DeviceDataLoader", "ShardSampler", "BatchTracker", "move_to_device", "apply_to_tensors",
           "truncate_padding", "first_dim", "cast_float64", "cast_float64_model", "float64_model_kept",
           "float64_batch_reason", "model_is_float64"]
