"""What a Mac user meets, each row on a faked Mac: Apple-silicon host facts, torch.mps faked,
and CPU tensors standing in for MPS tensors, so MpsDevice's own code answers every device question.

The PyTorch facts each test rests on are quoted in docs/devices.md ("Mac: what braeburn does for you").
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import braeburn
from braeburn import _early
from braeburn.devices import environment as import_env
from braeburn.data.batch_size import find_batch_size
from braeburn.devices.mps import FALLBACK_VAR, HIGH_WATERMARK_VAR, MpsDevice, min_macos_for
from braeburn.devices.fallback import FallbackRecorder
from braeburn.plan.rules import PlanError, RunOptions, make_plan
from tests.conftest import APPLE_M

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30
# MPSAllocator.mm's two out-of-memory texts: Metal's per-buffer limit (checked first), then the watermark.
BUFFER_ERROR = "Invalid buffer size: 9.00 GB"
WATERMARK_OOM = ("MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.20 GB, max allowed: "
                 "18.13 GB). Tried to allocate 1.00 GB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 "
                 "to disable upper limit for memory allocations (may cause system failure).")


def fallback_text(op: str) -> str:  # MPSFallback.mm, word for word
    return (f"The operator '{op}' is not currently supported on the MPS backend and will fall back to run on "
            "the CPU. This may have performance implications.")


class FakeMpsMemory:
    """torch.mps's memory calls: ``held`` is what the driver holds (cached buffers included)."""

    def __init__(self, recommended: int = 24 * GiB):
        self.recommended, self.held = recommended, 0

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: self.recommended)
        monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: self.held)
        monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: self.held // 2)
        monkeypatch.setattr(torch.mps, "empty_cache", self.empty_cache)

    def empty_cache(self) -> None:
        self.held = 0


@pytest.fixture
def fake_mac(fake_host, monkeypatch, no_launcher_env):
    """An M-series Mac with torch 2.13: MpsDevice answers, its tensors are CPU tensors."""
    fake_host("apple")
    monkeypatch.setattr(MpsDevice, "torch_device", lambda self, index=0: torch.device("cpu"))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: None)
    monkeypatch.setattr(torch.mps, "manual_seed", lambda seed: None)
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda: torch.get_rng_state())
    monkeypatch.setattr(torch.mps, "set_rng_state", lambda state: None)
    monkeypatch.delenv(HIGH_WATERMARK_VAR, raising=False)
    monkeypatch.setenv(FALLBACK_VAR, "1")  # what `import braeburn` sets on a Mac before torch loads
    memory = FakeMpsMemory()
    memory.install(monkeypatch)
    warn_always = torch.is_warn_always_enabled()
    yield memory
    torch.set_warn_always(warn_always)  # an Accelerator left without end_training() keeps it on


# -- row 1: fp16 with the fused AdamW -------------------------------------------------------------

class IgnoresFoundInfAdamW(torch.optim.AdamW):
    """What MPS's fused kernel does (FusedAdamWKernelImpl.mm): it takes grad_scale and found_inf from
    GradScaler and ignores both, so an overflow step is applied with the scaled gradients."""

    def step(self, closure=None):
        handed = {name: self.__dict__.pop(name) for name in ("grad_scale", "found_inf") if name in self.__dict__}
        try:
            return super().step(closure)
        finally:
            self.__dict__.update(handed)


def overflowing_data() -> TensorDataset:
    # targets far from the output: d(loss)/d(output) x GradScaler's 65536 overflows fp16 on every step here
    return TensorDataset(torch.ones(32, 4), torch.full((32, 1), 1000.0))


def test_row1_fp16_trainer_on_a_mac_never_applies_an_overflow_step(fake_mac, monkeypatch, tmp_path):
    from braeburn import Trainer, TrainingConfig

    monkeypatch.setattr(torch.optim, "AdamW", IgnoresFoundInfAdamW)  # what the Trainer builds, if fused
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    before = [p.detach().clone() for p in model.parameters()]
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=16,
                            mixed_precision="fp16", logging_steps=1, save_strategy="no", learning_rate=0.1)
    trainer = Trainer(model, config, train_dataset=overflowing_data(), loss_fn=torch.nn.functional.mse_loss)
    assert trainer.accelerator.plan.device.name == MpsDevice.name and trainer.accelerator.scaler is not None
    trainer.train()
    assert trainer.optimizer.param_groups[0]["fused"]  # fused: braeburn skips the overflow step itself
    for weight, start in zip(model.parameters(), before):
        assert torch.isfinite(weight).all()
        assert torch.equal(weight.detach(), start)  # every step overflowed: none was applied
    assert trainer.accelerator.optimizer_step_was_skipped


