"""The same seed gives the same run as Accelerate: preparing a DataLoader draws no number from torch's
generator, so the model's initialisation and dropout after it see the same random numbers."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset


def _shuffled_loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(16.0)), batch_size=4, shuffle=True)


def test_preparing_a_dataloader_draws_no_random_number(acc_lib):
    layer = torch.nn.Linear(2, 2)  # its initialisation draws: made before the seed is set
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    accelerator = acc_lib.Accelerator(cpu=True)
    model, loader = accelerator.prepare(layer, _shuffled_loader())
    assert model is not None and len(loader) == 4
    assert torch.equal(torch.rand(4), expected)
