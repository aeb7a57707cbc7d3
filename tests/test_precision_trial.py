"""mixed_precision="auto" on MPS decides from a measurement (issue 29): the rule with fake timings, the plan's
candidates from the device facts, and the Trainer's trial on a faked Mac, which must leave the run unchanged."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.plan import precision_trial
from braeburn.plan.rules import RunOptions, make_plan
from braeburn.plan.precision_trial import MIN_RUN_STEPS, Trial, decide
from braeburn.trainer import precision_window
from tests.conftest import APPLE_M, CUDA_BOX, LINUX_CPU
from tests.test_mac import fake_mac  # noqa: F401  (a fixture)

MS = 0.001


def trials(ms=(10.0, 8.0, 6.0), **changes) -> list[Trial]:
    """float32, bf16 and fp16 at these ms/step, all with loss 2.3 and finite, then ``changes`` per precision."""
    rows = {name: Trial(name, each * MS, 2.3) for name, each in zip(("no", "bf16", "fp16"), ms)}
    for name, fields in changes.items():
        rows[name] = dataclasses.replace(rows[name], **fields)
    return list(rows.values())


@pytest.mark.parametrize("rows, chosen, words", [
    (trials(), "fp16", "fp16, measured 40% faster than float32"),                       # the fastest wins
    (trials((10.0, 6.0, 8.0)), "bf16", "bf16, measured 40% faster"),
    (trials(fp16={"finite": False}), "bf16", "fp16 a loss was not finite"),              # non-finite loses
    (trials(fp16={"first_loss": 2.6}), "bf16", "fp16 its loss 2.6 is not float32's 2.3 within 2%"),  # mismatch loses
    (trials(fp16={"first_loss": 2.31}), "fp16", "measured 40% faster"),                  # within tolerance
    (trials((10.0, 9.8, 9.7)), "no", "fp16 was 3% faster, within noise"),             # a tie keeps float32
    (trials((10.0, 12.0, 11.0)), "no", "was -10% faster, within noise"),              # all slower
    (trials(fp16={"error": "MPS backend out of memory", "seconds_per_step": None}), "bf16",
     "fp16 failed (MPS backend out of memory)"),
    (trials(bf16={"finite": False}, fp16={"first_loss": 9.0}), "no", "no mixed precision qualified"),
    (trials(no={"error": "MPS backend out of memory", "seconds_per_step": None}), "no", "float32's own trial failed"),
])
def test_decide_from_fake_timings(rows, chosen, words):
    decision = decide(rows)
    assert decision.precision == chosen
    assert words in decision.reason, decision.reason


def test_the_table_shows_every_precision_in_one_line():
    table = decide(trials(fp16={"finite": False}, bf16={"error": "no bf16 kernel", "seconds_per_step": None})).table
    assert table == "float32 10.0 ms/step loss 2.3000 | bf16 failed (no bf16 kernel) | fp16 6.0 ms/step loss not finite"


@pytest.mark.parametrize("steps, processes, custom, words", [
    (MIN_RUN_STEPS - 1, 1, False, "too short"), (MIN_RUN_STEPS, 2, False, "several processes"),
    (MIN_RUN_STEPS, 1, True, "training_step"), (MIN_RUN_STEPS, 1, False, None)])
def test_when_a_run_is_measured(steps, processes, custom, words):
    reason = precision_trial.measure_reason(steps, processes, custom)
    assert (reason is None) if words is None else words in reason


# -- the plan: which candidates the device facts allow -------------------------------------------------------
@pytest.mark.parametrize("host, candidates", [
    (APPLE_M, ("bf16", "fp16")),
    (APPLE_M.replace(macos_version=(13, 6)), ("fp16",)),  # bf16 needs macOS 14
    (APPLE_M.replace(torch_version=(2, 7, 1), torch_version_str="2.7.1"), ("bf16",)),  # GradScaler("mps"): 2.8
    (LINUX_CPU, ()), (CUDA_BOX, ())])
def test_auto_leaves_the_candidates_the_device_allows(host, candidates):
    plan = make_plan(RunOptions(), host)
    assert plan.precision_candidates == candidates
    if candidates:
        assert plan.precision == "no" and "until measured" in plan.precision_reason
    assert make_plan(RunOptions(mixed_precision="no"), host).precision_candidates == ()
    assert make_plan(RunOptions(mixed_precision="fp16"), APPLE_M).precision_candidates == ()


# -- the Trainer on a faked Mac --------------------------------------------------------------------------------
class DropoutNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                        torch.nn.Linear(32, 1))

    def forward(self, x):
        return self.body(x)


def _train(tmp_path, name: str, precision: str, steps: int = MIN_RUN_STEPS):
    from braeburn import Trainer, TrainingConfig

    generator = torch.Generator().manual_seed(3)
    data = TensorDataset(torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator))
    config = TrainingConfig(output_dir=str(tmp_path / name), max_steps=steps, per_device_train_batch_size=8,
                            mixed_precision=precision, logging_steps=50, save_strategy="no", seed=7,
                            learning_rate=1e-2, disable_tqdm=True)
    model = DropoutNet()
    trainer = Trainer(model, config, train_dataset=data, loss_fn=torch.nn.functional.mse_loss)
    trainer.train()
    return trainer, [p.detach().clone() for p in model.parameters()]


def fake_timings(monkeypatch, ms: dict[str, float]) -> list[list[Trial]]:
    """The real trial runs; decide() sees these ms/step instead of the CPU's (the losses stay measured)."""
    seen: list[list[Trial]] = []

    def with_fake_times(rows):
        seen.append(list(rows))
        return decide([dataclasses.replace(row, seconds_per_step=ms[row.precision] * MS) for row in rows])
    monkeypatch.setattr(precision_window, "decide", with_fake_times)
    return seen


