"""The silent MPS errors, each on a faked Mac: Apple-silicon host facts and torch.mps's public
calls faked from PyTorch's real texts and behaviour, so MpsDevice's own code answers every device question.

The PyTorch facts each test rests on are quoted in docs/devices.md ("Mac: what braeburn does for you").
"""

from __future__ import annotations

import functools
import json
import os
import re

import pytest
import torch
import torch.utils.checkpoint

from braeburn import _early
from braeburn.devices import environment as import_env
from braeburn.accelerator.core import Accelerator
from braeburn.cli.main import main
from braeburn.devices.mps import FALLBACK_VAR, HIGH_WATERMARK_VAR, LOW_WATERMARK_VAR, MpsDevice
from braeburn.plan.rules import PlanError, RunOptions, make_plan
from braeburn.trainer.config import TrainingConfig
from braeburn.trainer.checkpointing import prepare_model_options
from tests.conftest import APPLE_M, LINUX_CPU
from tests.cli.test_launch import RECORD_ENV, script
from tests.devices.test_mac import ON_A_MAC, fake_mac, run_python  # noqa: F401  (fake_mac: a fixture)


# -- 1. gradient checkpointing replays the MPS random state ------------------------------------------------
class FakeMpsGenerator:
    """The MPS generator as torch.utils.checkpoint sees it: a generator it neither stashes nor restores
    (torch.mps has no `_initialized`), reached by braeburn only through torch.mps.get_rng_state/set_rng_state."""

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.mps, "get_rng_state", lambda device="mps": self.generator.get_state())
        monkeypatch.setattr(torch.mps, "set_rng_state", lambda state, device="mps": self.generator.set_state(state))


class MpsDropout(torch.nn.Module):
    """Dropout whose mask comes from the (fake) MPS generator, as nn.Dropout's does on an MPS tensor."""

    def __init__(self, generator: torch.Generator, p: float = 0.5):
        super().__init__()
        self.generator, self.p = generator, p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = torch.rand(x.shape, generator=self.generator) >= self.p
        return x * keep / (1 - self.p)


class CheckpointedNet(torch.nn.Module):
    """gradient_checkpointing_enable as Transformers' PreTrainedModel has it: the kwargs go to checkpoint()."""

    def __init__(self, generator: torch.Generator):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.drop, self.last = torch.nn.Linear(8, 32), MpsDropout(generator), torch.nn.Linear(32, 1)
        self.checkpoint = None

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        kwargs = {"use_reentrant": True} if gradient_checkpointing_kwargs is None else gradient_checkpointing_kwargs
        self.checkpoint = functools.partial(torch.utils.checkpoint.checkpoint, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block = lambda h: self.drop(torch.relu(self.first(h)))  # noqa: E731
        return self.last(self.checkpoint(block, x) if self.checkpoint else block(x))


def _gradients(model: torch.nn.Module, generator: torch.Generator) -> list[torch.Tensor]:
    generator.manual_seed(1)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(2))
    model(x).pow(2).mean().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("kwargs", [None, {"use_reentrant": False}])
def test_item1_checkpointing_on_a_mac_gives_the_gradients_of_the_plain_forward(fake_host, monkeypatch, kwargs):
    # What this shows: braeburn's recompute draws the same mask from the generator torch does not replay (the
    # stand-in for the MPS one), so the gradients equal those without checkpointing. It does not run Metal.
    host = fake_host("apple")
    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    expected = _gradients(CheckpointedNet(fake.generator), fake.generator)
    model = CheckpointedNet(fake.generator)
    prepare_model_options(model, TrainingConfig(gradient_checkpointing=True, gradient_checkpointing_kwargs=kwargs),
                          make_plan(RunOptions(), host).device, host)
    for got, want in zip(_gradients(model, fake.generator), expected):
        torch.testing.assert_close(got, want)


