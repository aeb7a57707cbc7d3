"""The Accelerator end to end on the CPU: hand-written loops learn, and prepare() keeps its promises.

Every test pins the CPU (a CUDA box or a Mac would otherwise pick its GPU, move the model there and
compile it); the same promises on a real GPU are in tests/devices/test_gpu_lane.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from braeburn import Accelerator
from braeburn.accelerator.core import AcceleratedOptimizer, AcceleratedScheduler
from braeburn.data.loader import DeviceDataLoader
from braeburn.devices.mps import FALLBACK_VAR


pytestmark = pytest.mark.usefixtures("cpu_only")


def _regression(n=256, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    y = x[:, 0] * 2 - x[:, 1] + 0.5
    return TensorDataset(x, y)


def _train(accelerator, epochs=6, batch_size=16, clip=None):
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(_regression(), batch_size=batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss = nn.functional.mse_loss(model(x).squeeze(1), y)
                accelerator.backward(loss)
                if clip:
                    accelerator.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                optimizer.zero_grad()
            losses.append(loss.item())
    return losses


@pytest.mark.parametrize("precision", ["no", "bf16", "fp16"])
def test_hand_written_loop_learns(precision):
    losses = _train(Accelerator(mixed_precision=precision, seed=0), clip=1.0)
    start, end = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert end < start * 0.1, (start, end)


def test_gradient_accumulation_learns_and_steps_on_boundaries():
    accelerator = Accelerator(gradient_accumulation_steps=4, seed=0)
    losses = _train(accelerator, batch_size=4)
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 * 0.1


def test_prepare_returns_same_order_and_types():
    accelerator = Accelerator(seed=0)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    loader = DataLoader(_regression(8), batch_size=2)
    out = accelerator.prepare(scheduler, loader, "untouched", optimizer, model)
    assert isinstance(out[0], AcceleratedScheduler) and isinstance(out[1], DeviceDataLoader)
    assert out[2] == "untouched" and isinstance(out[3], AcceleratedOptimizer) and out[4] is model
    assert isinstance(out[3], torch.optim.Optimizer)
    single = accelerator.prepare(nn.Linear(1, 1))
    assert isinstance(single, nn.Module)
    assert accelerator.unwrap_model(model) is model


def test_optimizer_and_scheduler_wait_for_the_boundary():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    weight = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    optimizer, scheduler = accelerator.prepare(optimizer, scheduler)
    with accelerator.accumulate():
        accelerator.backward((weight * 2).sum())
        assert not accelerator.sync_gradients
        optimizer.step(), scheduler.step(), optimizer.zero_grad()
    assert weight.item() == 0.0 and weight.grad.item() == 1.0  # divided by 2, kept across zero_grad
    assert scheduler.get_last_lr() == [1.0]
    with accelerator.accumulate():
        accelerator.backward((weight * 2).sum())
        assert accelerator.sync_gradients
        optimizer.step(), scheduler.step(), optimizer.zero_grad()
    assert weight.item() == -2.0 and weight.grad is None
    assert scheduler.get_last_lr() == [0.5]


def test_prepared_scheduler_steps_once_per_process_as_accelerate():
    """Each optimizer step saw num_processes batches: Accelerate moves the schedule that many steps."""
    accelerator = Accelerator()
    weight = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    scheduler = AcceleratedScheduler(schedule, accelerator, steps_per_call=2)  # what 2 processes prepare
    optimizer.step(), scheduler.step()
    assert scheduler.get_last_lr() == [0.25]
    one_cycle = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=3)
    scheduler = AcceleratedScheduler(one_cycle, accelerator, steps_per_call=2)
    for _ in range(3):  # would step OneCycleLR past its end, which raises: stops at total_steps
        optimizer.step(), scheduler.step()
    assert one_cycle.last_epoch == 3


def test_scheduler_does_not_step_when_the_scaler_skipped():
    accelerator = Accelerator(mixed_precision="fp16")
    weight = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    optimizer, scheduler = accelerator.prepare(optimizer, scheduler)
    accelerator.backward((weight * float("inf")).sum())
    optimizer.step(), scheduler.step()
    assert accelerator.optimizer_step_was_skipped and scheduler.get_last_lr() == [1.0]
    assert weight.item() == 1.0


def test_prepared_model_forward_runs_under_autocast_and_returns_float32():
    accelerator = Accelerator(mixed_precision="bf16")
    seen = []

    class Recording(nn.Linear):
        def forward(self, x):
            output = super().forward(x)
            seen.append(output.dtype)
            return output

    model = accelerator.prepare(Recording(4, 4))
    output = model(torch.randn(2, 4))
    assert seen == [torch.bfloat16] and output.dtype == torch.float32
    assert "weight" in accelerator.unwrap_model(model).state_dict()


@pytest.mark.slow  # trains a Transformers model until its loss falls (6-11 s)
def test_transformers_model_with_loss_learns():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16, num_labels=2)
    ids = torch.randint(1, 50, (64, 8))
    labels = (ids[:, 0] > 25).long()
    rows = [{"input_ids": i, "attention_mask": torch.ones(8, dtype=torch.long), "labels": label}
            for i, label in zip(ids, labels)]
    accelerator = Accelerator(seed=0)
    model = BertForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(rows, batch_size=16, shuffle=True))
    losses = []
    for _ in range(12):
        for batch in loader:
            output = model(**batch)
            assert output.logits.dtype == torch.float32 and hasattr(output, "loss")
            accelerator.backward(output.loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(output.loss.item())
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 * 0.5


def test_single_process_collectives_and_float32_metrics(fake_host):
    accelerator = Accelerator()
    assert accelerator.gather(torch.tensor(1.5)).tolist() == [1.5]
    assert accelerator.reduce(torch.tensor([2.0, 4.0]), "sum").tolist() == [2.0, 4.0]
    assert accelerator.gather({"a": [torch.ones(2)]})["a"][0].shape == (2,)
    assert accelerator.reduce(3.0).dtype == torch.float32
    assert accelerator.reduce(torch.tensor([2.0])).tolist() == [2.0] and float(accelerator.reduce(2.0, "max")) == 2.0
    with pytest.raises(ValueError, match="'min'"):
        accelerator.reduce(torch.ones(1), "min")
    # a kind without float64 (faked MPS facts) gets float32 metrics even from float64 input
    from braeburn.devices.mps import MpsDevice

    accelerator.plan = accelerator.plan.__class__(**{**accelerator.plan.__dict__, "device": MpsDevice()})
    assert accelerator.gather(torch.ones(2, dtype=torch.float64)).dtype == torch.float32
    assert accelerator.reduce(torch.tensor(2.0, dtype=torch.float64)).dtype == torch.float32


def test_identity_and_print(capsys):
    accelerator = Accelerator(cpu=True)
    assert accelerator.device == torch.device("cpu") and accelerator.num_processes == 1
    assert accelerator.is_main_process and accelerator.is_local_main_process and accelerator.process_index == 0
    accelerator.print("hello")
    assert "hello" in capsys.readouterr().out
    assert isinstance(accelerator.memory_stats(), dict)
    accelerator.wait_for_everyone()
    accelerator.end_training()


def test_precision_choice_is_announced_once(capsys):
    from braeburn.accelerator import core as module

    module._said_once.clear()
    Accelerator(mixed_precision="bf16")
    Accelerator(mixed_precision="bf16")
    out = capsys.readouterr().out
    assert out.count("precision bf16") == 1


def test_mps_env_advice_when_torch_loaded_first(fake_host, monkeypatch):
    from braeburn.accelerator import core as module

    module._said_once.clear()
    monkeypatch.delenv(FALLBACK_VAR, raising=False)
    monkeypatch.delenv("BRAEBURN_DEVICE")  # a test of the device choice: the faked host decides, not the CPU pin
    # faked MPS host facts: plan and advice only (the torch device is not touched before prepare)
    fake_host("apple", torch_loaded_before_braeburn=True, env={})
    with pytest.warns(UserWarning, match=f"braeburn launch script.py.*export {FALLBACK_VAR}=1"):
        accelerator = Accelerator()
    assert accelerator.plan.device.name == "mps"
    module._said_once.clear()
    fake_host("apple", torch_loaded_before_braeburn=True, env={FALLBACK_VAR: "0"})  # the user's value wins
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Accelerator()


def test_prepare_draws_no_random_number_and_the_seed_still_orders_the_data(fake_host):
    def prepared_run(seed: int) -> tuple[list[float], torch.Tensor]:
        torch.manual_seed(seed)
        loader = Accelerator().prepare(DataLoader(TensorDataset(torch.arange(8.0)), batch_size=8, shuffle=True))
        after = torch.rand(2)
        return next(iter(loader))[0].tolist(), after

    order, after = prepared_run(3)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(2))  # prepare() drew nothing
    assert prepared_run(3)[0] == order and prepared_run(4)[0] != order
    seeded = Accelerator(seed=5)
    seeded.prepare(DataLoader(TensorDataset(torch.arange(8.0)), shuffle=True))
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    Accelerator(seed=5).prepare(DataLoader(TensorDataset(torch.arange(8.0)), shuffle=True))
    assert torch.equal(torch.rand(2), expected)


@pytest.mark.parametrize("env, expected", [
    ({}, dict(cpu=False, mixed_precision=None, gradient_accumulation_steps=None, compile=None, notes=0)),
    ({"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "BF16"}, dict(cpu=True, mixed_precision="bf16")),
    ({"ACCELERATE_USE_CPU": "false", "ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_DYNAMO_BACKEND": "NO"},
     dict(cpu=False, mixed_precision="no", compile=None, notes=0)),  # what `accelerate launch` sets by default
    ({"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}, dict(gradient_accumulation_steps=4)),
    ({"ACCELERATE_DYNAMO_BACKEND": "inductor", "ACCELERATE_DYNAMO_MODE": "max-autotune"},
     dict(compile=True, compile_mode="max-autotune")),
    ({"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR", "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "True"},
     dict(compile="regional", notes=0)),  # `accelerate launch --dynamo_use_regional_compilation`: by regions
    ({"ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "True"},
     dict(compile=None, notes=0)),  # as in Accelerate, regional compilation without a backend compiles nothing
    ({"ACCELERATE_MIXED_PRECISION": "fp8"}, dict(mixed_precision=None, notes=1)),
    ({"ACCELERATE_USE_FSDP": "true", "ACCELERATE_USE_DEEPSPEED": "false"}, dict(notes=1)),
    ({"ACCELERATE_TORCH_DEVICE": "cuda:1", "ACCELERATE_DYNAMO_BACKEND": "aot_eager"}, dict(notes=2, compile=None)),
])
def test_accelerate_env_table(env, expected):
    from braeburn.compat.accelerate.environment import accelerate_env

    found = accelerate_env(env)
    for name, value in expected.items():
        assert (len(found.notes) if name == "notes" else getattr(found, name)) == value, name
    assert all(note.split("=")[0] in env for note in found.notes)  # each note names its variable


def test_unsupported_accelerate_variable_is_said_with_the_fix(no_launcher_env, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "1")
    with pytest.warns(UserWarning, match=r"ACCELERATE_USE_DEEPSPEED=1 is not supported .*strategy='fsdp'"):
        Accelerator(cpu=True)


def test_accelerate_variables_fill_the_accelerator_but_not_the_trainer_accumulation(no_launcher_env, monkeypatch):
    from braeburn import TrainingConfig

    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    acc = Accelerator(cpu=True)
    assert (acc.gradient_accumulation_steps, acc.mixed_precision) == (3, "bf16")
    assert Accelerator(cpu=True, mixed_precision="no").mixed_precision == "no"  # the argument wins
    # the Transformers Trainer passes its accumulation as a plugin, which the variable does not replace
    config = TrainingConfig(output_dir="unused", use_cpu=True, gradient_accumulation_steps=2)
    assert Accelerator(**config.accelerator_options()).gradient_accumulation_steps == 2


def _two_process_loop(per_epoch: bool) -> list:
    """A loop as on two processes (the prepared scheduler moves 2 steps per step() call); the warnings it gave."""
    import warnings

    from braeburn.accelerator import core as module

    module._said_once.clear()
    acc = Accelerator(cpu=True)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.9)
    model, optimizer, loader = acc.prepare(model, optimizer, DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))
    acc.num_processes = 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scheduler = acc.prepare_scheduler(schedule)
        for _ in range(2):
            for (x,) in loader:
                acc.backward(model(x).sum())
                optimizer.step()
                if not per_epoch:
                    scheduler.step()
            if per_epoch:
                scheduler.step()
    return [w for w in caught if "step_scheduler_with_optimizer" in str(w.message)]


def test_a_scheduler_stepped_per_batch_on_several_processes_gives_no_warning():
    assert _two_process_loop(per_epoch=False) == []


def test_braeburns_warning_format_installed_again_over_a_library_that_wrapped_it_formats_without_recursion(
        monkeypatch):
    """Lightning wraps whatever formatter is installed when it loads and passes other warnings on to it; braeburn
    installs its own again over Lightning's at its next warning. A warning then went round the two until Python's
    recursion limit (a crashed test worker); now it is formatted as Python formats it."""
    import warnings

    from braeburn import warn as braeburn_warn

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    monkeypatch.setattr(braeburn_warn._one_line, "previous", braeburn_warn._one_line.previous)
    with warnings.catch_warnings(record=True):
        braeburn_warn.warn("first")  # braeburn's formatter is installed
    wrapped = warnings.formatwarning

    def library_format(message, category, filename, lineno, line=None):  # passes every warning on, as Lightning's
        return wrapped(message, category, filename, lineno, line)

    warnings.formatwarning = library_format
    with warnings.catch_warnings(record=True):
        braeburn_warn.warn("again")  # installed again, over the library's
    assert warnings.formatwarning("plain", UserWarning, "x.py", 3) == "x.py:3: UserWarning: plain\n"
    assert warnings.formatwarning("ours", braeburn_warn.BraeburnWarning, "x.py", 3) == "braeburn: ours\n"


def test_a_scheduler_stepped_per_epoch_on_several_processes_is_said_in_one_line():
    import warnings

    said = _two_process_loop(per_epoch=True)
    assert len(said) == 1 and issubclass(said[0].category, UserWarning)
    printed = warnings.formatwarning(said[0].message, said[0].category, said[0].filename, said[0].lineno)
    assert printed.startswith("braeburn: the prepared ExponentialLR moves 2 steps per step() call on 2 processes")
    assert printed.count("\n") == 1  # the message alone: no file name, no source line under it


def test_the_core_accelerators_loader_reports_the_dataloaders_batch_size_and_accelerates_reports_none():
    from braeburn.accelerator.core import Accelerator as CoreAccelerator
    data = _regression(n=40)
    core = CoreAccelerator(cpu=True).prepare(DataLoader(data, batch_size=8, drop_last=True))
    assert (core.batch_size, core.drop_last, len(data) // core.batch_size) == (8, True, 5)
    compat = Accelerator(cpu=True).prepare(DataLoader(data, batch_size=8, drop_last=True))
    assert (compat.batch_size, compat.drop_last, compat.per_process_batch_size) == (None, False, 8)  # Accelerate's
