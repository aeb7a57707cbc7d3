"""Batch moving, sharding with padding, per-epoch reshuffles, and exact mid-epoch resume."""

from __future__ import annotations

import collections
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from braeburn.data import loader as data_module
from braeburn.data.loader import DeviceDataLoader, ShardSampler, move_to_device, truncate_padding
from tests.conftest import APPLE_M, LINUX_CPU

CPU = torch.device("cpu")


def _loader(n=10, batch_size=4, shuffle=True, **kwargs):
    return DataLoader(TensorDataset(torch.arange(n)), batch_size=batch_size, shuffle=shuffle, **kwargs)


def _epoch(loader):
    return [batch[0].tolist() for batch in loader]


class _HasTo:
    def __init__(self):
        self.moved_to = None

    def to(self, device):  # no non_blocking, like some third-party containers
        self.moved_to = device
        return self


def test_move_to_device_keeps_structure():
    Pair = collections.namedtuple("Pair", "x y")
    batch = {"a": torch.ones(2), "b": [torch.zeros(1), (torch.ones(1), "text")], "p": Pair(torch.ones(1), 3),
             "o": _HasTo()}
    moved = move_to_device(batch, torch.device("meta"))
    assert moved["a"].device.type == "meta" and moved["b"][0].device.type == "meta"
    assert moved["b"][1][1] == "text" and isinstance(moved["b"][1], tuple)
    assert isinstance(moved["p"], Pair) and moved["p"].y == 3 and moved["p"].x.device.type == "meta"
    assert moved["o"].moved_to == torch.device("meta")


def test_move_batch_encoding():
    from transformers import BatchEncoding

    encoding = BatchEncoding({"input_ids": torch.ones(2, 3, dtype=torch.long)})
    moved = move_to_device(encoding, torch.device("meta"))
    assert isinstance(moved, BatchEncoding) and moved["input_ids"].device.type == "meta"


def test_shards_cover_the_dataset_with_padding_from_the_start():
    ranks = [ShardSampler(11, batch_size=4, num_replicas=2, rank=r) for r in range(2)]
    assert ranks[0].padding == 5 and len(ranks[0]) == 8
    per_rank = [r.rank_indices() for r in ranks]
    # as Accelerate's even_batches (its BatchSamplerShard): whole batches on every rank; global batch 1: 0..7 split
    # in halves; global batch 2: 8, 9, 10, then 0..4 from the start of the order
    assert per_rank == [[0, 1, 2, 3, 8, 9, 10, 0], [4, 5, 6, 7, 1, 2, 3, 4]]
    assert ranks[0].last_batch_real_samples() == 3
    one = ShardSampler(11, batch_size=4)  # one process: no padding, a short last batch (Accelerate shards nothing)
    assert one.padding == 0 and one.rank_indices() == list(range(11))


def test_drop_last_drops_the_uneven_global_batch():
    sampler = ShardSampler(11, batch_size=4, num_replicas=2, rank=1, drop_last=True)
    assert sampler.rank_indices() == [4, 5, 6, 7] and sampler.padding == 0


def test_same_seed_same_order_and_epochs_reshuffle():
    first, second = (DeviceDataLoader(_loader(), CPU, seed=7) for _ in range(2))
    epoch0 = _epoch(first)
    assert epoch0 == _epoch(second)
    epoch1 = _epoch(first)  # a finished pass moves to the next epoch by itself
    assert sorted(sum(epoch1, [])) == list(range(10)) and epoch1 != epoch0
    other_seed = DeviceDataLoader(_loader(), CPU, seed=8)
    assert _epoch(other_seed) != epoch0
    first.set_epoch(0)
    assert _epoch(first) == epoch0


def test_resume_mid_epoch_draws_the_same_batches():
    loader = DeviceDataLoader(_loader(n=40, batch_size=4), CPU, seed=3)
    _epoch(loader)
    iterator = iter(loader)
    seen = [next(iterator)[0].tolist() for _ in range(3)]
    state = loader.state_dict()
    assert state["epoch"] == 1 and state["batches_yielded"] == 3
    rest = [batch[0].tolist() for batch in iterator]
    resumed = DeviceDataLoader(_loader(n=40, batch_size=4), CPU, seed=99)
    resumed.load_state_dict(state)
    assert len(resumed) == 10
    assert [batch[0].tolist() for batch in resumed] == rest
    assert len(seen) + len(rest) == 10


