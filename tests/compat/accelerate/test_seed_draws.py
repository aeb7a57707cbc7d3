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


def _run_with_users_generator(folder, *, save_after=None, resume=False) -> list[list[float]]:
    """Two epochs over a DataLoader given generator=g, the batches seen; saved after ``save_after`` batches of the
    second epoch, or resumed from that save (as Accelerate's checkpointing example: load_state, skip_first_batches)."""
    from braeburn import Accelerator

    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    data = DataLoader(TensorDataset(torch.randn(14)), batch_size=4, shuffle=True,
                      generator=torch.Generator().manual_seed(11))
    data = accelerator.prepare(data)
    seen, start, skip = [], 0, 0
    if resume:
        accelerator.load_state(str(folder))
        start, skip = 1, save_after
    for epoch in range(start, 2):
        batches = accelerator.skip_first_batches(data, skip) if skip and epoch == start else data
        for index, (batch,) in enumerate(batches, start=skip if epoch == start else 0):
            seen.append(batch.tolist() + [torch.rand(1).item()])
            if not resume and save_after is not None and (epoch, index + 1) == (1, save_after):
                accelerator.save_state(str(folder))
                return seen
    return seen


def test_a_users_generator_order_resumes_mid_epoch_bitwise(tmp_path, no_launcher_env, one_thread):
    uninterrupted = _run_with_users_generator(tmp_path / "unused")
    before = _run_with_users_generator(tmp_path / "ckpt", save_after=2)
    after = _run_with_users_generator(tmp_path / "ckpt", save_after=2, resume=True)
    assert before + after == uninterrupted
    assert len(uninterrupted) == 8 and uninterrupted[:4] != uninterrupted[4:]
