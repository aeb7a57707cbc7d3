"""mixed_precision="auto" on MPS, the Trainer's trial on a faked Mac: a fake clock times the real trial, which must
leave the run bitwise as the chosen precision asked outright would train it (the rule and the simulated measurement
are in test_precision_trial.py)."""

from __future__ import annotations

import random
import types

import numpy
import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import Dataset, TensorDataset

from braeburn.plan import precision_trial
from braeburn.plan.precision_trial import ROUNDS, run_trials
from braeburn.trainer import precision_window
from tests.devices.test_mac import fake_mac  # noqa: F401  (a fixture)
from tests.plan.test_precision_trial import FakeClock


# -- the Trainer on a faked Mac: a fake clock times the real trial -------------------------------------------------
PRECISION_OF = {torch.float32: "no", torch.bfloat16: "bf16", torch.float16: "fp16"}


class ClockedNet(torch.nn.Module):
    """A small net with dropout whose forward advances the fake clock by what a step costs in its autocast dtype."""

    def __init__(self, clock: FakeClock, ms: dict[str, float]):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                        torch.nn.Linear(32, 1))
        self.clock, self.ms = clock, ms

    def forward(self, x):
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else torch.float32
        self.clock.advance(self.ms[PRECISION_OF[dtype]])
        return self.body(x)


@pytest.fixture
def clock(monkeypatch):
    """The trial's clock, advanced by the steps themselves: ClockedNet's forward, and ``clock.optimizer_ms`` for
    every optimizer update applied (a skipped fp16 step calls no optimizer.step). Runs of 120 steps are measured."""
    fake = FakeClock()
    fake.optimizer_ms = 0.0
    monkeypatch.setattr(precision_trial, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    monkeypatch.setattr(precision_trial, "min_run_steps", lambda candidates: 100, raising=False)
    handle = register_optimizer_step_post_hook(lambda *args: fake.advance(fake.optimizer_ms))
    yield fake
    handle.remove()


class Augmented(Dataset):
    """Samples with random noise added each time they are read (data augmentation)."""

    def __init__(self, targets: float = 0.0):
        generator = torch.Generator().manual_seed(3)
        self.x, self.y = torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator) + targets

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index] + 0.1 * torch.randn(8), self.y[index]


def masking_collate(items):
    """A collator that masks inputs at random, as masked-LM collators do, drawing from python's and numpy's random."""
    x, y = torch.stack([item[0] for item in items]), torch.stack([item[1] for item in items])
    mask = torch.from_numpy(numpy.random.random(tuple(x.shape)) < 0.15)
    return x.masked_fill(mask, 0.0) * (1 + 0.01 * random.random()), y


def _train(tmp_path, name: str, precision: str, clock: FakeClock, ms: dict[str, float], steps: int = 120,
           dataset: Dataset | None = None, model_class: type = None, config_options: dict | None = None,
           resume: str | None = None, **options):
    from braeburn import Trainer, TrainingConfig

    if dataset is None:
        generator = torch.Generator().manual_seed(3)
        dataset = TensorDataset(torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator))
    config = TrainingConfig(**{"output_dir": str(tmp_path / name), "max_steps": steps, "per_device_train_batch_size": 8,
                               "mixed_precision": precision, "logging_steps": 50, "save_strategy": "no", "seed": 7,
                               "learning_rate": 1e-2, "disable_tqdm": True, **(config_options or {})})
    model = (model_class or ClockedNet)(clock, ms)
    trainer = Trainer(model, config, train_dataset=dataset, loss_fn=torch.nn.functional.mse_loss, **options)
    trainer.train(resume_from_checkpoint=resume)
    return trainer, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("ms, chosen", [({"no": 10.0, "bf16": 6.0, "fp16": 8.0}, "bf16"),
                                        ({"no": 10.0, "bf16": 9.9, "fp16": 6.0}, "fp16"),
                                        ({"no": 10.0, "bf16": 10.0, "fp16": 10.0}, "no")])