def test_row1_a_users_fused_optimizer_is_guarded_too(fake_mac):
    from braeburn import Accelerator

    accelerator = Accelerator(mixed_precision="fp16")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = IgnoresFoundInfAdamW(model.parameters(), lr=0.1, fused=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    start = [p.detach().clone() for p in model.parameters()]
    x, y = overflowing_data().tensors
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
    assert accelerator.optimizer_step_was_skipped  # said "skipped", and it was
    assert all(torch.equal(p.detach(), s) for p, s in zip(model.parameters(), start))
    optimizer.zero_grad()
    accelerator.backward(model(x).mean() * 1e-6)  # no overflow: the step is applied, with true gradients
    optimizer.step()
    assert not accelerator.optimizer_step_was_skipped
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert not all(torch.equal(p.detach(), s) for p, s in zip(model.parameters(), start))
    accelerator.end_training()


def test_row1_devices_that_honour_found_inf_keep_the_fused_kernel(fake_host):
    from braeburn.devices.registry import get_kind
    from braeburn.trainer.optim import use_fused_adamw

    assert use_fused_adamw(get_kind("cuda"), grad_scaler=True, host=fake_host("cuda"))
    assert use_fused_adamw(MpsDevice(), grad_scaler=False, host=APPLE_M)  # bf16/float32: nothing to skip
    assert use_fused_adamw(MpsDevice(), grad_scaler=True, host=APPLE_M)  # guarded by ScaledFp16Policy


# -- row 2: the CPU-fallback report counts every op and every call ----------------------------------

class FakeMpsFallback:
    """MPSFallback.mm's mps_fallback: TORCH_WARN_ONCE at one call site shared by every op, so torch warns
    once per process in total unless torch.set_warn_always(True)."""

    warned = False

    def __call__(self, op: str) -> None:
        if torch.is_warn_always_enabled() or not self.warned:
            self.warned = True
            warnings.warn(fallback_text(op), UserWarning)



@pytest.fixture(autouse=True)
def _warn_always_restored():
    """An Accelerator left recording (no end_training) keeps torch's warn-always on: never into the next test."""
    previous = torch.is_warn_always_enabled()
    yield
    torch.set_warn_always(previous)


def test_row2_fallback_report_counts_every_op_and_call(fake_mac, monkeypatch, capsys):
    from braeburn import Accelerator

    run_op = FakeMpsFallback()
    shown: list[str] = []
    before = torch.is_warn_always_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # Python's own: once per message and code location
        monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: shown.append(str(message)))
        accelerator = Accelerator()
        for _ in range(3):  # three training steps, each using two ops MPS lacks
            run_op("aten::angle")
            run_op("aten::cumprod.out")
        assert accelerator.fallback_report() == [("aten::angle", 3), ("aten::cumprod.out", 3)]
        accelerator.end_training()
    assert "aten::angle x3, aten::cumprod.out x3" in capsys.readouterr().out
    fallbacks = [text for text in shown if "fall back to run on the CPU" in text]
    assert fallbacks == [fallback_text("aten::angle"), fallback_text("aten::cumprod.out")]  # each op once
    assert torch.is_warn_always_enabled() == before  # restored when recording stopped


def test_row2_check_reads_the_childs_full_counts():
    from braeburn.cli.check import SideRun, read_stderr

    run = SideRun("accelerator", "mps", 0, {"fallback_ops": {"aten::angle": 10}},
                  stderr=fallback_text("aten::angle") + "\n" + fallback_text("aten::cumprod.out") + "\n")
    read_stderr(run)
    assert dict(run.fallback_ops) == {"aten::angle": 10, "aten::cumprod.out": 1}


# -- row 3: `python train.py` gets the fallback on ---------------------------------------------------

def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != FALLBACK_VAR}
    environ.update(PYTHONPATH=str(Path(braeburn.__file__).resolve().parents[1]), **env)  # the braeburn under test
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60)


