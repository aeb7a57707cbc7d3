"""Distributed training through the Trainer, as real jobs: `braeburn launch --num-processes 2` (gloo on
the CPU; NCCL with one GPU per process where two GPUs are visible) against one process with the same
global batch. Three launches serve every test (tests/distributed/distributed_job.py is the job):

1. one process: the reference run, checkpoints every 4 steps;
2. two processes under `--max-restarts 1`: DDP (rank 1 SIGKILLs itself at step 10, so the job restarts
   and resumes from checkpoint-8), then DDP resumed from the one-process checkpoint-4 (1 -> 2), then FSDP;
3. one process again: resumed from the DDP checkpoint-8 (2 -> 1) and from the FSDP checkpoint-12 (2 -> 1,
   through torch.distributed.checkpoint).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from braeburn.checkpoints.ownership import MARKER
from braeburn.trainer.checkpoint import CheckpointManager

pytestmark = pytest.mark.slow  # ~60 s on 2 CPU cores: two single-process runs and one 2-process job
JOB = Path(__file__).with_name("distributed_job.py")
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def _device_flags() -> list[str]:
    """Two accelerators when there are two (one per process, NCCL), else the CPU (gloo)."""
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return [] if accelerator is not None and torch.accelerator.device_count() >= 2 else ["--cpu"]


def _run(command: list[str], out: Path, log: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAEBURN_", "TORCHELASTIC_"))}
    env.update(OMP_NUM_THREADS="1", XDG_CONFIG_HOME=str(out))  # no user config file leaks in
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400)
    text = done.stdout + done.stderr
    (out / log).write_text(text)
    assert done.returncode == 0, text[-6000:]
    return text


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("distributed")
    single = [sys.executable, str(JOB), str(out)]
    launch = [sys.executable, "-m", "braeburn.cli.main", "launch", *_device_flags(), "--num-processes", "2",
              "--max-restarts", "1", str(JOB), str(out)]
    logs = {"one": _run(single + ["one:auto:4"], out, "one.log")}
    logs["two"] = _run(launch + ["ddp:ddp:2::10", "resumed12:ddp:2:one/checkpoint-4", "fsdp:fsdp:2"], out, "two.log")
    logs["back"] = _run(single + ["resumed21:auto:4:ddp/checkpoint-8", "fsdp21:auto:4:fsdp/checkpoint-12"], out,
                        "back.log")
    results = {p.stem: torch.load(p, weights_only=True) for p in out.glob("*.pt")}
    return out, results, logs


def _same_training(run: dict, reference: dict) -> None:
    assert [step for step, _ in run["losses"]] == list(range(1, 19))  # every step logged, the restarted ones once
    torch.testing.assert_close(torch.tensor([loss for _, loss in run["losses"]]),
                               torch.tensor([loss for _, loss in reference["losses"]]), **TOLERANCE)
    for mine, theirs in zip(run["params"], reference["params"], strict=True):
        torch.testing.assert_close(mine, theirs, **TOLERANCE)


def test_ddp_on_two_processes_matches_one_process_with_the_same_global_batch(runs):
    _, results, _ = runs
    ddp, one = results["ddp"], results["one"]
    assert (ddp["processes"], ddp["strategy"], one["processes"]) == (2, "ddp", 1)
    _same_training(ddp, one)
    assert one["losses"][-1][1] < one["losses"][0][1] * 0.6  # it learns: the comparison is not of noise


def test_a_killed_worker_restarts_the_job_from_the_latest_checkpoint_to_the_same_result(runs):
    _, results, logs = runs
    assert "exitcode: -9" in logs["two"]  # rank 1 was SIGKILLed...
    assert results["ddp"]["restarts"] == 1  # ...torchrun restarted the group...
    assert "resumed from " in logs["two"] and "ddp/checkpoint-8 at step 8" in logs["two"]  # ...from the latest
    _same_training(results["ddp"], results["one"])  # and the job ends where the uninterrupted one does


def test_fsdp_on_two_processes_matches_one_process_and_saves_shards(runs):
    out, results, _ = runs
    fsdp = results["fsdp"]
    assert (fsdp["processes"], fsdp["strategy"], fsdp["sharded"]) == (2, "fsdp", True)
    _same_training(fsdp, results["one"])
    shards = sorted(p.name for p in (out / "fsdp" / "checkpoint-12" / "sharded").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # one file per rank, written by each
    assert not (out / "fsdp" / "checkpoint-12" / "model_0.pt").exists()


@pytest.mark.parametrize("name, source", [("resumed12", "1 -> 2 processes (DDP)"),
                                          ("resumed21", "2 -> 1 processes (DDP)"),
                                          ("fsdp21", "2 -> 1 processes (FSDP, DCP resharding)")])
def test_a_checkpoint_resumes_in_another_world_size_to_the_same_result(runs, name, source):
    _, results, logs = runs
    run = results[name]
    assert run["processes"] == (2 if name == "resumed12" else 1), source
    _same_training(run, results["one"])


def test_gather_for_metrics_in_evaluation_drops_the_padded_duplicates(runs):
    _, results, _ = runs
    for name in ("ddp", "fsdp"):  # 11 eval samples over 2 processes: one padded duplicate
        evals, reference = results[name]["evals"], results["one"]["evals"]
        assert [e["eval_n"] for e in evals] == [11.0, 11.0]
        torch.testing.assert_close(torch.tensor([e["eval_mse"] for e in evals]),
                                   torch.tensor([e["eval_mse"] for e in reference]), **TOLERANCE)


def test_checkpoints_of_a_two_process_run_are_written_once_and_complete(runs):
    out, _, logs = runs
    manager = CheckpointManager(out / "ddp")
    assert [p.name for p in manager.checkpoints()] == ["checkpoint-4", "checkpoint-8", "checkpoint-12",
                                                       "checkpoint-16", "checkpoint-18"]
    for folder in manager.checkpoints():
        manager.verify(folder)  # every file the manifest lists, with its checksum
    files = sorted(p.name for p in (out / "ddp" / "checkpoint-8").iterdir())
    assert files.count("model.safetensors") == 1 and {"rng_state_0.pt", "rng_state_1.pt"} <= set(files)
    assert [p.name for p in (out / "ddp").iterdir() if p.name.startswith(".")] == [MARKER]  # no staging, no lock
    assert logs["two"].count("braeburn: training ended") == 3  # rank 0 only: ddp (after the restart), 1->2, fsdp