@pytest.mark.slow  # 6 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_the_trial_leaves_the_run_bitwise_as_the_precision_asked_outright(fake_mac, one_thread, clock, tmp_path,
                                                                          capsys, ms, chosen):
    # The dataset and the collator draw from torch's, numpy's and python's random: the trial's batch must not
    # move the run's random state, data order or batches (nor its steps, optimizer state or dropout draws).
    trainer, weights = _train(tmp_path, "auto", "auto", clock, ms, dataset=Augmented(), data_collator=masking_collate)
    out = capsys.readouterr().out
    assert trainer.accelerator.precision == chosen and trainer.accelerator.plan.precision_candidates == ()
    assert f"braeburn: precision {chosen} on cpu, timed on your model: float32 10.0 ms/step [10.0-10.0, " in out
    assert f"  precision  {chosen} (auto: " in out  # the summary
    _, expected = _train(tmp_path, "asked", chosen, clock, ms, dataset=Augmented(), data_collator=masking_collate)
    for got, want in zip(weights, expected):
        assert torch.equal(got, want)


class BufferedNet(ClockedNet):
    """Keeps state outside its state dict in non-persistent buffers that each training forward advances: a running
    mean of its inputs (updated in place) and a step count (replaced by a new tensor)."""

    def __init__(self, clock: FakeClock, ms: dict[str, float]):
        super().__init__(clock, ms)
        self.register_buffer("input_mean", torch.zeros(1, 8), persistent=False)
        self.register_buffer("forwards", torch.zeros((), dtype=torch.long), persistent=False)

    def forward(self, x):
        if self.training:
            self.input_mean.mul_(0.9).add_(0.1 * x.detach().mean(0, keepdim=True))
            self.forwards = self.forwards + 1
        warmup = torch.clamp(self.forwards.float() / 300, max=1.0)
        return super().forward(x - self.input_mean) * (0.5 + 0.5 * warmup)


def test_the_trial_leaves_no_trace_in_buffers_outside_the_state_dict(fake_mac, one_thread, clock, tmp_path):
    # The trial's 54 forwards moved the non-persistent buffers, which the snapshot (state_dict only) did not restore.
    ms = {"no": 10.0, "bf16": 6.0, "fp16": 8.0}
    trainer, weights = _train(tmp_path, "auto", "auto", clock, ms, model_class=BufferedNet)
    assert trainer._precision_record["measured"] and trainer.accelerator.precision == "bf16"
    asked, expected = _train(tmp_path, "asked", "bf16", clock, ms, model_class=BufferedNet)
    auto, asked = (run.accelerator.unwrap_model(run.model) for run in (trainer, asked))
    assert int(auto.forwards) == int(asked.forwards) == 120
    assert torch.equal(auto.input_mean, asked.input_mean)
    assert all(torch.equal(got, want) for got, want in zip(weights, expected))


def test_skipped_fp16_steps_are_not_timed(fake_mac, one_thread, clock, monkeypatch, tmp_path, capsys):
    # Targets of 1000: a fresh fp16 grad scaler (65536) overflows on its first steps and skips the update, which
    # here is what costs (20 ms of optimizer against 1 ms of forward). An fp16 step that applies it costs as much
    # as float32's, so float32 stays.
    from braeburn.plan.precision import ScaledFp16Policy

    applied: list[bool] = []
    real_step = ScaledFp16Policy.step
    monkeypatch.setattr(ScaledFp16Policy, "step", lambda self, *a, **k: applied.append(real_step(self, *a, **k))
                        or applied[-1])
    clock.optimizer_ms = 20.0
    trainer, _ = _train(tmp_path, "overflow", "auto", clock, {"no": 1.0, "bf16": 1.0, "fp16": 1.0},
                        dataset=Augmented(targets=1000.0))
    out = capsys.readouterr().out
    assert applied.count(False) >= 7, applied  # the trial met the skipped steps ...
    assert trainer.accelerator.precision == "no", out  # ... and did not time them
    record = trainer._precision_record
    fp16 = next(trial for trial in record["trials"] if trial["precision"] == "fp16")
    assert fp16["windows"] and all(all(window["applied"]) for window in fp16["windows"])
    assert "fp16 21.0 ms/step [21.0-21.0, 1 round] loss " in out  # as float32's: the trial ends after one round
    assert "the trial stopped early: after one round the best, bf16, was 0% faster" in out


def test_a_run_too_short_to_earn_the_trial_back_is_not_measured(fake_mac, one_thread, monkeypatch, tmp_path, capsys):
    # No fake clock and no lowered gate: a 500-step run would spend 54 steps (11%) on the trial, which a 5% gain
    # earns back only over 1080 steps.
    seen = []
    monkeypatch.setattr(precision_window, "run_trials", lambda *args, **kwargs: seen.append(args))
    trainer, weights = _train(tmp_path, "short", "auto", FakeClock(), {"no": 0, "bf16": 0, "fp16": 0}, steps=500)
    assert seen == [] and trainer.accelerator.precision == "no"
    assert ("auto: float32, not measured: a run of 500 steps is too short to earn back the trial: its 54 steps train "
            "nothing") in capsys.readouterr().out