def test_loader_attributes_and_len():
    prepared = DeviceDataLoader(_loader(n=10, batch_size=4), CPU, num_processes=2, process_index=1, seed=0)
    assert prepared.per_process_batch_size == 4 and len(prepared.dataset) == 10 and len(prepared) == 2
    assert prepared.batch_size == 4  # the DataLoader's (braeburn.Accelerator's loaders report Accelerate's None)
    assert prepared.total_batch_size == 8 and prepared.total_dataset_length == 10 and prepared.drop_last is False
    assert DeviceDataLoader(_loader(n=10, batch_size=4, drop_last=True), CPU, seed=0).drop_last is True


def test_tracker_marks_the_last_batch_and_remainder():
    prepared = DeviceDataLoader(_loader(n=11, batch_size=4, shuffle=False), CPU, num_processes=2, process_index=0)
    marks = [(prepared.tracker.end_of_dataloader, prepared.tracker.remainder) for _ in prepared]
    assert marks == [(False, -1), (True, 3)]


def test_custom_sampler_passes_through_on_one_process_and_is_refused_on_two():
    loader = DataLoader(TensorDataset(torch.arange(6)), batch_size=2, sampler=[5, 4, 3, 2, 1, 0])
    assert _epoch(DeviceDataLoader(loader, CPU)) == [[5, 4], [3, 2], [1, 0]]
    with pytest.raises(ValueError, match="custom sampler.*2 processes"):
        DeviceDataLoader(loader, CPU, num_processes=2, process_index=0)


def test_truncate_padding_nested():
    data = {"a": torch.arange(4), "b": (torch.arange(8).view(4, 2),)}
    cut = truncate_padding(data, 3)
    assert cut["a"].tolist() == [0, 1, 2] and cut["b"][0].shape == (3, 2)
    assert truncate_padding(["x", "y", "z"], 2) == ["x", "y"]


@pytest.fixture
def fresh_spawn_warning(monkeypatch):
    monkeypatch.setattr(data_module, "_warned_spawn", False)


def test_spawn_warning_only_where_workers_spawn_each_epoch(fresh_spawn_warning):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DeviceDataLoader(_loader(num_workers=2), CPU, host=LINUX_CPU)
        DeviceDataLoader(_loader(num_workers=2, persistent_workers=True), CPU, host=APPLE_M)
        DeviceDataLoader(_loader(num_workers=0), CPU, host=APPLE_M)
    assert not [w for w in caught if "spawn" in str(w.message)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DeviceDataLoader(_loader(num_workers=2), CPU, host=APPLE_M)
        DeviceDataLoader(_loader(num_workers=2), CPU, host=APPLE_M)  # said once
    spawn = [w for w in caught if "spawn" in str(w.message)]
    assert len(spawn) == 1 and "persistent_workers=True" in str(spawn[0].message)


def test_a_batch_already_on_the_device_skips_the_walks_in_a_shallow_copy(monkeypatch):
    """The common case (a tuple, list or dict of tensors on the device, nothing to cast) skips the walks that would
    rebuild it with the same tensors (a list or dict is yielded as a shallow copy: code that pops a key must not
    change the collator's own container); a batch that needs a cast still gets one, in a new container."""
    made = []

    def collate(samples):
        x, y = (torch.stack(column) for column in zip(*samples))
        made.append({"x": x, "y": y} if len(made) % 2 else [x, y])  # a list, then a dict
        return made[-1]

    walked = []
    monkeypatch.setattr(data_module, "move_to_device", lambda batch, *a, **k: walked.append(batch) or batch)
    loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.arange(8)), batch_size=2, collate_fn=collate)
    batches = list(DeviceDataLoader(loader, CPU, float64_to_float32="the model computes in float32"))
    assert not walked and [type(batch) for batch in batches] == [type(batch) for batch in made]
    for batch, mine in zip(batches, made):  # the same tensors, in a new container
        pairs = [(batch[key], mine[key]) for key in mine] if type(mine) is dict else list(zip(batch, mine))
        assert batch is not mine and len(batch) == len(mine) and all(a is b for a, b in pairs)
    tuples = DataLoader(TensorDataset(torch.randn(4, 3), torch.arange(4)), batch_size=2,
                        collate_fn=lambda samples: made.append(tuple(torch.stack(c) for c in zip(*samples))) or made[-1])
    assert [id(batch) for batch in DeviceDataLoader(tuples, CPU)] == [id(batch) for batch in made[-2:]]  # immutable

    float64 = DataLoader(TensorDataset(torch.randn(4, 3, dtype=torch.float64), torch.arange(4)), batch_size=2)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cast's one line
        cast = list(DeviceDataLoader(float64, CPU, float64_to_float32="the model computes in float32"))
    assert [batch[0].dtype for batch in cast] == [torch.float32, torch.float32]