def test_item1_without_the_replay_the_gradients_differ(fake_host, monkeypatch):
    # The defect itself, so the test above cannot pass by accident: the same model on a kind torch replays
    # (the CPU) gets no help from braeburn, and the stand-in generator then draws a second mask.
    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    expected = _gradients(CheckpointedNet(fake.generator), fake.generator)
    model = CheckpointedNet(fake.generator)
    prepare_model_options(model, TrainingConfig(gradient_checkpointing=True,
                                                gradient_checkpointing_kwargs={"use_reentrant": False}),
                          make_plan(RunOptions(), LINUX_CPU).device, LINUX_CPU)
    assert not torch.allclose(_gradients(model, fake.generator)[0], expected[0])


def test_item1_reentrant_checkpointing_on_a_mac_is_refused_with_the_fix(fake_host):
    host = fake_host("apple")
    model = CheckpointedNet(torch.Generator())
    config = TrainingConfig(gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True})
    with pytest.raises(ValueError, match=r'gradient_checkpointing_kwargs=.*use_reentrant.*: false.*gradient_checkpointing off'):
        prepare_model_options(model, config, make_plan(RunOptions(), host).device, host)


# -- 3. an explicit mps_fallback=False wins over braeburn's own default -------------------------------------
def mac_import_defaults(monkeypatch) -> dict[str, str]:
    """The environment `import braeburn` leaves on a Mac where the user exported nothing (before torch loads)."""
    environ: dict[str, str] = {}
    import_env.import_defaults(environ, "Darwin", torch_loaded=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return environ


def test_item3_import_braeburn_records_that_the_fallback_is_its_default():
    shown = run_python(ON_A_MAC + f"import os, braeburn; print(os.environ.get('{FALLBACK_VAR}'), "
                       f"os.environ.get('{_early.SET_BY_BRAEBURN_VAR}'))")
    assert shown.stdout.split() == ["1", f"{FALLBACK_VAR}=1"]
    exported = run_python(ON_A_MAC + f"import os, braeburn; print(os.environ.get('{_early.SET_BY_BRAEBURN_VAR}'))",
                          **{FALLBACK_VAR: "1"})
    assert exported.stdout.split() == ["None"]  # the user's own 1 is not braeburn's


def test_item3_launch_no_mps_fallback_reaches_the_script(tmp_path, clean_env, fake_host, monkeypatch):
    fake_host("apple")
    mac_import_defaults(monkeypatch)  # `braeburn launch` itself imported braeburn on the Mac
    record = tmp_path / "env.json"
    assert main(["launch", "--no-mps-fallback", str(script(tmp_path, "rec.py", RECORD_ENV)), str(record)]) == 0
    env = json.loads(record.read_text())["env"]
    assert env[FALLBACK_VAR] == "0"
    assert main(["launch", str(script(tmp_path, "rec.py", RECORD_ENV)), str(record)]) == 0
    assert json.loads(record.read_text())["env"][FALLBACK_VAR] == "1"  # the default stays the default


def test_item3_a_value_the_user_exported_still_wins_over_the_flag(tmp_path, clean_env, fake_host, monkeypatch):
    fake_host("apple")
    monkeypatch.setenv(FALLBACK_VAR, "1")
    import_env.import_defaults(os.environ, "Darwin", torch_loaded=False)  # sets nothing over the user's value
    record = tmp_path / "env.json"
    assert main(["launch", "--no-mps-fallback", str(script(tmp_path, "rec.py", RECORD_ENV)), str(record)]) == 0
    assert json.loads(record.read_text())["env"][FALLBACK_VAR] == "1"


def test_item3_in_process_mps_fallback_false_is_not_silently_ignored(clean_env, fake_host, monkeypatch):
    fake_host("apple")
    monkeypatch.setattr(MpsDevice, "torch_device", lambda self, index=0: torch.device("cpu"))
    mac_import_defaults(monkeypatch)  # torch then loaded with the fallback on
    with pytest.raises(PlanError, match=f"mps_fallback=False: asks for {FALLBACK_VAR}=0.*set its default {FALLBACK_VAR}=1 before torch loaded"
                       f".*Export {FALLBACK_VAR}=0 before starting Python.*braeburn launch"):
        Accelerator(mps_fallback=False)
    Accelerator(mps_fallback=True)  # what braeburn set is what was asked


def test_item3_doctor_tells_braeburns_default_from_the_users_value(clean_env, fake_host, monkeypatch, capsys):
    fake_host("apple")
    mac_import_defaults(monkeypatch)
    assert main(["doctor", "--json"]) == 0
    row = next(v for v in json.loads(capsys.readouterr().out)["environment"] if v["name"] == FALLBACK_VAR)
    assert (row["value"], row["set_by"]) == ("1", "braeburn (its default)")
    monkeypatch.setenv(FALLBACK_VAR, "0")  # the user's export replaces it; the stale marker must not claim it
    assert main(["doctor", "--json"]) == 0
    row = next(v for v in json.loads(capsys.readouterr().out)["environment"] if v["name"] == FALLBACK_VAR)
    assert (row["value"], row["set_by"]) == ("0", "you")


# -- 4. exported watermark ratios are checked as the pair torch will read ------------------------------------
@pytest.mark.parametrize("env, words", [
    ({HIGH_WATERMARK_VAR: "0.7"}, f"{HIGH_WATERMARK_VAR}=0.7 and {LOW_WATERMARK_VAR}=unset \\(torch's default 1.4\\)"
                                  ".*'invalid low watermark ratio 1.4'.*Export PYTORCH_MPS_LOW_WATERMARK_RATIO=0.576"),
    ({LOW_WATERMARK_VAR: "1.8"}, f"{HIGH_WATERMARK_VAR}=unset \\(torch's default 1.7\\) and {LOW_WATERMARK_VAR}=1.8"),
    ({HIGH_WATERMARK_VAR: "2.5"}, "'invalid high watermark ratio 2.5'"),
    ({HIGH_WATERMARK_VAR: "0.0", LOW_WATERMARK_VAR: "2.1"}, "to 2.0 when the high is 0.0"),
    ({HIGH_WATERMARK_VAR: "lots"}, "is not a number: torch reads it with strtod"),
])
def test_item4_doctor_refuses_a_pair_torch_would_refuse(clean_env, fake_host, monkeypatch, capsys, env, words):
    fake_host("apple")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["doctor", "--json"]) == 1  # was 0: "usable", then torch stopped at the first allocation
    errors = json.loads(capsys.readouterr().out)["selected"]["errors"]
    assert any(re.search(words, error) for error in errors), errors