ON_A_MAC = "import platform; platform.system = lambda: 'Darwin'\n"
ON_LINUX = "import platform; platform.system = lambda: 'Linux'\n"
SHOW = "import os, sys, braeburn; print(os.environ.get('PYTORCH_ENABLE_MPS_FALLBACK'), 'torch' in sys.modules)"


def test_row3_importing_braeburn_before_torch_turns_the_fallback_on_on_macos():
    assert run_python(ON_A_MAC + SHOW).stdout.split() == ["1", "False"]  # set before torch loads
    assert run_python(ON_A_MAC + SHOW, PYTORCH_ENABLE_MPS_FALLBACK="0").stdout.split() == ["0", "False"]
    assert run_python(ON_LINUX + SHOW).stdout.split() == ["None", "False"]  # nothing to set there
    # `braeburn doctor` then reports it as set before torch loaded: it is what torch will see
    seen = run_python(ON_A_MAC + "from braeburn import _early; print(_early.ENV_AT_IMPORT.get('PYTORCH_ENABLE_MPS_FALLBACK'))")
    assert seen.stdout.strip() == "1"


def test_row3_a_value_libtorch_cannot_parse_is_explained_before_torch_aborts():
    done = run_python(ON_A_MAC + SHOW, PYTORCH_ENABLE_MPS_FALLBACK="true")
    assert done.stdout.split() == ["true", "False"]  # the user's value stays
    assert "PYTORCH_ENABLE_MPS_FALLBACK='true' is not a whole number" in done.stderr
    assert "std::stoi" in done.stderr and "Use 1" in done.stderr


def test_row3_nothing_is_set_once_torch_has_loaded():
    environ: dict[str, str] = {}
    assert import_env.import_defaults(environ, "Darwin", torch_loaded=True) == [] and environ == {}
    assert import_env.import_defaults(environ, "Darwin", torch_loaded=False) == []
    assert environ == {FALLBACK_VAR: "1", _early.SET_BY_BRAEBURN_VAR: f"{FALLBACK_VAR}=1"}  # marked as braeburn's
    assert import_env.import_defaults({FALLBACK_VAR: " 1"}, "Darwin", torch_loaded=False) == []  # stoi skips spaces


# -- rows 4 and 5: the batch-size finders ---------------------------------------------------------

def memory_hungry_step(memory: FakeMpsMemory, per_sample: int, error_over: int, text: str, tries: list[int]):
    """A step whose memory grows with the batch; past ``error_over`` bytes it raises ``text``."""

    def step(batch: int) -> None:
        tries.append(batch)
        if batch * per_sample > error_over:
            raise RuntimeError(text)
        memory.held = batch * per_sample  # cached by the allocator until empty_cache()

    return step


