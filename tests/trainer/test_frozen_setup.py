"""The Trainer freezes Python's heap after the first step (gc.freeze) and unfreezes it when training ends, so a full
collection during training walks only what the run made since; a process that manages its collector itself is left
as it is."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch.utils.data import TensorDataset

import braeburn
from braeburn.trainer.callbacks import Callback
from braeburn.trainer import frozen_setup
from braeburn.trainer.frozen_setup import IMMORTAL_SLACK, FrozenSetup


class FreezeCounts(Callback):
    def __init__(self):
        self.counts = []

    def on_step_end(self, trainer, state):
        self.counts.append(gc.get_freeze_count())


def _train(tmp_path) -> list[int]:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(48, 8, generator=generator), torch.randint(0, 3, (48,), generator=generator))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    config = braeburn.TrainingConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16,
                                     num_train_epochs=1, save_strategy="no", use_cpu=True, report_to="none")
    seen = FreezeCounts()
    braeburn.Trainer(model, config, train_dataset=data, loss_fn=torch.nn.functional.cross_entropy,
                     callbacks=[seen]).train()
    return seen.counts


@pytest.fixture
def unfrozen_heap():
    gc.unfreeze()
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_the_heap_is_frozen_from_the_first_step_and_unfrozen_after_training(tmp_path, unfrozen_heap):
    counts = _train(tmp_path)
    assert len(counts) == 3
    assert all(count > 1000 for count in counts)  # the model, the libraries: out of the collector's walks
    assert gc.get_freeze_count() <= IMMORTAL_SLACK  # after train(): the process's collector as it was


def test_python_312s_immortal_objects_in_the_permanent_generation_are_no_freeze(tmp_path, unfrozen_heap, monkeypatch):
    """CPython 3.12 counts its 375 tracked immortal objects as frozen after a full collection; braeburn froze nothing
    there when it took them for the user's freeze."""
    real = gc.get_freeze_count
    monkeypatch.setattr(frozen_setup, "IMMORTAL_SLACK", 1000)  # (as on 3.12)
    monkeypatch.setattr(frozen_setup.gc, "get_freeze_count", lambda: real() or 375)
    counts = _train(tmp_path)
    assert len(counts) == 3 and all(count > 1000 for count in counts)


def test_a_heap_the_user_froze_or_a_collector_turned_off_is_left_alone(tmp_path, unfrozen_heap):
    gc.freeze()
    frozen = gc.get_freeze_count()
    counts = _train(tmp_path)  # (frozen objects that die leave the count: it can only fall)
    assert len(counts) == 3 and all(0 < count <= frozen for count in counts)  # nothing frozen on top
    assert 0 < gc.get_freeze_count() <= frozen  # and nothing unfrozen: the user's freeze stands
    gc.unfreeze()
    gc.disable()
    assert _train(tmp_path) == [0] * 3 and not gc.isenabled()


def test_release_without_a_freeze_leaves_the_collector_alone(unfrozen_heap):
    gc.freeze()
    frozen = gc.get_freeze_count()
    setup = FrozenSetup()
    setup.after_first_step()  # already frozen by someone else: not ours to undo
    setup.release()
    assert 0 < gc.get_freeze_count() <= frozen and setup.pending


class AgedCycle(Callback):
    """A reference cycle holding a tensor, aged into the oldest generation before the first step and dropped there;
    at step 2 the user collects (gc.collect()) and looks whether the tensor is gone."""

    def on_train_begin(self, trainer, state):
        cycle = {"tensor": torch.zeros(1000)}
        cycle["self"] = cycle
        self.tensor = weakref.ref(cycle["tensor"])
        gc.collect(1)
        gc.collect(1)  # survived two young collections while in use: in the oldest generation, like setup's objects
        del cycle

    def on_step_end(self, trainer, state):
        if state.global_step == 2:
            gc.collect()
            self.alive_after_collect = self.tensor() is not None
            self.frozen = gc.get_freeze_count()


def _train_aged_cycle(tmp_path, **options) -> AgedCycle:
    data = TensorDataset(torch.randn(48, 8), torch.randint(0, 3, (48,)))
    model = torch.nn.Linear(8, 3)
    config = braeburn.TrainingConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16,
                                     num_train_epochs=1, save_strategy="no", use_cpu=True, report_to="none",
                                     **options)
    probe = AgedCycle()
    braeburn.Trainer(model, config, train_dataset=data, loss_fn=torch.nn.functional.cross_entropy,
                     callbacks=[probe]).train()
    return probe


def test_freeze_heap_false_leaves_the_collector_alone_so_a_collection_frees_old_cycles(tmp_path, unfrozen_heap):
    kept = _train_aged_cycle(tmp_path)  # the default: the cost frozen_setup.py and docs/distributed.md state
    assert kept.frozen > 1000 and kept.alive_after_collect
    off = _train_aged_cycle(tmp_path, freeze_heap=False)
    assert off.frozen <= IMMORTAL_SLACK and not off.alive_after_collect
    assert gc.get_freeze_count() <= IMMORTAL_SLACK