@pytest.mark.parametrize("env", [{HIGH_WATERMARK_VAR: "0.7", LOW_WATERMARK_VAR: "0.5"}, {HIGH_WATERMARK_VAR: "0.0"},
                                 {HIGH_WATERMARK_VAR: "1.9"}, {LOW_WATERMARK_VAR: "1.0"}])
def test_item4_pairs_torch_accepts_pass(clean_env, fake_host, monkeypatch, capsys, env):
    fake_host("apple")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["doctor", "--json"]) == 0


def test_item4_launch_refuses_before_starting_the_script(tmp_path, clean_env, fake_host, monkeypatch, capsys):
    fake_host("apple")
    monkeypatch.setenv(HIGH_WATERMARK_VAR, "0.7")
    record = tmp_path / "env.json"
    assert main(["launch", str(script(tmp_path, "rec.py", RECORD_ENV)), str(record)]) != 0
    assert not record.exists()
    assert "invalid low watermark ratio 1.4" in capsys.readouterr().err
    # the launcher's own option sets the low ratio with the high one: the child's pair is valid
    monkeypatch.delenv(HIGH_WATERMARK_VAR)
    assert main(["launch", "--mps-high-watermark-ratio", "0.7", str(script(tmp_path, "rec.py", RECORD_ENV)),
                 str(record)]) == 0


