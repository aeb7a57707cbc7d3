"""The MPS lane: every claim braeburn makes about Apple silicon, checked on a real Mac. Every test here carries
``requires("mps")`` and is skipped where MPS is not usable (this Linux CI, a Mac in a VM, a Rosetta Python).

On a Mac, run ``python benchmarks/mps_lane.py``: it runs this file and writes a short report (braeburn, torch,
macOS, chip, each claim's result, the precision measurement) to paste into a bug report. docs/devices.md,
"The MPS lane", lists the claims and the PyTorch fact behind each.

Nothing here pins a device: the Accelerator and the Trainer choose MPS as they do for a user. Fallback and
allocator checks run in a child process, since both are set when torch loads or first allocates.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.utils.checkpoint
from torch import nn
from torch.utils.data import TensorDataset

from braeburn import Accelerator
from braeburn import Trainer, TrainingConfig  # what users run (the public, composed Trainer)

pytestmark = [pytest.mark.requires("mps"), pytest.mark.usefixtures("no_launcher_env")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def child(code: str, *args: str, **env: str) -> dict:
    """Run ``code`` in a fresh Python that imports braeburn before torch (as a user's script does); its last
    stdout line is JSON."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), **env}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600,
                          env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the device is chosen by default -------------------------------------------------------------------------
def test_mps_is_chosen_by_default():
    accelerator = Accelerator()
    assert accelerator.device.type == "mps", accelerator.plan.device_reason
    assert accelerator.precision == "no" and accelerator.plan.precision_candidates  # auto: measured by the Trainer
    accelerator.end_training()


# -- the CPU-fallback report counts an unsupported op every time it runs ----------------------------------------
CANDIDATE_OPS = """
x = torch.rand(6, 6, device="mps")
candidates = {  # ops MPS has lacked (pytorch#77764, #141287); the first that falls back on this torch is used
    "linalg.eig": lambda: torch.linalg.eig(x), "linalg.svd": lambda: torch.linalg.svd(x),
    "linalg.qr": lambda: torch.linalg.qr(x), "nanmedian": lambda: torch.nanmedian(x, dim=0),
    "kthvalue": lambda: torch.kthvalue(x, 2, dim=0), "histc": lambda: torch.histc(x, bins=4),
}
"""
FALLBACK = """
import json
import braeburn  # sets PYTORCH_ENABLE_MPS_FALLBACK=1 before torch loads, as for a user's script
import torch
from braeburn import Accelerator

accelerator = Accelerator()
""" + CANDIDATE_OPS + """
found = None
for name, call in candidates.items():
    before = dict(accelerator.fallback_report())
    try:
        for _ in range(3):
            call()
    except Exception:
        continue
    after = dict(accelerator.fallback_report())
    counts = {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}
    if counts:
        found = {"call": name, "counts": counts}
        break
accelerator.end_training()
print(json.dumps(found))
"""


def test_the_fallback_report_counts_each_call_of_an_unsupported_op():
    found = child(FALLBACK, PYTORCH_ENABLE_MPS_FALLBACK="1")
    if found is None:
        pytest.skip("none of the candidate ops falls back to the CPU on this torch (all implemented on MPS now)")
    assert all(count % 3 == 0 and count > 0 for count in found["counts"].values()), found  # 3 calls, 3 each


# -- fp16 with the fused AdamW stays finite through an overflow ---------------------------------------------------
def test_fp16_with_the_fused_adamw_applies_no_overflow_step(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    before = [p.detach().clone() for p in model.parameters()]
    data = TensorDataset(torch.ones(32, 4), torch.full((32, 1), 1000.0))  # x GradScaler's 65536: fp16 overflows
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=16,
                            mixed_precision="fp16", logging_steps=1, save_strategy="no", learning_rate=0.1)
    trainer = Trainer(model, config, train_dataset=data, loss_fn=nn.functional.mse_loss)
    trainer.train()
    assert trainer.optimizer.param_groups[0]["fused"]
    after = [p.detach().cpu() for p in model.parameters()]
    assert all(torch.isfinite(p).all() for p in after)
    assert all(torch.equal(a, b) for a, b in zip(after, before))  # every step overflowed: none applied


# -- the batch-size finder catches both MPS out-of-memory errors ---------------------------------------------------
FINDER = """
import json, sys
import braeburn
import torch
from braeburn.data.batch_size import find_batch_size
from braeburn.devices.registry import get_kind

errors, held = [], []
def step(batch):
    held.clear()
    try:
        if sys.argv[1] == "buffer":  # one tensor of `batch` GiB: Metal's per-buffer limit comes first
            held.append(torch.empty(batch * 2**30, dtype=torch.uint8, device="mps"))
        else:  # many 64 MiB tensors under a low watermark: torch's limit
            held.extend(torch.empty(2**26, dtype=torch.uint8, device="mps") for _ in range(batch))
    except RuntimeError as error:
        errors.append(str(error).splitlines()[0])
        raise
    finally:
        held.clear()
found = find_batch_size(step, start=1, max_batch=2**16, device_kind=get_kind("mps"))
print(json.dumps({"found": found, "errors": errors}))
"""


@pytest.mark.parametrize("case, env, marker", [
    ("buffer", {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0"}, "Invalid buffer size"),
    ("watermark", {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.1", "PYTORCH_MPS_LOW_WATERMARK_RATIO": "0.05"},
     "MPS backend out of memory")], ids=["buffer", "watermark"])
def test_the_batch_size_finder_catches_both_mps_out_of_memory_errors(case, env, marker):
    result = child(FINDER, case, **env)
    assert result["found"] >= 1, result
    assert any(marker in error for error in result["errors"]), result


# -- save and load round-trip bitwise ---------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["no", "bf16", "fp16"])
def test_save_and_load_state_round_trip_bitwise(tmp_path, precision):
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    y = x[:, :4].argmax(1)

    def setup(seed):
        torch.manual_seed(seed)
        accelerator = Accelerator(mixed_precision=precision, seed=seed)
        model = nn.Sequential(nn.Linear(32, 64), nn.Dropout(0.3), nn.ReLU(), nn.Linear(64, 4))
        model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
        return accelerator, model, optimizer

    def steps(accelerator, model, optimizer, n):
        for _ in range(n):
            with accelerator.autocast():
                loss = nn.functional.cross_entropy(model(x.to(accelerator.device)), y.to(accelerator.device))
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        return [p.detach().cpu().clone() for p in accelerator.unwrap_model(model).parameters()]

    try:
        accelerator, model, optimizer = setup(0)
    except ValueError as error:  # bf16 before macOS 14: refused with its reason
        pytest.skip(str(error))
    steps(accelerator, model, optimizer, 3)
    accelerator.save_state(tmp_path / "state")
    generator = torch.mps.get_rng_state()
    expected = steps(accelerator, model, optimizer, 3)
    again, model2, optimizer2 = setup(1)
    again.load_state(tmp_path / "state")
    assert torch.equal(torch.mps.get_rng_state(), generator)
    assert all(torch.equal(a, b) for a, b in zip(expected, steps(again, model2, optimizer2, 3)))


# -- gradient checkpointing with dropout gives the gradients of the plain forward --------------------------------
class CheckpointedNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.drop, self.last = nn.Linear(8, 32), nn.Dropout(0.5), nn.Linear(32, 1)
        self.checkpoint = None

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        kwargs = gradient_checkpointing_kwargs or {"use_reentrant": False}
        self.checkpoint = lambda function, *args: torch.utils.checkpoint.checkpoint(function, *args, **kwargs)

    def forward(self, x):
        block = lambda h: self.drop(torch.relu(self.first(h)))  # noqa: E731
        return self.last(self.checkpoint(block, x) if self.checkpoint else block(x))


def test_checkpointing_with_dropout_gives_the_right_gradients():
    from braeburn.devices.host import current_host
    from braeburn.devices.registry import get_kind
    from braeburn.trainer.checkpointing import prepare_model_options

    def gradients(model):
        model = model.to("mps")
        torch.mps.manual_seed(1)
        x = torch.randn(16, 8, generator=torch.Generator().manual_seed(2)).to("mps")
        model(x).pow(2).mean().backward()
        return [p.grad.cpu().clone() for p in model.parameters()]

    expected = gradients(CheckpointedNet())
    model = CheckpointedNet()
    prepare_model_options(model, TrainingConfig(gradient_checkpointing=True,
                                                gradient_checkpointing_kwargs={"use_reentrant": False}),
                          get_kind("mps"), current_host())
    for got, want in zip(gradients(model), expected):
        torch.testing.assert_close(got, want)


# -- the precision measurement (mixed_precision="auto") --------------------------------------------------------
def _train_lane_model(output_dir: Path, precision: str, steps: int):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 256), torch.randn(512, 1))
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Dropout(0.1), nn.Linear(1024, 1024), nn.GELU(),
                          nn.Linear(1024, 1))
    config = TrainingConfig(output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=64,
                            mixed_precision=precision, save_strategy="no", logging_steps=500, disable_tqdm=True, seed=0)
    trainer = Trainer(model, config, train_dataset=data, loss_fn=nn.functional.mse_loss)
    result = trainer.train()
    return trainer, result, [p.detach().cpu().clone() for p in model.parameters()]


def test_auto_precision_is_measured_and_shown(tmp_path, capsys, record_property):
    from braeburn.plan.precision_trial import Trial, Window, decide, min_run_steps

    steps = min_run_steps(2)  # long enough for the trial to run with either number of candidates
    trainer, result, weights = _train_lane_model(tmp_path / "auto", "auto", steps)
    line = next(line for line in capsys.readouterr().out.splitlines() if "timed on your model" in line)
    record_property("precision", line)  # the lane's report shows it
    assert math.isfinite(result.training_loss)
    # The choice follows from the evidence printed: the rule, run again on the numbers metrics.jsonl kept, gives
    # the same precision, and the line shows those numbers and that reason.
    records = [json.loads(row) for row in (tmp_path / "auto" / "metrics.jsonl").read_text().splitlines()]
    measured = next(row["run"]["precision"] for row in records if "precision" in row.get("run", {}))
    trials = [Trial(row["precision"], tuple(Window(w["seconds"], tuple(w["applied"])) for w in row["windows"]),
                    row["first_loss"], row["finite"], row["error"]) for row in measured["trials"]]
    decision = decide(trials, measured["stopped"])
    assert decision.precision == measured["precision"] == trainer.accelerator.precision, (line, decision.reason)
    assert line.endswith(f"timed on your model: {decision.table}: {decision.reason}"), line
    # The trial leaves no trace: the same script asking for that precision outright trains bitwise the same weights.
    _, _, expected = _train_lane_model(tmp_path / "asked", decision.precision, steps)
    if not all(torch.equal(got, want) for got, want in zip(weights, expected)):
        _, _, again = _train_lane_model(tmp_path / "again", decision.precision, steps)
        reproducible = all(torch.equal(got, want) for got, want in zip(expected, again))
        pytest.fail(f"the run measured with mixed_precision='auto' ended with other weights than "
                    f"mixed_precision={decision.precision!r} asked outright: " +
                    ("the trial left a trace in the run" if reproducible else
                     "but two runs asked outright differ too: training on this Mac is not bitwise reproducible, so "
                     "the trial's trace cannot be checked here"))


# -- both examples train -------------------------------------------------------------------------------------------
def test_the_image_example_trains_on_mps(tmp_path):
    command = [sys.executable, str(EXAMPLES / "image_classification.py"), "--max_steps", "30",
               "--output_dir", str(tmp_path), "--learning_rate", "1e-3", "--per_device_train_batch_size", "32"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "device     mps" in finished.stdout, finished.stdout[-3000:]
    assert (tmp_path / "eval_results.json").is_file()


def test_the_text_example_trains_on_mps(tmp_path, capsys):
    from tests.examples.test_examples import train_text_example_briefly

    metrics = train_text_example_briefly(tmp_path)
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0
    assert "device     mps" in capsys.readouterr().out


# -- quick checks of the facts and warnings braeburn gives on a Mac (seconds each) ---------------------------------
def test_an_exported_high_watermark_of_0_7_alone_fails_as_braeburn_says_torch_will():
    from braeburn.devices.mps import HIGH_WATERMARK_VAR, LOW_WATERMARK_VAR, watermark_env_problem

    predicted = watermark_env_problem({HIGH_WATERMARK_VAR: "0.7"})  # torch's default low ratio, 1.4, is above it
    assert predicted is not None and "invalid low watermark ratio" in predicted
    env = {k: v for k, v in os.environ.items() if k not in (HIGH_WATERMARK_VAR, LOW_WATERMARK_VAR)}
    done = subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1, device='mps')"], capture_output=True,
                          text=True, timeout=300, env={**env, HIGH_WATERMARK_VAR: "0.7"})  # torch alone, no braeburn
    assert done.returncode != 0, "torch accepted PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.7 alone, which braeburn refuses"
    assert "invalid low watermark ratio" in done.stderr, done.stderr[-3000:]