def test_a_run_with_gradient_accumulation_is_measured_and_left_as_asked_outright(fake_mac, one_thread, clock,
                                                                                  tmp_path):
    # 20 optimizer steps of 8 batches: 160 batches, past the fixture's gate of 100. Counting optimizer steps against
    # the trial's batches, `auto` never measured a run with accumulation (and said it was too short).
    ms, accumulate = {"no": 10.0, "bf16": 6.0, "fp16": 8.0}, {"gradient_accumulation_steps": 8}
    trainer, weights = _train(tmp_path, "auto", "auto", clock, ms, steps=20, config_options=accumulate)
    assert trainer._precision_record["measured"], trainer._precision_record["reason"]
    assert trainer.accelerator.precision == "bf16" and trainer.state.global_step == 20
    _, expected = _train(tmp_path, "asked", "bf16", clock, ms, steps=20, config_options=accumulate)
    assert all(torch.equal(got, want) for got, want in zip(weights, expected))


def test_a_first_round_that_shows_no_saving_ends_the_trial(fake_mac, one_thread, clock, tmp_path):
    trainer, _ = _train(tmp_path, "slow", "auto", clock, {"no": 10.0, "bf16": 12.0, "fp16": 11.0})
    record = trainer._precision_record
    assert trainer.accelerator.precision == "no" and "the trial stopped early" in record["reason"]
    assert [len(trial["windows"]) for trial in record["trials"]] == [1, 1, 1]  # one round: 18 steps, not 54


def test_a_snapshot_that_runs_out_of_memory_skips_the_trial(fake_mac, one_thread, clock, monkeypatch, tmp_path, capsys):
    def no_memory(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes.")
    real_copy = getattr(precision_trial, "host_copy", None)
    monkeypatch.setattr(precision_trial, "host_copy", no_memory, raising=False)
    ms = {"no": 10.0, "bf16": 6.0, "fp16": 8.0}
    trainer, weights = _train(tmp_path, "auto", "auto", clock, ms)
    assert trainer.accelerator.precision == "no"
    assert ("auto: float32, not measured: copying the weights to host memory failed (DefaultCPUAllocator: can't "
            "allocate memory") in capsys.readouterr().out
    monkeypatch.setattr(precision_trial, "host_copy", real_copy, raising=False)
    _, expected = _train(tmp_path, "asked", "no", FakeClock(), ms)
    assert all(torch.equal(got, want) for got, want in zip(weights, expected))


def test_the_trial_gives_its_cached_memory_back_before_the_run(fake_mac, one_thread, clock, monkeypatch, tmp_path):
    from braeburn.trainer import loop

    events: list[str] = []
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: events.append("empty_cache"))
    real_choose = loop.choose_precision
    monkeypatch.setattr(loop, "choose_precision", lambda *args: (real_choose(*args), events.append("trial ended"))[0])
    trainer, _ = _train(tmp_path, "auto", "auto", clock, {"no": 10.0, "bf16": 6.0, "fp16": 8.0})
    assert trainer._precision_record["measured"]
    assert events[events.index("trial ended") - 1] == "empty_cache", events


def test_a_candidate_that_fails_is_passed_over(fake_mac, one_thread, clock, monkeypatch, tmp_path, capsys):
    # What MPS says for an op without a bf16 kernel; float32 and fp16 still run.
    real_linear = torch.nn.functional.linear

    def no_bf16(x, weight, bias=None):
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
            raise RuntimeError("MPS does not support linear with BFloat16 on this macOS")
        return real_linear(x, weight, bias)
    monkeypatch.setattr(torch.nn.functional, "linear", no_bf16)
    trainer, _ = _train(tmp_path, "fails", "auto", clock, {"no": 10.0, "bf16": 1.0, "fp16": 7.0})
    out = capsys.readouterr().out
    assert trainer.accelerator.precision == "fp16" and trainer.accelerator.scaler is not None
    assert "bf16 failed (MPS does not support linear with BFloat16 on this macOS)" in out


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        generator = torch.Generator().manual_seed(3)
        while True:
            yield torch.randn(8, generator=generator), torch.randn(1, generator=generator)


