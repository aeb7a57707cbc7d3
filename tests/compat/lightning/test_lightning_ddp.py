"""braeburn.lightning.Trainer under several processes: refused before anything is written. Lightning's DDP gives each
process a DistributedSampler(shuffle=True) over the training set, whatever the DataLoader's own order, so sharding the
loader as it is would give other losses from the first step (measured: under 2 processes Lightning shuffles an
unshuffled loader, braeburn did not)."""

from __future__ import annotations

import pytest

from braeburn.lightning import LightningArgumentError, Trainer

from .lightning_modules import Regression, regression_data


@pytest.mark.parametrize("devices", [2, "auto", 1])
def test_processes_a_launcher_started_are_refused_before_anything_is_written(devices, monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(LightningArgumentError) as caught:
        Trainer(accelerator="cpu", devices=devices, max_epochs=1, default_root_dir=str(tmp_path)).fit(
            Regression(), regression_data())
    assert "DistributedSampler(shuffle=True" in str(caught.value)
    assert "callbacks=[braeburn.lightning.Braeburn()]" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_devices_2_without_a_launcher_is_refused_with_the_way_out(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(LightningArgumentError, match=r"devices=2: Lightning's DDP .*Trainer\(devices=2\)"):
        Trainer(accelerator="cpu", devices=2)