ONE_OP = """
import json, os, sys
import braeburn
import torch
""" + CANDIDATE_OPS + """
try:
    candidates[sys.argv[1]]()
    error = None
except NotImplementedError as raised:
    error = "NotImplementedError: " + str(raised).splitlines()[0]
print(json.dumps({"fallback_var": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK"), "error": error}))
"""


def test_launch_no_mps_fallback_makes_an_op_mps_lacks_raise(tmp_path):
    found = child(FALLBACK, PYTORCH_ENABLE_MPS_FALLBACK="1")
    if found is None:
        pytest.skip("none of the candidate ops falls back to the CPU on this torch (all implemented on MPS now)")
    script = tmp_path / "one_op.py"
    script.write_text(ONE_OP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_ENABLE_MPS", "BRAEBURN_"))}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-m", "braeburn.cli.main", "launch", "--no-mps-fallback", str(script),
                           found["call"]], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["fallback_var"] == "0", result
    assert result["error"] is not None and "not currently implemented for the MPS device" in result["error"], result


def test_a_float64_model_trains_on_mps(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).double()
    start = [p.detach().float().clone() for p in model.parameters()]
    data = TensorDataset(torch.randn(64, 8, dtype=torch.float64), torch.randn(64, 1, dtype=torch.float64))
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=8, per_device_train_batch_size=16, save_strategy="no",
                            logging_steps=4, disable_tqdm=True, mixed_precision="no")
    result = Trainer(model, config, train_dataset=data, loss_fn=nn.functional.mse_loss).train()
    assert {(p.device.type, p.dtype) for p in model.parameters()} == {("mps", torch.float32)}
    assert math.isfinite(result.training_loss)
    assert not all(torch.equal(p.detach().cpu(), s) for p, s in zip(model.parameters(), start))  # it trained