def test_item4_a_run_refuses_at_its_start(clean_env, fake_host, monkeypatch):
    fake_host("apple")
    monkeypatch.setattr(MpsDevice, "torch_device", lambda self, index=0: torch.device("cpu"))
    monkeypatch.setenv(HIGH_WATERMARK_VAR, "0.7")
    with pytest.raises(PlanError, match=f"{HIGH_WATERMARK_VAR}=0.7 and {LOW_WATERMARK_VAR}=unset"):
        Accelerator()


# -- 5. a Mac in a VM: MPS reported, every allocation fails -----------------------------------------------
# What torch raises there for the smallest allocation (actions/runner-images#9918, a macos-14 arm64 runner).
VM_ALLOCATION_ERROR = ("MPS backend out of memory (MPS allocated: 0 bytes, other allocations: 0 bytes, max allowed: "
                       "7.93 GB). Tried to allocate 256 bytes on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 "
                       "to disable upper limit for memory allocations (may cause system failure).")


def fail_every_mps_allocation(monkeypatch) -> None:
    """torch.backends.mps.is_available() says yes; any tensor made on "mps" raises torch's VM text."""
    real_zeros = torch.zeros

    def zeros(*size, device=None, **kwargs):
        if torch.device(device or "cpu").type == "mps":
            raise RuntimeError(VM_ALLOCATION_ERROR)
        return real_zeros(*size, device=device, **kwargs)

    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch, "zeros", zeros)


def test_item5_the_host_facts_probe_one_allocation(monkeypatch, clean_env):
    from braeburn.devices.host import gather_host_facts

    fail_every_mps_allocation(monkeypatch)
    facts = gather_host_facts()
    assert facts.mps_available and facts.mps_allocation_error == VM_ALLOCATION_ERROR.splitlines()[0]


def test_item5_auto_trains_on_the_cpu_and_says_why(fake_host):
    host = fake_host("apple", mps_allocation_error=VM_ALLOCATION_ERROR)
    plan = make_plan(RunOptions(), host)  # was: mps, then the batch-size finder halved to 1
    assert plan.device.name == "cpu"
    assert any("mps skipped: torch reports MPS as available, but allocating a one-element tensor on it failed"
               in note and "virtual machine" in note and "--cpu" in note for note in plan.notes), plan.notes


def test_item5_accelerator_mps_is_refused_with_its_own_message(fake_host):
    host = fake_host("apple", mps_allocation_error=VM_ALLOCATION_ERROR)
    with pytest.raises(PlanError, match="accelerator='mps'.*allocating a one-element tensor on it failed.*"
                       "virtual machine.*run on a Mac with direct access to its GPU"):
        make_plan(RunOptions(accelerator="mps"), host)


def test_item5_doctor_does_not_call_it_usable(fake_host, capsys, clean_env):
    fake_host("apple", mps_allocation_error=VM_ALLOCATION_ERROR)
    assert main(["doctor", "--json"]) == 0  # training works, on the CPU
    report = json.loads(capsys.readouterr().out)
    mps = next(d for d in report["devices"] if d["name"] == "mps")
    assert not mps["usable"] and mps["count"] == 0 and "virtual machine" in mps["reason"]
    assert report["selected"]["device"] == "cpu" and "mps skipped" in report["selected"]["notes"][0]
    assert main(["doctor", "--accelerator", "mps"]) == 1


# -- 2. mixed_precision="auto" on a Mac: float32, with the reason ------------------------------------------
@pytest.mark.parametrize("macos", [(13, 6), (14, 0), (15, 1), (26, 0)])
def test_item2_auto_keeps_float32_on_every_mac_and_says_why(fake_host, macos):
    plan = make_plan(RunOptions(), fake_host("apple", macos_version=macos))
    assert (plan.device.name, plan.precision, plan.grad_scaler) == ("mps", "no", False)  # was bf16 (fp16 on 13)
    assert "no measurement backs" in plan.precision_reason and "emulated on M1/M2" in plan.precision_reason
    assert make_plan(RunOptions(mixed_precision="bf16"), APPLE_M).precision == "bf16"  # one option away


