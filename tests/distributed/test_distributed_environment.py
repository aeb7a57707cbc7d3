"""A bad distributed environment (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) is one clear error
naming every bad variable at once, before anything connects: no hang, no torch traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from braeburn.distributed import process_group as pg
from braeburn.distributed.process_group import DistributedEnvironmentError, WorldInfo, world_from_env
from braeburn.errors import exit_status, is_user_error

MEET = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("env, bad", [
    ({"WORLD_SIZE": "2", "RANK": "5", **MEET}, {"RANK": "from 0 to WORLD_SIZE-1 (1)"}),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "-1", **MEET}, {"LOCAL_RANK": "from 0 to WORLD_SIZE-1"}),
    ({"WORLD_SIZE": "2", "RANK": "0"}, {"MASTER_ADDR": "is not set", "MASTER_PORT": "is not set"}),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999"},
     {"MASTER_PORT": "from 1 to 65535"}),
    ({"WORLD_SIZE": "0"}, {"WORLD_SIZE": "from 1 to 1048576"}),
    ({"WORLD_SIZE": str(10**24), "RANK": "0", **MEET}, {"WORLD_SIZE": "from 1 to 1048576"}),  # (was a pybind TypeError)
    ({"WORLD_SIZE": "two", "RANK": "1"}, {"WORLD_SIZE": "not a whole number", "RANK": "from 0 to WORLD_SIZE-1 (0)"}),
    ({"WORLD_SIZE": "2", "RANK": "7", "LOCAL_RANK": "x"},
     {"RANK": "wait for it forever", "LOCAL_RANK": "not a whole number", "MASTER_ADDR": "braeburn launch",
      "MASTER_PORT": "braeburn launch"}),
])
def test_every_bad_variable_is_named_with_its_value_and_fix_at_once(env, bad):
    with pytest.raises(DistributedEnvironmentError) as caught:
        world_from_env(env)
    error = caught.value
    assert {e.option: e for e in error.errors}.keys() == bad.keys()
    for e in error.errors:
        assert bad[e.option] in e.message and ("braeburn launch" in e.message), e
    assert is_user_error(error) and exit_status(error) == 2  # one paragraph from run_main, exit status 2


def test_a_good_environment_is_read_as_it_is():
    assert world_from_env({}) == WorldInfo(1, 0, 0)
    assert world_from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", **MEET}) == WorldInfo(4, 3, 1)


def test_a_rendezvous_port_in_use_is_one_clear_error(monkeypatch):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))
        with pytest.raises(DistributedEnvironmentError) as caught:
            pg.init_process_group("gloo", WorldInfo(world_size=2, rank=0, local_rank=0))
    (error,) = caught.value.errors
    assert (error.option, error.value) == ("MASTER_PORT", str(port))
    assert "already in use" in error.message and "braeburn launch" in error.message
    assert not pg.is_initialized()


@pytest.mark.slow  # a script started as a subprocess (12 s on a loaded machine)
def test_a_script_with_a_rank_beyond_the_world_stops_at_once_with_one_message(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("from braeburn import Accelerator\nfrom braeburn.errors import run_main\n"
                      "run_main(lambda argv: Accelerator(cpu=True))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAEBURN_", "MASTER_", "TORCHELASTIC_"))}
    env.update(WORLD_SIZE="2", RANK="5")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "3 distributed environment variables cannot work" in done.stderr
    for name in ("RANK=5", "MASTER_ADDR=None", "MASTER_PORT=None"):
        assert name in done.stderr
    assert "Traceback" not in done.stderr