@pytest.mark.slow  # 12 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("text", [BUFFER_ERROR, WATERMARK_OOM])
def test_row4_both_mps_out_of_memory_errors_halve(fake_mac, text):
    tries: list[int] = []
    step = memory_hungry_step(fake_mac, GiB // 8, 4 * GiB, text, tries)  # 32 fits, 64 fails
    assert find_batch_size(step, start=128, device_kind=MpsDevice()) == 32
    assert tries == [128, 64, 32]
    assert find_batch_size(step, start=8, device_kind=MpsDevice()) == 32


def test_row5_growing_search_stops_below_the_recommended_working_set(fake_mac):
    tries: list[int] = []
    # 1 GiB a sample; torch's limit is 1.7 x 24 GiB = 40.8 GiB, so 32 "fits" (and pages); 16 stays below 24.
    step = memory_hungry_step(fake_mac, GiB, int(1.7 * 24 * GiB), WATERMARK_OOM, tries)
    assert find_batch_size(step, start=4, max_batch=256, device_kind=MpsDevice()) == 16
    assert tries == [4, 8, 16, 32]
    assert fake_mac.held == 0  # cached memory given back after the last try


def test_row5_a_single_sample_that_pages_still_trains(fake_mac):
    step = memory_hungry_step(fake_mac, 30 * GiB, 100 * GiB, WATERMARK_OOM, [])
    assert find_batch_size(step, start=2, device_kind=MpsDevice()) == 1


# -- row 6: watermarks --------------------------------------------------------------------------

@pytest.mark.parametrize("options, option, words", [
    ({"mps_high_watermark_ratio": 2.5}, "mps_high_watermark_ratio", "0.0 to 2.0"),
    ({"mps_low_watermark_ratio": 1.8}, "mps_low_watermark_ratio", "torch's default high ratio (1.7)"),
    ({"mps_high_watermark_ratio": 0.0, "mps_low_watermark_ratio": 2.5}, "mps_low_watermark_ratio",
     "2.0 when the high ratio is 0.0"),
    ({"mps_high_watermark_ratio": 1.0, "mps_low_watermark_ratio": 1.2}, "mps_low_watermark_ratio",
     "mps_high_watermark_ratio (1.0)"),
    ({"mps_low_watermark_ratio": -0.5}, "mps_low_watermark_ratio", ">= 0"),
])
def test_row6_every_watermark_torch_refuses_is_refused_at_plan_time(options, option, words):
    with pytest.raises(PlanError) as caught:
        make_plan(RunOptions(compile="maybe", **options), APPLE_M)
    assert [(e.option, e.value) for e in caught.value.errors] == [("compile", "maybe"), (option, options[option])]
    assert words in caught.value.errors[1].message


def test_row6_watermarks_torch_accepts_pass():
    for high, low in ((2.0, None), (0.0, 1.9), (None, 1.7), (1.0, 1.0), (0.0, None)):
        make_plan(RunOptions(mps_high_watermark_ratio=high, mps_low_watermark_ratio=low), APPLE_M)


def test_row6_launch_reports_them_with_the_other_problems(clean_env):
    from braeburn.cli.launch import plan_launch
    from braeburn.cli.launch_config import ConfigError, resolve_settings

    resolved = resolve_settings({"mps_high_watermark_ratio": "2.5", "num_machines": "0"}, {}, None)
    with pytest.raises(ConfigError) as caught:
        plan_launch(resolved, APPLE_M, {})
    text = str(caught.value)
    assert "num_machines" in text and "mps_high_watermark_ratio=2.5" in text and "0.0 to 2.0" in text


# -- row 7: compile=True on MPS -------------------------------------------------------------------

def test_row7_compile_true_is_refused_before_torch_2_8_and_warned_before_2_13(fake_host):
    old = APPLE_M.replace(torch_version=(2, 7, 1), torch_version_str="2.7.1")
    with pytest.raises(PlanError) as caught:
        make_plan(RunOptions(compile=True), old)
    (error,) = caught.value.errors
    assert error.option == "compile" and "BackendCompilerFailed" in error.message
    assert "compile=False" in error.message and "torch 2.13" in error.message
    assert not make_plan(RunOptions(), old).compile  # "auto" stays eager, no error

    risky = APPLE_M.replace(torch_version=(2, 10, 0), torch_version_str="2.10.0")
    plan = make_plan(RunOptions(compile=True), risky)
    assert plan.compile and len(plan.notes) == 1 and "braeburn check" in plan.notes[0]
    assert "pytorch#192551" in make_plan(RunOptions(compile=True), APPLE_M).notes[0]  # 2.13: slower than eager
    assert make_plan(RunOptions(compile=True, cpu=True), old).compile  # the CPU is not gated


def test_row7_the_accelerator_shows_the_warning(fake_mac, fake_host):
    from braeburn import Accelerator

    fake_host("apple", torch_version=(2, 11, 0), torch_version_str="2.11.0")
    with pytest.warns(UserWarning, match="braeburn check"):
        Accelerator(compile=True).end_training()


# -- row 8: float64 batches, models and float labels: the same on every device ------------------------

@pytest.fixture(params=["mac", "cpu"])
def device(request, no_launcher_env) -> str:
    """A faked Mac (MPS answers) and the CPU: float64 must behave the same on both."""
    request.getfixturevalue("fake_mac" if request.param == "mac" else "cpu_only")
    return {"mac": "mps has no float64", "cpu": "the model computes in float32"}[request.param]


def test_row8_float64_batches_are_cast_once_with_one_line_naming_the_key(device):
    from braeburn import Accelerator

    accelerator = Accelerator()
    data = TensorDataset(torch.rand(8, 3, dtype=torch.float64), torch.arange(8))
    dicts = [{"x": torch.rand(3, dtype=torch.float64), "labels": torch.tensor(1)} for _ in range(8)]
    loader, dict_loader = accelerator.prepare(DataLoader(data, batch_size=4), DataLoader(dicts, batch_size=4))
    with pytest.warns(UserWarning) as said:
        batches, dict_batches = list(loader), list(dict_loader)
    assert all(x.dtype == torch.float32 and y.dtype == torch.int64 for x, y in batches)
    assert all(b["x"].dtype == torch.float32 and b["labels"].dtype == torch.int64 for b in dict_batches)
    lines = [str(w.message) for w in said if "float64" in str(w.message)]
    assert len(lines) == 2  # one per loader, not one per batch
    assert f"batch[0] is float64; {device}" in lines[0] and "casting to float32" in lines[0]
    assert "batch['x'] is float64" in lines[1]
    accelerator.end_training()


def test_row8_a_float64_model_is_cast_once_and_its_optimizer_follows_where_the_device_has_no_float64(fake_mac,
                                                                                                       no_launcher_env):
    from braeburn import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match=r"the model's 0.weight, 0.bias, 1.weight and \d+ more are float64; mps has no "
                                         r"float64"):
        model, optimizer = accelerator.prepare(model, optimizer)
    assert all(t.dtype != torch.float64 for t in [*model.parameters(), *model.buffers()])
    assert optimizer.param_groups[0]["params"][0] is next(model.parameters())  # the optimizer still steps them
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.rand(4, 3, dtype=torch.float64)), batch_size=2))
    with pytest.warns(UserWarning, match=r"batch\[0\] is float64; mps has no float64"):
        assert all(x.dtype == torch.float32 for (x,) in loader)
    accelerator.end_training()