class _Stream(IterableDataset):
    """Six samples, without a length: the prepared loader reads one batch ahead to tell the last one."""

    def __iter__(self):
        return iter([{"x": torch.full((2,), float(i))} for i in range(6)])


@pytest.mark.parametrize("container", [dict, list])
def test_a_stream_whose_collator_refills_one_container_yields_each_batch_once(container):
    """A collator that fills the same dict (or list) at every batch: reading one batch ahead must not overwrite the
    batch about to be yielded (Accelerate's prepared loader moves each batch to the device before the next is
    collated, so each batch comes once, in order)."""
    buffer = container()

    def collate(samples):
        stacked = torch.stack([sample["x"] for sample in samples])
        if container is dict:
            buffer["x"] = stacked
        else:
            buffer[:] = [stacked]
        return buffer

    loader = DeviceDataLoader(DataLoader(_Stream(), batch_size=2, collate_fn=collate), CPU)
    firsts = [(batch["x"] if container is dict else batch[0])[:, 0].tolist() for batch in loader]
    assert firsts == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]] and loader.end_of_dataloader


def test_a_tensor_datasets_default_batches_are_yielded_as_collated_with_no_check_per_batch(monkeypatch):
    """A TensorDataset whose tensors are on the device, nothing to cast, stacked by default_collate in this process:
    every batch is ready, so the loader asks once an epoch (collates_ready) and yields each as collated, without the
    per-batch check; float64 to cast, another collate or workers keep the check."""
    checked = []
    real = data_module.ready_as_is
    monkeypatch.setattr(data_module, "ready_as_is", lambda *args: checked.append(1) or real(*args))
    dataset = TensorDataset(torch.randn(6, 3), torch.arange(6))
    plain = DeviceDataLoader(DataLoader(dataset, batch_size=2, shuffle=True), CPU)
    batches = list(plain)
    assert not checked and len(batches) == 3 and all(batch[0].shape == (2, 3) for batch in batches)
    assert sorted(torch.cat([batch[1] for batch in batches]).tolist()) == list(range(6))
    assert data_module.collates_ready(plain.loader, CPU, float64_kept=True)

    float64 = DataLoader(TensorDataset(torch.randn(4, 3, dtype=torch.float64), torch.arange(4)), batch_size=2)
    assert data_module.collates_ready(float64, CPU, float64_kept=True)  # kept as it is: ready
    assert not data_module.collates_ready(float64, CPU, float64_kept=False)  # cast on the way: checked per batch
    assert not data_module.collates_ready(DataLoader(dataset, batch_size=2, collate_fn=lambda s: s), CPU, True)
    assert not data_module.collates_ready(DataLoader(dataset, batch_size=2, num_workers=1), CPU, True)
    assert not data_module.collates_ready(DataLoader(dataset, batch_size=2), torch.device("meta"), True)
    list(DeviceDataLoader(DataLoader(dataset, batch_size=2, collate_fn=lambda s: [t for t in zip(*s)]), CPU))
    assert len(checked) == 3  # another collate: each batch checked


def test_tensors_a_tensor_dataset_is_given_mid_epoch_are_checked_as_they_come():
    """The once-an-epoch check holds for the tensors the dataset had when the epoch began: float64 tensors given to it
    part way through (a curriculum callback, say) are cast on the way, as each batch was before the check moved."""
    dataset = TensorDataset(torch.randn(6, 3), torch.arange(6))
    loader = DeviceDataLoader(DataLoader(dataset, batch_size=2), CPU, float64_to_float32="the model is float32")
    dtypes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cast's one line
        for batch in loader:
            dtypes.append(batch[0].dtype)
            dataset.tensors = (dataset.tensors[0].double(), dataset.tensors[1])
    assert dtypes == [torch.float32] * 3
