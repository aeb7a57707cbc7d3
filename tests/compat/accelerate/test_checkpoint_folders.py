"""What braeburn.Accelerator leaves in an Accelerate user's checkpoints folder: with automatic naming only the newest
checkpoint's lock file is there while the run lives (its older checkpoints are never written again), and none after."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy
import pytest
import torch

from braeburn import Accelerator, ProjectConfiguration

from tests.compat.accelerate._peers import Counter


def test_automatic_naming_holds_only_the_newest_checkpoints_lock_and_leaves_none(tmp_path, no_launcher_env):
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(torch.nn.Linear(2, 2))
    for _ in range(4):
        accelerator.save_state()
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == [".checkpoint_3.braeburn.lock", "checkpoint_2", "checkpoint_3"]
    accelerator.end_training()
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint_2", "checkpoint_3"]


class _Scores:
    """A registered object whose state holds numpy values, as a metric tracker's often does."""

    def __init__(self):
        self.best = numpy.float64(0.5)

    def state_dict(self):
        return {"best": self.best, "history": numpy.arange(3)}

    def load_state_dict(self, state):
        self.best = state["best"]


def test_a_registered_state_load_state_could_not_read_back_is_refused_before_anything_is_written(
        tmp_path, no_launcher_env):
    """Accelerate saves and reloads it (weights_only=False); braeburn, which loads plain data only, used to save it
    and then refuse the resume ("a file written by save_state() never does"): now save_state() refuses it at once."""
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.register_for_checkpointing(_Scores())
    with pytest.raises(ValueError, match=r"registered object 0 \(_Scores\) holds objects pickled as numpy") as raised:
        accelerator.save_state(str(tmp_path / "ckpt"))
    assert "Nothing was written. Fix: return tensors, numbers" in str(raised.value)
    assert "torch.from_numpy(a) or a.tolist()" in str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_load_state_of_a_folder_accelerate_wrote_says_so_and_its_way_out_works(tmp_path, monkeypatch,
                                                                              no_launcher_env):
    accelerate = pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState, GradientState

    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    torch.manual_seed(0)
    theirs = accelerate.Accelerator()
    model, optimizer = theirs.prepare(torch.nn.Linear(2, 2), None)
    optimizer = theirs.prepare(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    theirs.save_state(str(tmp_path / "theirs"))
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()

    ours = Accelerator()
    net = torch.nn.Linear(2, 2)
    net, sgd = ours.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
    with pytest.raises(ValueError, match=r"this folder was written by Accelerate's save_state\(\)") as raised:
        ours.load_state(str(tmp_path / "theirs"))  # (was: "accelerator.pt is missing ... same prepared objects")
    message = str(raised.value)
    assert "Fix: resume it with Accelerate, or carry its weights over" in message
    from safetensors.torch import load_file  # the way out, as the message writes it

    ours.unwrap_model(net).load_state_dict(load_file(str(tmp_path / "theirs" / "model.safetensors")))
    sgd.load_state_dict(torch.load(str(tmp_path / "theirs" / "optimizer.bin"), weights_only=True))
    assert torch.equal(net.weight, model.weight)
    assert torch.equal(sgd.state_dict()["state"][0]["momentum_buffer"],
                       optimizer.state_dict()["state"][0]["momentum_buffer"])


@pytest.mark.slow  # 4 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_total_limit_never_removes_a_checkpoint_another_live_process_holds(tmp_path, no_launcher_env, capsys):
    """A second run in the same project_dir, started at another iteration as the refusal of a rerun advises: its
    rotation used to remove the first run's newest checkpoint while that run lived and held its lock."""
    checkpoints = tmp_path / "checkpoints"
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=1,
                                  iteration=5)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.save_state()  # checkpoint_5; the other run's checkpoint_1 is braeburn's too, and its lock is held
    shutil.copytree(checkpoints / "checkpoint_5", checkpoints / "checkpoint_1")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)"),
        str(checkpoints / ".checkpoint_1.braeburn.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        accelerator.save_state()
        accelerator.save_state()
        kept = sorted(p.name for p in checkpoints.iterdir() if not p.name.startswith("."))
        assert kept == ["checkpoint_1", "checkpoint_7"]
        said = [line for line in capsys.readouterr().out.splitlines() if "past total_limit" in line]
        assert len(said) == 1 and "checkpoint_1 past total_limit: another live process holds it" in said[0]
        accelerator.end_training()
    finally:
        holder.kill()
        holder.wait()


def test_total_limit_keeps_an_old_checkpoint_whose_lock_name_is_a_planted_link(tmp_path, no_launcher_env, capsys):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    config = ProjectConfiguration(project_dir=str(tmp_path / "project"), automatic_checkpoint_naming=True,
                                  total_limit=1)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.save_state()
    accelerator.save_state()  # checkpoint_0's lock released: a link is planted at its name
    checkpoints = tmp_path / "project" / "checkpoints"
    assert not (checkpoints / "checkpoint_0").exists()
    shutil.copytree(checkpoints / "checkpoint_1", checkpoints / "checkpoint_0")
    (checkpoints / ".checkpoint_0.braeburn.lock").symlink_to(outside)
    accelerator.save_state()  # saves; the old folder behind the link is kept, one line says why
    assert sorted(p.name for p in checkpoints.iterdir() if not p.name.startswith(".")) == ["checkpoint_0",
                                                                                       "checkpoint_2"]
    assert outside.read_text() == "keep"
    assert any("checkpoint_0 past total_limit" in line and "symbolic link" in line
               for line in capsys.readouterr().out.splitlines())
    accelerator.end_training()


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


@pytest.mark.parametrize("protocol", [2, 5])
def test_a_pickle_planted_as_a_registered_objects_state_is_refused_in_one_clean_line(tmp_path, no_launcher_env,
                                                                                     protocol):
    import pickle
    import warnings

    from braeburn.checkpoints.manifest import WHOLE, write_sizes
    from braeburn.errors import UnsafeFileError

    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.register_for_checkpointing(Counter())
    accelerator.save_state(tmp_path / "state")
    planted, marker = tmp_path / "state" / "custom_checkpoint_0.pkl", tmp_path / "pwned"
    planted.write_bytes(pickle.dumps({"count": _Payload(marker)}, protocol=protocol))
    write_sizes(tmp_path / "state", WHOLE)  # an attacker who rewrites the manifest too
    with warnings.catch_warnings(record=True) as caught, pytest.raises(UnsafeFileError) as error:
        warnings.simplefilter("always")
        accelerator.load_state(tmp_path / "state")
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{planted} ")  # the file first, on one line
    assert ("GLOBAL exec was not an allowed global" if protocol == 2 else "Unsupported operand 149: written by pickle") in message
    assert message.endswith("Delete this checkpoint, or resume from one you wrote yourself.")
    assert "Please file an issue" not in message and "WeightsUnpickler" not in message
    assert not [w for w in caught if "pickle protocol" in str(w.message)]
    assert not marker.exists()