READ_FACTS = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import braeburn
    from braeburn.devices.host import gather_host_facts
    facts = gather_host_facts()
print(json.dumps({"macos": list(facts.macos_version), "warnings": [str(w.message) for w in caught]}))
"""


def test_the_macos_version_braeburn_reads_is_sw_vers_with_no_torch_warning(record_property):
    from braeburn.devices.host import parse_version

    result = child(READ_FACTS)
    stated = subprocess.run(["sw_vers", "-productVersion"], capture_output=True, text=True, timeout=30,
                            env={**os.environ, "SYSTEM_VERSION_COMPAT": "0"}).stdout.strip()
    record_property("macOS version", f"braeburn read {'.'.join(map(str, result['macos']))}, sw_vers says {stated}")
    assert tuple(result["macos"]) == parse_version(stated)
    assert [w for w in result["warnings"] if "MacOS" in w or "running on" in w] == []


def test_the_driver_memory_warning_stays_silent_on_a_fixed_shape_run(tmp_path, capsys, record_property):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(1024, 256), torch.randn(1024, 1))  # one batch shape throughout
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1))
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=60, per_device_train_batch_size=64, logging_steps=5,
                            save_strategy="no", disable_tqdm=True, mixed_precision="no")
    trainer = Trainer(model, config, train_dataset=data, loss_fn=nn.functional.mse_loss)
    trainer.train()
    out = capsys.readouterr().out
    rows = [row for row in trainer.state.log_history if "driver_memory_bytes" in row]
    record_property("driver memory at one shape", ", ".join(
        f"step {row['step']}: {row['driver_memory_bytes'] / 2**20:.0f} MiB ({row['memory_bytes'] / 2**20:.0f} MiB "
        "tensors)" for row in rows))
    assert len(rows) >= 4  # enough readings for the rule to judge
    assert "MPS driver" not in out, out[-3000:]


def test_braeburns_mps_memory_figures_are_torchs_and_whether_torch_accelerator_has_them(record_property):
    from braeburn.devices.mps import MpsDevice

    held = torch.empty(2**24, dtype=torch.uint8, device="mps")  # 16 MiB
    torch.mps.synchronize()
    ours = MpsDevice().memory_stats()
    assert ours["allocated_bytes"] == torch.mps.current_allocated_memory() >= held.numel()
    assert ours["driver_bytes"] >= ours["allocated_bytes"]
    try:
        theirs = torch.accelerator.memory_allocated()
    except Exception as error:  # what torch says is the answer: recorded in the report
        record_property("torch.accelerator memory statistics on MPS",
                        f"not available: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        return
    record_property("torch.accelerator memory statistics on MPS",
                    f"available: memory_allocated() = {theirs}, torch.mps.current_allocated_memory() = "
                    f"{torch.mps.current_allocated_memory()}")
    assert theirs == torch.mps.current_allocated_memory()


class ForwardCheckpointedNet(nn.Module):
    """Checkpoints its own block: through torch.utils.checkpoint looked up at the call, or a name bound earlier."""

    def __init__(self, bound, reentrant: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.drop, self.last = nn.Linear(8, 32), nn.Dropout(0.5), nn.Linear(32, 1)
        self.bound, self.reentrant = bound, reentrant

    def forward(self, x):
        block = lambda h: self.drop(torch.relu(self.first(h)))  # noqa: E731
        if self.bound is None:
            return self.last(block(x))
        checkpoint = self.bound or torch.utils.checkpoint.checkpoint
        return self.last(checkpoint(block, x, use_reentrant=self.reentrant))


def test_checkpointing_in_a_users_forward_is_replayed_on_mps():
    from torch.utils.checkpoint import checkpoint as bound_checkpoint

    accelerator = Accelerator()

    def gradients(model, noise: bool = False):
        model = accelerator.prepare(model)
        if noise:  # gradient noise drawn from the MPS generator during the backward, on purpose
            for parameter in model.parameters():
                parameter.register_hook(lambda grad: grad + 1e-3 * torch.randn_like(grad))
        torch.mps.manual_seed(1)
        x = torch.randn(16, 8, generator=torch.Generator().manual_seed(2)).to("mps").requires_grad_()
        accelerator.backward(model(x).pow(2).mean())
        return [p.grad.cpu().clone() for p in model.parameters()]

    expected = gradients(ForwardCheckpointedNet(None))
    for how in (False, bound_checkpoint):  # looked up at the call, and bound before braeburn looked
        for reentrant in (False, True):
            for got, want in zip(gradients(ForwardCheckpointedNet(how, reentrant)), expected):
                torch.testing.assert_close(got, want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a backward that draws random numbers on purpose trains with no word
        gradients(ForwardCheckpointedNet(None), noise=True)
    accelerator.end_training()