# -- 6 (part). doctor lists every MPS variable PyTorch documents that changes speed or results -------------
def test_item6_doctor_shows_the_other_mps_variables(fake_host, capsys, clean_env, monkeypatch):
    fake_host("apple")
    monkeypatch.setenv("PYTORCH_MPS_FAST_MATH", "1")
    assert main(["doctor", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["environment"]}
    assert {"PYTORCH_MPS_PREFER_METAL", "PYTORCH_MPS_FAST_MATH", "PYTORCH_MPS_LOG_PROFILE_INFO"} <= set(rows)
    assert (rows["PYTORCH_MPS_FAST_MATH"]["value"], rows["PYTORCH_MPS_FAST_MATH"]["set_by"]) == ("1", "you")


# -- 6 (part). float64 models, not only batches ---------------------------------------------------------------
def test_item6_a_float64_model_is_cast_once_and_its_optimizer_follows(fake_mac):
    # On a real Mac, model.to("mps") with float64 weights raises "Cannot convert a MPS Tensor to float64 dtype
    # as the MPS framework doesn't support float64"; here MPS tensors are CPU ones, so the test checks the
    # dtype braeburn hands to that move.
    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match=r"the model's 0.weight, 0.bias, 1.weight and \d+ more are float64; mps has no float64"):
        model, optimizer = accelerator.prepare(model, optimizer)
    assert all(t.dtype != torch.float64 for t in [*model.parameters(), *model.buffers()])
    assert optimizer.param_groups[0]["params"][0] is next(model.parameters())  # the optimizer still steps them
    loss = model(torch.rand(8, 3)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    accelerator.end_training()


# -- 6 (part). fp16 on MPS keeps the fused AdamW: braeburn's own overflow skip guards it ------------------------
def test_item6_fp16_trainer_on_a_mac_uses_the_fused_adamw_and_applies_no_overflow_step(fake_mac, monkeypatch, tmp_path):
    from braeburn import Trainer, TrainingConfig
    from tests.devices.test_mac import IgnoresFoundInfAdamW, overflowing_data

    monkeypatch.setattr(torch.optim, "AdamW", IgnoresFoundInfAdamW)  # MPS's fused kernel: found_inf ignored
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    before = [p.detach().clone() for p in model.parameters()]
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=16,
                            mixed_precision="fp16", logging_steps=1, save_strategy="no", learning_rate=0.1)
    trainer = Trainer(model, config, train_dataset=overflowing_data(), loss_fn=torch.nn.functional.mse_loss)
    trainer.train()
    assert trainer.optimizer.param_groups[0]["fused"]  # was the per-parameter loop
    assert all(torch.equal(w.detach(), b) for w, b in zip(model.parameters(), before))  # every step overflowed


# -- driver memory beside allocated memory, and a warning when they drift apart ------------------------------
def test_driver_memory_in_the_log_line_and_summary_and_drift_warned_once(fake_mac, monkeypatch, tmp_path, capsys):
    from torch.utils.data import TensorDataset

    from braeburn import Trainer

    GiB = 2**30
    steps = iter(range(1, 10**6))
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: GiB // 2)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: next(steps) * GiB)  # grows at each read
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=8, per_device_train_batch_size=4, logging_steps=2,
                            save_strategy="no", mixed_precision="no", disable_tqdm=True)
    data = TensorDataset(torch.rand(32, 4), torch.rand(32, 1))
    trainer = Trainer(torch.nn.Linear(4, 1), config, train_dataset=data, loss_fn=torch.nn.functional.mse_loss)
    trainer.train()
    out = capsys.readouterr().out
    assert "| mem 512.0 MiB (driver 1.0 GiB) |" in out  # the first log: no warning from one reading
    # growth at each of three logs with one batch shape (tests/devices/test_mac_facts.py has the rule's table)
    assert out.count("warning") == 1 and "warning at step 8: the MPS driver's memory beyond live tensors grew" in out
    assert "memory     512.0 MiB in use at the end, " in out and " GiB held by the driver, " in out
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]  # braeburn's log
    assert [row.get("driver_memory_bytes") for row in logged if "loss" in row] == \
        [1.0 * GiB, 2.0 * GiB, 3.0 * GiB, 4.0 * GiB]


