"""The GPU lane: what only a real CUDA device can show. Every test here carries ``requires("cuda")``
and is skipped where no CUDA device is usable; the NCCL test needs two. Run the lane alone with
``python -m pytest -m requires`` or, with the whole suite and the results kept, ``bash benchmarks/gpu_lane.sh``.

Nothing here pins the CPU: the Accelerator and the Trainer choose the GPU as they do for a user.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from braeburn import Accelerator
from braeburn import Trainer, TrainingConfig  # what users run (the public, composed Trainer)
from tests.trainer.test_reliability_faults import checkpoint_steps, killed, load_weights, resumed_from, run_job
from tests.trainer.test_loop import bitwise_equal, resume_with_accumulation

pytestmark = [pytest.mark.requires("cuda"), pytest.mark.usefixtures("no_launcher_env")]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Without full_determinism a resumed CUDA run is not promised bitwise: its weights must differ from the
# uninterrupted run's by at most this share of how far training moved them (L2 over all parameters).
RESUME_TOLERANCE = 0.01


def _data(n: int = 64, features: int = 32, classes: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, features, generator=torch.Generator().manual_seed(0))
    return x, x[:, :classes].argmax(1)  # learnable: the largest of the first features


class Recording(nn.Sequential):
    """An MLP that notes, per call, the dtype it computed in and whether torch.compile was tracing it."""

    def __init__(self):
        torch.manual_seed(0)
        super().__init__(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        self.dtypes: list[torch.dtype] = []
        self.traced: list[bool] = []

    def forward(self, x):
        output = super().forward(x)
        self.dtypes.append(output.dtype)
        self.traced.append(torch.compiler.is_compiling())
        return output


def _train_steps(accelerator: Accelerator, model: nn.Module, steps: int = 20) -> list[float]:
    x, y = _data()
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    losses = []
    for _ in range(steps):
        with accelerator.autocast():
            loss = nn.functional.cross_entropy(model(x.to(accelerator.device)), y.to(accelerator.device))
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())  # sync: fine in a test
    return losses


def test_the_gpu_is_chosen_by_default():
    accelerator = Accelerator()
    assert accelerator.device.type == "cuda" and accelerator.plan.device.process_group_backend == "nccl"
    assert accelerator.precision == "bf16" or torch.cuda.get_device_capability() < (8, 0)


def test_compile_true_compiles_and_learns_like_eager():
    runs = {}
    for compile in (False, True):
        model = Recording()
        losses = _train_steps(Accelerator(compile=compile, mixed_precision="no", seed=0), model)
        assert any(model.traced) is compile  # traced by torch.compile only when asked
        runs[compile] = losses
    assert runs[True][-1] < runs[True][0]
    torch.testing.assert_close(runs[True], runs[False], rtol=1e-3, atol=1e-4)  # fp32: the same sums, reordered


def test_cuda_graphs_train_with_the_loss_kept_across_steps(tmp_path):
    """torch_compile_mode="reduce-overhead" (CUDA graphs): the losses kept for the log survive the next replay."""
    from tests.trainer.test_cuda_graph_losses import OwnLoss, own_loss_data

    config = TrainingConfig(output_dir=str(tmp_path), compile="true", torch_compile_mode="reduce-overhead",
                            max_steps=24, logging_steps=4, per_device_train_batch_size=8, save_strategy="no",
                            mixed_precision="no", learning_rate=1e-2)
    trainer = Trainer(OwnLoss(record=False), config, train_dataset=own_loss_data(64))
    result = trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6 and all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0]
    assert math.isfinite(result.training_loss)


def test_bf16_autocast_on_the_gpu_computes_in_bf16_and_returns_float32():
    accelerator = Accelerator(mixed_precision="bf16", compile=False)
    model = accelerator.prepare(Recording())
    output = model(torch.randn(2, 32, device=accelerator.device))
    assert model.dtypes == [torch.bfloat16] and output.dtype == torch.float32 and output.device.type == "cuda"
    losses = _train_steps(Accelerator(mixed_precision="bf16", compile=False, seed=0), Recording())
    assert math.isfinite(losses[-1]) and losses[-1] < losses[0]


def test_the_trainer_uses_fused_adamw_on_the_gpu(tmp_path):
    x, y = _data()
    model = Recording()
    config = TrainingConfig(output_dir=str(tmp_path), max_steps=4, logging_steps=2, save_strategy="no",
                            weight_decay=0.01)
    trainer = Trainer(model, config, train_dataset=TensorDataset(x, y), loss_fn=nn.functional.cross_entropy)
    trainer.train()
    optimizer = trainer.optimizer.optimizer  # inside the AcceleratedOptimizer
    assert isinstance(optimizer, torch.optim.AdamW) and all(group["fused"] for group in optimizer.param_groups)
    assert all(p.device.type == "cuda" for p in model.parameters())


def test_a_cnn_is_channels_last_on_the_gpu_and_trains():
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 32, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(32, 4))
    accelerator = Accelerator(mixed_precision="bf16", compile=False, seed=0)
    model, optimizer = accelerator.prepare(cnn, torch.optim.SGD(cnn.parameters(), lr=0.05))
    assert accelerator.unwrap_model(model)[0].weight.is_contiguous(memory_format=torch.channels_last)
    images, labels = torch.randn(16, 3, 16, 16, device=accelerator.device), torch.arange(16, device=accelerator.device) % 4
    losses = []
    for _ in range(10):
        with accelerator.autocast():
            loss = nn.functional.cross_entropy(model(images), labels)  # plain NCHW input
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert math.isfinite(losses[-1]) and losses[-1] < losses[0]


@pytest.mark.parametrize("precision", ["no", "bf16", "fp16"])
def test_save_and_load_state_round_trip_bitwise_on_the_gpu(tmp_path, precision):
    """Weights, AdamW state, grad scaler and the CUDA generator come back exactly (same process, eager)."""
    x, y = _data()

    def setup(seed):
        torch.manual_seed(seed)
        accelerator = Accelerator(mixed_precision=precision, compile=False, seed=seed)
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

    accelerator, model, optimizer = setup(0)
    steps(accelerator, model, optimizer, 3)
    accelerator.save_state(tmp_path / "state")
    generator = torch.cuda.get_rng_state()
    expected = steps(accelerator, model, optimizer, 3)
    again, model2, optimizer2 = setup(1)  # other weights and another seed until the state is loaded
    again.load_state(tmp_path / "state")
    assert torch.equal(torch.cuda.get_rng_state(), generator)
    assert all(torch.equal(a, b) for a, b in zip(expected, steps(again, model2, optimizer2, 3)))


def test_a_background_snapshot_on_the_gpu_is_a_pinned_copy_and_loads_as_the_foreground_save(tmp_path):
    """The training thread copies the state into pinned host memory (views kept); the files written from that copy
    load to the same tensors as a foreground save of the same moment."""
    from braeburn.checkpoints import state as state_io
    from braeburn.checkpoints.host_copy import host_copy
    from braeburn.trainer.background_save import Snapshot, _Replay

    weight = torch.randn(64, 64, device="cuda")
    copied, nbytes = host_copy({"w": weight, "row": weight[3], "step": torch.tensor(2.0, device="cuda")})
    assert all(t.device.type == "cpu" and t.is_pinned() for t in copied.values()) and nbytes == weight.nbytes + 4
    assert torch.equal(copied["w"], weight.cpu()) and torch.equal(copied["row"], weight[3].cpu())
    assert copied["row"].untyped_storage().data_ptr() == copied["w"].untyped_storage().data_ptr()
    import braeburn.checkpoints.host_copy as host_copy_module

    limit, host_copy_module.PINNED_LIMIT = host_copy_module.PINNED_LIMIT, weight.nbytes  # room for the first only
    try:
        beyond, _ = host_copy({"w": weight, "other": torch.randn(8, device="cuda")})
    finally:
        host_copy_module.PINNED_LIMIT = limit
    assert beyond["w"].is_pinned() and not beyond["other"].is_pinned() and beyond["other"].device.type == "cpu"

    x, y = _data()
    accelerator = Accelerator(compile=False, seed=0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    accelerator.backward(nn.functional.cross_entropy(model(x.to(accelerator.device)), y.to(accelerator.device)))
    optimizer.step()
    snapshot = Snapshot(accelerator)
    accelerator.save_state(tmp_path / "foreground")
    _Replay(snapshot).save_state(str(tmp_path / "background"))
    for name in ("model.safetensors", "optimizer_0.pt"):
        if name.endswith(".safetensors"):
            assert (tmp_path / "foreground" / name).read_bytes() == (tmp_path / "background" / name).read_bytes()
        else:
            a, b = (state_io.load_file(tmp_path / where, name) for where in ("foreground", "background"))
            assert all(torch.equal(a["state"][k][n], b["state"][k][n]) for k in a["state"] for n in a["state"][k])


def test_resume_with_accumulation_is_bitwise_on_the_gpu_with_full_determinism(tmp_path, restore_determinism):
    _, reference, resumed = resume_with_accumulation(tmp_path, full_determinism=True)
    assert bitwise_equal(reference, resumed)


def test_resume_with_accumulation_is_within_tolerance_on_the_gpu_without_it(tmp_path):
    initial, reference, resumed = resume_with_accumulation(tmp_path)
    moved = math.sqrt(sum(float((reference[k].float() - initial[k].float()).pow(2).sum()) for k in reference))
    off = math.sqrt(sum(float((resumed[k].float() - reference[k].float()).pow(2).sum()) for k in reference))
    assert moved > 0 and off <= RESUME_TOLERANCE * moved, f"resumed run is {off:.3g} away; training moved {moved:.3g}"


def test_killed_and_resumed_in_new_processes_bitwise_with_full_determinism(tmp_path):
    """The way a real resume happens: each stage a fresh process (new CUDA context, compile, cuBLAS)."""
    reference, out, result = tmp_path / "reference", tmp_path / "out", tmp_path / "weights.pt"
    done = run_job(reference / "out", reference / "weights.pt", "--full-determinism", device="cuda")
    assert done.returncode == 0, done.stderr[-3000:]
    stage = run_job(out, result, "--full-determinism", "--kill-at-step", "17", device="cuda")
    assert killed(stage) and checkpoint_steps(out) == [5, 10, 15], stage.stderr[-3000:]
    stage = run_job(out, result, "--full-determinism", "--resume", "--kill-mid-accumulation-after", "21", device="cuda")
    assert killed(stage) and resumed_from(stage, out, 15), stage.stderr[-3000:]
    stage = run_job(out, result, "--full-determinism", "--resume", device="cuda")
    assert stage.returncode == 0 and resumed_from(stage, out, 20), stage.stderr[-3000:]
    assert "device     cuda" in stage.stdout
    assert bitwise_equal(load_weights(reference / "weights.pt"), load_weights(result))


def test_image_example_trains_on_the_gpu_from_the_command_line(tmp_path):
    command = [sys.executable, str(EXAMPLES / "image_classification.py"), "--max_steps", "60",
               "--output_dir", str(tmp_path), "--learning_rate", "1e-3", "--per_device_train_batch_size", "32"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "device     cuda:0" in finished.stdout, finished.stdout[-3000:]
    assert (tmp_path / "eval_results.json").is_file() and (tmp_path / "confusion_matrix.png").is_file()


def test_text_example_trains_on_the_gpu(tmp_path, capsys):
    from tests.examples.test_examples import train_text_example_briefly

    metrics = train_text_example_briefly(tmp_path)
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0
    assert "device     cuda:0" in capsys.readouterr().out


NCCL_JOB = """
import torch, torch.distributed as dist
from braeburn import Accelerator
accelerator = Accelerator()
total = accelerator.reduce(torch.tensor([accelerator.process_index + 1.0], device=accelerator.device), "sum")
print(f"rank {accelerator.process_index} backend={dist.get_backend()} device={accelerator.device} "
      f"sum={total.item():.0f}", flush=True)
accelerator.end_training()
"""


@pytest.mark.requires("cuda", min_devices=2)
def test_two_gpus_reduce_through_nccl_under_braeburn_launch(tmp_path, clean_env):
    script = tmp_path / "nccl.py"
    script.write_text(textwrap.dedent(NCCL_JOB))
    done = subprocess.run([sys.executable, "-m", "braeburn.cli.main", "launch", "--num-processes", "2",
                           "--every-process-prints", str(script)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank} backend=nccl device=cuda:{rank} sum=3" in done.stdout, done.stdout[-3000:]
