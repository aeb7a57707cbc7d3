"""Accelerate's Accelerator idioms one by one, each written as Accelerate's docs show it, against both libraries."""

from __future__ import annotations

import os

import torch
from torch.utils.data import DataLoader, TensorDataset


def _setup(lib, **kwargs):
    accelerator = lib.Accelerator(cpu=True, **kwargs)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(10, 3), torch.randint(0, 2, (10,))), batch_size=2)
    return accelerator, model, optimizer, loader


def test_who_am_i(acc_lib):
    accelerator = acc_lib.Accelerator(cpu=True, mixed_precision="no")
    assert accelerator.mixed_precision == "no"
    assert accelerator.distributed_type == acc_lib.DistributedType.NO
    assert accelerator.use_distributed is False and accelerator.is_last_process is True
    assert accelerator.is_main_process and accelerator.is_local_main_process
    assert accelerator.num_processes == 1 and accelerator.process_index == 0 and accelerator.local_process_index == 0


def test_process_order_and_decorators(acc_lib):
    accelerator = acc_lib.Accelerator(cpu=True)
    ran = []
    with accelerator.main_process_first():
        ran.append("main first")
    with accelerator.local_main_process_first():
        ran.append("local first")

    @accelerator.on_main_process
    def on_main():
        return "main"

    @accelerator.on_local_main_process
    def on_local_main():
        return "local main"

    @accelerator.on_last_process
    def on_last():
        return "last"

    @accelerator.on_process(process_index=0)
    def on_zero():
        return "zero"

    @accelerator.on_process(process_index=1)
    def on_one():
        return "one"

    assert ran == ["main first", "local first"]
    assert (on_main(), on_local_main(), on_last(), on_zero(), on_one()) == ("main", "local main", "last", "zero", "one")  # one process: all run


def test_split_and_pad(acc_lib):
    accelerator = acc_lib.Accelerator(cpu=True)
    with accelerator.split_between_processes(["a", "b", "c"]) as share:
        assert share == ["a", "b", "c"]
    with accelerator.split_between_processes({"x": [1, 2], "y": [3, 4]}) as share:
        assert share == {"x": [1, 2], "y": [3, 4]}
    tensor = torch.arange(6).view(2, 3)
    assert torch.equal(accelerator.pad_across_processes(tensor, dim=1), tensor)


def test_prepare_singles_no_sync_and_clipping(acc_lib):
    accelerator, model, optimizer, loader = _setup(acc_lib)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    model = accelerator.prepare_model(model)
    optimizer = accelerator.prepare_optimizer(optimizer)
    loader = accelerator.prepare_data_loader(loader)
    scheduler = accelerator.prepare_scheduler(scheduler)
    assert len(loader) == 5 and next(iter(loader))[0].device.type == "cpu"
    inputs, labels = next(iter(loader))
    with accelerator.no_sync(model):
        accelerator.backward(torch.nn.functional.cross_entropy(model(inputs), labels) * 100)
    accelerator.clip_grad_value_(model.parameters(), 0.01)
    assert all(p.grad.abs().max() <= 0.01 + 1e-9 for p in model.parameters())
    optimizer.step()
    scheduler.step()
    assert scheduler.get_last_lr()[0] < 0.1


def test_saving(acc_lib, tmp_path):
    accelerator, model, optimizer, loader = _setup(acc_lib)
    model = accelerator.prepare(model)
    state = accelerator.get_state_dict(model)
    assert set(state) == {"weight", "bias"}
    accelerator.save_model(model, tmp_path / "model")
    assert (tmp_path / "model" / "model.safetensors").is_file()
    from safetensors.torch import load_file

    assert torch.equal(load_file(tmp_path / "model" / "model.safetensors")["weight"], state["weight"].cpu())
    accelerator.save({"answer": torch.tensor(42)}, tmp_path / "obj.pt")
    assert int(torch.load(tmp_path / "obj.pt")["answer"]) == 42


def test_skip_first_batches_and_triggers(acc_lib):
    accelerator, model, optimizer, loader = _setup(acc_lib)
    loader = accelerator.prepare(loader)
    first = [batch[1].tolist() for batch in loader]
    skipped = accelerator.skip_first_batches(loader, 3)
    assert [batch[1].tolist() for batch in skipped] == first[3:]
    assert [b[1].tolist() for b in acc_lib.skip_first_batches(loader, 4)] == first[4:]
    assert accelerator.check_trigger() is False
    accelerator.set_trigger()
    assert accelerator.check_trigger() is True and accelerator.check_trigger() is False


def test_free_memory_and_project_dir(acc_lib, tmp_path):
    accelerator = acc_lib.Accelerator(cpu=True, project_dir=str(tmp_path))
    assert os.path.samefile(accelerator.project_dir, tmp_path)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    released = accelerator.free_memory(model)
    assert released == [None]