class SizedStream(Stream):
    def __len__(self) -> int:
        return 64


@pytest.mark.parametrize("stream", [Stream(), SizedStream()], ids=["unsized", "sized"])
def test_a_stream_is_refused_with_one_clear_error_before_the_trial(fake_mac, one_thread, clock, monkeypatch, tmp_path,
                                                                   stream):
    # It failed with a bare "object of type 'Stream' has no len()" (or, sized, DataLoader's shuffle ValueError),
    # while the docs listed an iterable dataset among the cases where the trial does not run.
    from braeburn import Trainer, TrainingConfig
    from braeburn.errors import is_user_error

    seen = []
    monkeypatch.setattr(precision_window, "run_trials", lambda *args, **kwargs: seen.append(args))
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=120, per_device_train_batch_size=8, save_strategy="no",
                            disable_tqdm=True)
    trainer = Trainer(ClockedNet(clock, {"no": 10.0, "bf16": 6.0, "fp16": 8.0}), config, train_dataset=stream,
                      loss_fn=torch.nn.functional.mse_loss)
    try:
        with pytest.raises(TypeError, match=r"train_dataset is a torch IterableDataset \(a stream\) \((Sized)?Stream\)"
                                            r": the Trainer reads samples by index.*Pass a map-style dataset, one with "
                                            r"__len__ and __getitem__") as raised:
            trainer.train()
    finally:
        trainer.accelerator.end_training()  # a train() that raised leaves the Accelerator to its owner
    assert is_user_error(raised.value) and seen == []


def test_an_eval_set_with_no_length_is_refused_with_the_same_clear_error():
    from braeburn.trainer.input_checks import check_datasets

    train = TensorDataset(torch.randn(8, 8), torch.randn(8, 1))
    with pytest.raises(TypeError, match=r"eval_dataset is an object with no len\(\) \(generator\): the Trainer reads"):
        check_datasets(train, (sample for sample in train), "steps")
    check_datasets(train, (sample for sample in train), "no")  # not evaluated: not looked at


class HalfRefusingNet(ClockedNet):
    """A custom layer that refuses the autocast dtypes in ``refused`` with a Python error, not a RuntimeError."""

    refused: dict = {}

    def forward(self, x):
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else torch.float32
        if dtype in self.refused:
            raise self.refused[dtype]
        return super().forward(x)


@pytest.mark.parametrize("refused, chosen, words", [
    ({torch.bfloat16: AssertionError("expected float32 or float16 inputs")}, "fp16",
     "bf16 failed (AssertionError: expected float32 or float16 inputs)"),
    ({torch.bfloat16: TypeError("this custom layer has no half-precision path"),
      torch.float16: TypeError("this custom layer has no half-precision path")}, "no",
     "fp16 failed (TypeError: this custom layer has no half-precision path)")])
@pytest.mark.slow  # 5 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_a_candidate_failing_with_any_error_is_passed_over(fake_mac, one_thread, clock, monkeypatch, tmp_path, capsys,
                                                           refused, chosen, words):
    # A TypeError or AssertionError under autocast crashed `auto` (only RuntimeError and ValueError were caught).
    monkeypatch.setattr(HalfRefusingNet, "refused", refused)
    trainer, weights = _train(tmp_path, "auto", "auto", clock, {"no": 10.0, "bf16": 1.0, "fp16": 7.0},
                              model_class=HalfRefusingNet)
    out = capsys.readouterr().out
    assert trainer.accelerator.precision == chosen and trainer.state.global_step == 120
    assert words in out
    _, expected = _train(tmp_path, "asked", chosen, clock, {"no": 10.0, "bf16": 1.0, "fp16": 7.0},
                         model_class=HalfRefusingNet)
    assert all(torch.equal(got, want) for got, want in zip(weights, expected))


def test_an_error_in_float32_or_an_interrupt_is_not_swallowed():
    def start(failing: BaseException):
        def begin(precision):
            def step():
                raise failing
            return step
        return begin

    snapshot = types.SimpleNamespace(restore=lambda: None)
    with pytest.raises(TypeError):  # float32 is what the run trains in: it would meet the error too
        run_trials(("no", "bf16"), start(TypeError("bad input")), snapshot, lambda: None, lambda e: False,
                   lambda: None)
    with pytest.raises(KeyboardInterrupt):
        run_trials(("bf16", "no"), start(KeyboardInterrupt()), snapshot, lambda: None, lambda e: False, lambda: None)