def test_row8_a_float64_model_trains_in_float64_as_given_where_the_device_has_float64(cpu_only, no_launcher_env):
    """model.double() with float64 tensors built by hand (not from a DataLoader) trains, as under Accelerate;
    a prepared loader's float64 batches stay float64 for it, in either order of prepare()."""
    from braeburn import Accelerator

    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.rand(8, 1, dtype=torch.float64)), batch_size=4))
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    with pytest.warns(UserWarning, match="the model is float64: it trains in float64 as given") as said:
        model, optimizer = accelerator.prepare(model, optimizer)
    assert len([w for w in said if "float64" in str(w.message)]) == 1
    assert model.weight.dtype == torch.float64
    x = torch.linspace(0, 1, 16, dtype=torch.float64).unsqueeze(1)
    for _ in range(3):
        loss = ((model(x) - 2 * x) ** 2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    assert loss.dtype == torch.float64
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cast, no line
        assert all(xb.dtype == torch.float64 and model(xb).dtype == torch.float64 for (xb,) in loader)
    accelerator.end_training()


def _numpy_like_data(labels_dtype: torch.dtype) -> TensorDataset:
    """float64 features, as numpy gives them; labels 0/1 as long, or as floats (as pandas often gives them)."""
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return TensorDataset(x, (x.sum(dim=1) > 0).to(labels_dtype))


def test_row8_the_trainer_trains_float64_inputs_and_explains_float_class_labels_in_one_line(device, tmp_path):
    """Inputs died in torch on the CPU and CUDA ("mat1 and mat2 must have the same dtype") and were cast on a Mac;
    float class labels died in the loss on every device ("expected target dtype to be Long or Byte")."""
    from braeburn import Trainer, TrainingConfig

    def train(labels_dtype: torch.dtype, folder: str) -> Trainer:
        config = TrainingConfig(output_dir=str(tmp_path / folder), max_steps=2, per_device_train_batch_size=8,
                                disable_tqdm=True)
        trainer = Trainer(torch.nn.Linear(4, 2), config, train_dataset=_numpy_like_data(labels_dtype),
                          loss_fn=torch.nn.functional.cross_entropy)
        trainer.train()
        return trainer

    with pytest.warns(UserWarning, match=rf"batch\[0\] is float64; {device}"):
        assert train(torch.long, "ints").state.global_step == 2
    with pytest.warns(UserWarning, match=r"batch\[0\], batch\[1\] are float64"), \
            pytest.raises(TypeError, match=r"labels are float32 of shape \[8\] holding whole numbers \(0 to 1\).*"
                                      r"(Long or Byte|scalar type Long).*dtype=torch.long") as refused:  # torch's words
        train(torch.float64, "floats")
    assert len(str(refused.value).splitlines()) == 1


@pytest.mark.parametrize("torch_said", ["expected target dtype to be Long or Byte, but got Float",  # torch 2.13+
                                       "expected scalar type Long but found Float"])  # torch 2.11 (and 2.6-2.12)
def test_row8_float_class_labels_are_explained_in_the_words_of_every_torch(torch_said, cpu_only, tmp_path):
    """The loss's refusal is recognised whichever torch words it: on torch 2.11 the float labels' error was torch's
    own (the check looked for "target", which 2.11's message lacks)."""
    from braeburn import Trainer, TrainingConfig

    def loss_of_this_torch(outputs, labels):
        if labels.is_floating_point():
            raise RuntimeError(torch_said)
        return torch.nn.functional.cross_entropy(outputs, labels)

    config = TrainingConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=8, disable_tqdm=True)
    trainer = Trainer(torch.nn.Linear(4, 2), config, train_dataset=_numpy_like_data(torch.float32),
                      loss_fn=loss_of_this_torch)
    with pytest.warns(UserWarning, match=r"batch\[0\] is float64"), \
            pytest.raises(TypeError, match=rf"holding whole numbers \(0 to 1\).*\(torch: {torch_said}\).*dtype=torch.long"):
        trainer.train()