# -- DataLoader workers on macOS: the fastest default, and doctor says why -----------------------------------
def test_dataloader_workers_default_is_none_on_a_mac_and_doctor_says_why(fake_host, capsys, clean_env):
    fake_host("apple")
    assert main(["doctor", "--json"]) == 0
    workers = json.loads(capsys.readouterr().out)["dataloader"]
    assert workers["num_workers"] == TrainingConfig().dataloader_num_workers == 0
    assert "spawn" in workers["reason"] and "deadlock on Python 3.12" in workers["reason"]
    assert "--dataloader_persistent_workers true" in workers["reason"]
    main(["doctor"])
    assert "DataLoader workers (Trainer): 0 by default - batches are loaded in the training process" in \
        " ".join(capsys.readouterr().out.split())
    fake_host("linux_cpu")
    assert main(["doctor", "--json"]) == 0
    assert "fork" in json.loads(capsys.readouterr().out)["dataloader"]["reason"]


# -- the MPS lane: one command on a Mac, skipped here with its reason, a report to paste --------------------
@pytest.mark.slow  # the MPS lane as a subprocess (11 s on a loaded machine)
@pytest.mark.skipif(__import__("sys").platform == "darwin", reason="on a Mac the lane runs for real: see its report")
def test_the_mps_lane_runs_with_one_command_and_writes_its_report(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    left_before = (root / "mps-lane-report.md").exists()
    out = tmp_path / "outputs" / "mps-lane-report.md"  # the default: under the folder it ran from, never the repo root
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "mps_lane.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 6, done.stdout[-3000:] + done.stderr[-3000:]  # nothing could be tested here
    report = out.read_text()
    assert report.startswith("## braeburn MPS lane\n") and "torch " in report and "chip: " in report
    assert "- MPS: not usable (MPS needs macOS on Apple silicon; this is Linux)" in report
    assert "- NOTHING WAS TESTED: every claim was skipped" in report and "| fact | braeburn read | the system says |" in report
    for claim in ("test_mps_is_chosen_by_default", "test_the_fallback_report_counts_each_call_of_an_unsupported_op",
                  "test_fp16_with_the_fused_adamw_applies_no_overflow_step",
                  "test_the_batch_size_finder_catches_both_mps_out_of_memory_errors[buffer]",
                  "test_the_batch_size_finder_catches_both_mps_out_of_memory_errors[watermark]",
                  "test_save_and_load_state_round_trip_bitwise[fp16]",
                  "test_checkpointing_with_dropout_gives_the_right_gradients", "test_auto_precision_is_measured_and_shown",
                  "test_the_image_example_trains_on_mps", "test_the_text_example_trains_on_mps"):
        assert f"| {claim} | skipped | Skipped: needs 1 usable mps device(s)" in report, claim
    assert f"report written to {out}" in done.stdout and (root / "mps-lane-report.md").exists() == left_before


@pytest.mark.slow  # the lane's script as a subprocess (3 s)
def test_the_mps_lane_without_pytest_says_in_one_line_what_to_install(tmp_path):
    """After the README's first command (the examples' extra: no pytest) the lane died with a ModuleNotFoundError
    traceback."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    hidden = tmp_path / "no-pytest"
    hidden.mkdir()
    (hidden / "pytest.py").write_text("raise ModuleNotFoundError(\"No module named 'pytest'\", name='pytest')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "mps_lane.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == ['benchmarks/mps_lane.py runs braeburn\'s tests, which need pytest and '
                                                'the peers they compare against: pip install -e ".[test]" (the '
                                                'README\'s test set-up), then run it again']
