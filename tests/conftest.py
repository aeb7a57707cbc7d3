"""Shared fixtures: fake host facts, and the requires() marker for real hardware."""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import tempfile
from pathlib import Path

import pytest

# One thread per test process, and for the processes the tests start. Two xdist workers on two cores, each with
# torch's default of a thread per core, oversubscribe the machine; OpenMP's spinning threads then make a busy
# machine up to 80 times slower (the digits example: 708 s against 8.9 s at load 11). A test's time must not
# depend on what else runs beside it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after OMP_NUM_THREADS: OpenMP reads it when torch loads)

torch.set_num_threads(1)

import braeburn  # noqa: E402
from braeburn.devices.host import HostFacts, current_host, use_host
from braeburn.devices.registry import get_kind
from tests.tiers import pytest_collection_modifyitems, pytest_terminal_summary  # noqa: F401  (the suite's tiers)

LINUX_CPU = HostFacts(system="Linux", machine="x86_64", python_version="3.11.7", torch_version=(2, 13, 0),
                      torch_version_str="2.13.0", cpu_count=8)
APPLE_M = HostFacts(system="Darwin", machine="arm64", macos_version=(15, 1), apple_silicon=True,
                    python_version="3.11.7", torch_version=(2, 13, 0), torch_version_str="2.13.0",
                    mps_built=True, mps_available=True, cpu_count=10)
CUDA_BOX = HostFacts(system="Linux", machine="x86_64", python_version="3.11.7", torch_version=(2, 13, 0),
                     torch_version_str="2.13.0+cu128", torch_cuda_version="12.8", nvidia_driver_present=True,
                     cuda_available=True, cuda_device_count=2, cuda_capabilities=((9, 0), (9, 0)),
                     cuda_names=("NVIDIA H200", "NVIDIA H200"), cpu_count=32)

HOSTS = {"linux_cpu": LINUX_CPU, "apple": APPLE_M, "cuda": CUDA_BOX}


@pytest.fixture
def fake_host():
    """Call with a base name ('linux_cpu', 'apple', 'cuda') and overrides; current_host() returns it."""
    stack = []

    def install(base: str = "linux_cpu", **overrides) -> HostFacts:
        facts = HOSTS[base].replace(**overrides)
        context = use_host(facts)
        context.__enter__()
        stack.append(context)
        return facts

    yield install
    for context in reversed(stack):
        context.__exit__(None, None, None)


LAUNCHER_VARS = ("BRAEBURN_DEVICE", "BRAEBURN_DEVICE_REASON", "BRAEBURN_MIXED_PRECISION", "BRAEBURN_STRATEGY",
                 "BRAEBURN_COMPILE", "WORLD_SIZE", "RANK", "LOCAL_RANK")


@pytest.fixture
def no_launcher_env(monkeypatch):
    """No variable that `braeburn launch` or torchrun sets: the code under test decides for itself."""
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def cpu_only(no_launcher_env, monkeypatch):
    """Pin the CPU (BRAEBURN_DEVICE=cpu, as `--cpu` does) for a test about the CPU, on any machine."""
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")


@pytest.fixture
def restore_determinism(monkeypatch):
    """For a test that turns full_determinism on: torch's switch, cuDNN's and the variables come back after."""
    from braeburn.checkpoints.state import INDUCTOR_DETERMINISTIC_VAR

    for name in ("CUBLAS_WORKSPACE_CONFIG", INDUCTOR_DETERMINISTIC_VAR):
        monkeypatch.delenv(name, raising=False)  # unset now; the previous value (or none) restored after
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1:]


@pytest.fixture
def one_thread():
    """One torch thread: tiny models run faster and steadier on a 2-core machine shared by two workers."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No braeburn or MPS variable, and a private XDG config folder; returns the config file's path."""
    for name in list(os.environ):
        if name.startswith(("BRAEBURN_", "PYTORCH_MPS", "PYTORCH_ENABLE_MPS")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "braeburn" / "config.toml"


# Where the braeburn under test was imported from: a checkout's src/ (PYTHONPATH) or an install.
BRAEBURN_ROOT = Path(braeburn.__file__).resolve().parents[1]


def _child_python_path() -> None:
    """Child processes (examples, `braeburn launch`, jobs) import the braeburn under test, not another copy.

    With braeburn importable only through PYTHONPATH (a relative one, even) a child started in another
    folder would not find it, and with an older copy installed it would find that one instead.
    """
    if str(BRAEBURN_ROOT) in site.getsitepackages() + [site.getusersitepackages()]:
        return  # an ordinary install: every child finds the same copy
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BRAEBURN_ROOT), *(p for p in parts if Path(p).resolve() != BRAEBURN_ROOT)])


def pytest_configure(config):
    config.addinivalue_line("markers", "requires(device, min_devices=1): needs real hardware")
    _child_python_path()
    # Every child process (torchrun workers, examples, jobs) prints the Python stack of each of its threads if it
    # dies of a signal (SIGABRT, SIGSEGV): a rare abort at exit then says where it happened.
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    # compile="auto" reads what earlier compiles measured on this machine: tests neither read the user's records
    # nor leave theirs behind (one file per test process, in its own temporary folder)
    config._braeburn_records = tempfile.mkdtemp(prefix="braeburn-records-")
    os.environ["BRAEBURN_COMPILE_RECORDS"] = os.path.join(config._braeburn_records, "records.json")


@pytest.fixture(autouse=True)
def own_compile_records(request, monkeypatch):
    """Each test its own compile records file (braeburn.plan.compile_gains): what one test's compiled run measured
    never changes another's compile="auto" decision."""
    name = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]
    monkeypatch.setenv("BRAEBURN_COMPILE_RECORDS", os.path.join(request.config._braeburn_records, f"{name}.json"))


def pytest_unconfigure(config):
    folder = getattr(config, "_braeburn_records", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_runtest_setup(item):
    marker = item.get_closest_marker("requires")
    if marker is None:
        return
    name = marker.kwargs.get("device", marker.args[0] if marker.args else "cpu")
    wanted = marker.kwargs.get("min_devices", 1)
    kind, host = get_kind(name), current_host()
    availability = kind.availability(host)
    if not availability.usable or kind.device_count(host) < wanted:
        why = "" if availability.usable else f" ({availability.reason})"  # a Mac in a VM, a Rosetta Python, ...
        pytest.skip(f"needs {wanted} usable {name} device(s); this machine has {kind.device_count(host)}{why}")