def test_a_resumed_run_keeps_the_precision_it_measured(fake_mac, one_thread, clock, tmp_path, capsys):
    import shutil

    from braeburn import Trainer, TrainingConfig

    def trainer(name: str, ms: dict[str, float]):
        generator = torch.Generator().manual_seed(3)
        data = TensorDataset(torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator))
        config = TrainingConfig(output_dir=str(tmp_path / name), max_steps=120, per_device_train_batch_size=8,
                                logging_steps=50, save_strategy="steps", save_steps=60, seed=7, learning_rate=1e-2,
                                disable_tqdm=True)
        model = ClockedNet(clock, ms)
        return Trainer(model, config, train_dataset=data, loss_fn=torch.nn.functional.mse_loss), model

    whole, model = trainer("whole", {"no": 10.0, "bf16": 9.0, "fp16": 6.0})
    whole.train()
    assert whole.accelerator.precision == "fp16"
    shutil.copytree(tmp_path / "whole" / "checkpoint-60", tmp_path / "saved")
    resumed, resumed_model = trainer("resumed", {"no": 10.0, "bf16": 1.0, "fp16": 9.0})  # a trial would pick bf16
    resumed.train(resume_from_checkpoint=str(tmp_path / "saved"))
    assert resumed.accelerator.precision == "fp16" and resumed._precision_record is None
    assert "auto: fp16, as the checkpoint trained (that run's choice: fp16, measured " in capsys.readouterr().out
    for got, want in zip(resumed_model.parameters(), model.parameters()):
        assert torch.equal(got, want)  # the grad scaler's state came back too: exact resume


def test_a_resumed_run_that_was_never_measured_says_so(fake_mac, one_thread, clock, monkeypatch, tmp_path, capsys):
    # It said "as the checkpoint trained (measured when the run began)" although the first run never measured.
    import shutil

    monkeypatch.setattr(precision_trial, "min_run_steps", lambda candidates: 1000)  # 120 steps: too short
    first, _ = _train(tmp_path, "first", "auto", clock, {"no": 10.0, "bf16": 6.0, "fp16": 8.0},
                      config_options={"save_strategy": "steps", "save_steps": 60})
    assert not first._precision_record["measured"]
    shutil.copytree(tmp_path / "first" / "checkpoint-60", tmp_path / "saved")
    capsys.readouterr()
    _train(tmp_path, "resumed", "auto", clock, {"no": 10.0, "bf16": 6.0, "fp16": 8.0}, resume=str(tmp_path / "saved"),
           config_options={"save_strategy": "steps", "save_steps": 60})
    out = capsys.readouterr().out
    assert ("auto: float32, as the checkpoint trained (that run's choice: float32, not measured: a run of 120 steps is "
            "too short to earn back the trial") in out, out
    assert "measured when the run began" not in out


@pytest.mark.requires("cuda")
def test_the_trial_needs_no_more_device_memory_than_training():
    """On a GPU (the code names no device): the snapshot lives in host memory, the trial's peak is a training
    step's, and afterwards the device holds what it held before (the trial's AdamW moments are gone)."""
    device = torch.device("cuda")
    x = torch.randn(64, 1024, device=device)

    def setup():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024))
        model = model.to(device)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)

    def stepper(model, optimizer):
        def step():
            loss = model(x).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach(), True
        return step

    model, optimizer = setup()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        stepper(model, optimizer)()
    training_peak = torch.cuda.max_memory_allocated() - base
    del model, optimizer
    torch.cuda.empty_cache()

    model, optimizer = setup()
    before = [p.detach().clone() for p in model.parameters()]
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    snapshot = precision_trial.Snapshot(model, optimizer, None, lambda state: None)
    assert torch.cuda.memory_allocated() == base  # the copy is in host memory
    trials, _ = run_trials(("no",), lambda precision: stepper(model, optimizer), snapshot, torch.cuda.synchronize,
                           lambda error: False, torch.cuda.empty_cache)
    assert len(trials[0].windows) == ROUNDS
    assert torch.cuda.max_memory_allocated() - base <= training_peak + 2**20  # (+ the losses read once a window)
    assert torch.cuda.memory_allocated() == base and not optimizer.state
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