@pytest.mark.parametrize("ms, chosen", [({"no": 10.0, "bf16": 6.0, "fp16": 8.0}, "bf16"),
                                        ({"no": 10.0, "bf16": 9.9, "fp16": 9.9}, "no")])
def test_the_trial_chooses_and_leaves_no_trace_in_the_run(fake_mac, one_thread, monkeypatch, tmp_path, capsys, ms, chosen):
    seen = fake_timings(monkeypatch, ms)
    trainer, weights = _train(tmp_path, "auto", "auto")
    out = capsys.readouterr().out
    assert [row.precision for row in seen[0]] == ["no", "bf16", "fp16"]
    assert all(row.finite and row.seconds_per_step for row in seen[0]), seen  # each really trained its steps
    assert f"braeburn: precision {chosen} on cpu, timed on your model: float32 10.0 ms/step loss " in out
    assert trainer.accelerator.precision == chosen and trainer.accelerator.plan.precision_candidates == ()
    assert f"  precision  {chosen} (auto: " in out  # the summary
    # The same run with that precision asked for: bitwise the same weights, so no trial step, optimizer state,
    # gradient or random draw (dropout) leaked into the run.
    _, expected = _train(tmp_path, "asked", chosen)
    for got, want in zip(weights, expected):
        assert torch.equal(got, want)


def test_a_short_run_keeps_float32_unmeasured(fake_mac, monkeypatch, tmp_path, capsys):
    seen = fake_timings(monkeypatch, {})
    trainer, _ = _train(tmp_path, "short", "auto", steps=5)
    assert seen == [] and trainer.accelerator.precision == "no"
    assert "auto: float32, not measured: a run of 5 steps is too short" in capsys.readouterr().out


def test_a_candidate_that_fails_is_passed_over(fake_mac, one_thread, monkeypatch, tmp_path, capsys):
    # What MPS says for an op without a bf16 kernel; float32 and fp16 still run.
    real_linear = torch.nn.functional.linear

    def no_bf16(x, weight, bias=None):
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
            raise RuntimeError("MPS does not support linear with BFloat16 on this macOS")
        return real_linear(x, weight, bias)
    monkeypatch.setattr(torch.nn.functional, "linear", no_bf16)
    fake_timings(monkeypatch, {"no": 10.0, "bf16": 1.0, "fp16": 7.0})
    trainer, _ = _train(tmp_path, "fails", "auto")
    out = capsys.readouterr().out
    assert trainer.accelerator.precision == "fp16" and trainer.accelerator.scaler is not None
    assert "bf16 failed (MPS does not support linear with BFloat16 on this macOS)" in out


def test_a_resumed_run_keeps_the_precision_it_measured(fake_mac, one_thread, monkeypatch, tmp_path, capsys):
    import shutil

    from braeburn import Trainer, TrainingConfig

    fake_timings(monkeypatch, {"no": 10.0, "bf16": 9.0, "fp16": 6.0})

    def trainer(name: str) -> tuple[Trainer, torch.nn.Module]:
        generator = torch.Generator().manual_seed(3)
        data = TensorDataset(torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator))
        config = TrainingConfig(output_dir=str(tmp_path / name), max_steps=MIN_RUN_STEPS, per_device_train_batch_size=8,
                                logging_steps=50, save_strategy="steps", save_steps=50, seed=7, learning_rate=1e-2,
                                disable_tqdm=True)
        model = DropoutNet()
        return Trainer(model, config, train_dataset=data, loss_fn=torch.nn.functional.mse_loss), model

    whole, model = trainer("whole")
    whole.train()
    assert whole.accelerator.precision == "fp16"
    shutil.copytree(tmp_path / "whole" / "checkpoint-50", tmp_path / "saved")
    seen = fake_timings(monkeypatch, {"no": 10.0, "bf16": 1.0, "fp16": 9.0})  # a new measurement would pick bf16
    resumed, resumed_model = trainer("resumed")
    resumed.train(resume_from_checkpoint=str(tmp_path / "saved"))
    assert seen == [] and resumed.accelerator.precision == "fp16"
    assert "auto: fp16, as the checkpoint trained" in capsys.readouterr().out
    for got, want in zip(resumed_model.parameters(), model.parameters()):
        assert torch.equal(got, want)  # the grad scaler's state came back too: exact resume