# -- row 9: macOS and wheel facts -----------------------------------------------------------------

def test_row9_macos_versions_per_torch():
    assert min_macos_for((2, 5, 0)) == min_macos_for((2, 8, 0)) == (13, 0)
    assert min_macos_for((2, 9, 0)) == min_macos_for((2, 13, 0)) == (14, 0)
    mac12 = APPLE_M.replace(macos_version=(12, 7), torch_version=(2, 8, 0), torch_version_str="2.8.0",
                            mps_available=False)
    availability = MpsDevice().availability(mac12)
    assert "(13.0)" in availability.reason and "update macOS to 13.0" in availability.fix
    assert "torch<2.9" not in availability.fix  # torch 2.6-2.8 need macOS 13 too
    mac13 = APPLE_M.replace(macos_version=(13, 6), mps_available=False)
    assert "torch<2.9" in MpsDevice().availability(mac13).fix


def test_row9_rosetta_and_intel_name_the_last_x86_64_wheel():
    rosetta = APPLE_M.replace(machine="x86_64", rosetta=True, mps_available=False)
    reason = MpsDevice().availability(rosetta).reason
    assert "2.2.2" in reason and "Could not find a version that satisfies the requirement" in reason
    intel = APPLE_M.replace(machine="x86_64", apple_silicon=False, mps_available=False)
    assert "2.2.2" in MpsDevice().availability(intel).reason
    readme = (ROOT / "README.md").read_text()
    assert "Could not find a version that satisfies the requirement" in readme and "2.2.2" in readme


# -- row 10: memory figures -----------------------------------------------------------------------

def test_row10_memory_stats_give_the_real_limit(fake_mac, monkeypatch):
    stats = MpsDevice().memory_stats()
    assert stats["recommended_bytes"] == 24 * GiB and stats["limit_bytes"] == int(1.7 * 24 * GiB)
    assert "total_bytes" not in stats and "peak_bytes" not in stats
    monkeypatch.setenv(HIGH_WATERMARK_VAR, "1.0")
    assert MpsDevice().memory_stats()["limit_bytes"] == 24 * GiB
    monkeypatch.setenv(HIGH_WATERMARK_VAR, "0.0")
    assert "limit_bytes" not in MpsDevice().memory_stats()


def test_row10_the_summary_prints_no_empty_peak(fake_mac, tmp_path, capsys):
    from braeburn import Trainer, TrainingConfig

    fake_mac.held = 3 * GiB
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4,
                            save_strategy="no", mixed_precision="no")
    data = TensorDataset(torch.rand(8, 4), torch.rand(8, 1))
    Trainer(torch.nn.Linear(4, 1), config, train_dataset=data, loss_fn=torch.nn.functional.mse_loss).train()
    out = capsys.readouterr().out
    assert "peak mem" not in out
    assert ("memory     1.5 GiB in use at the end, 3.0 GiB held by the driver, out-of-memory limit 40.8 GiB (this "
            "device has no peak counter)") in out


def test_row10_memory_line_prints_a_peak_only_where_one_is_counted():
    from braeburn.trainer.progress import memory_line

    assert memory_line({"peak_bytes": 2 * GiB}) == "peak mem   2.0 GiB"
    assert memory_line({"allocated_bytes": GiB, "recommended_bytes": 8 * GiB}) == \
        "memory     1.0 GiB in use at the end, no limit (this device has no peak counter)"
    assert memory_line({}) == "memory     not measured on this device"
