"""Host facts: everything braeburn needs to know about this machine, in one place.

Every device decision reads a :class:`HostFacts`. Tests replace it with
:func:`use_host` (or the ``fake_host`` fixture) to run every branch on any machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .. import _early
from .versions import parse_version, version_text  # noqa: F401  (re-exported: host.version_text)


@dataclass(frozen=True)
class HostFacts:
    """What this machine, this Python and this torch can do. Pure data."""

    system: str = "Linux"  # platform.system(): Linux, Darwin, Windows
    machine: str = "x86_64"  # platform.machine() of this Python process
    macos_version: tuple[int, ...] = ()  # () when not macOS
    apple_silicon: bool = False  # the hardware is Apple silicon (even under Rosetta)
    rosetta: bool = False  # this process is an x86_64 binary translated by Rosetta
    python_version: str = ""
    torch_version: tuple[int, ...] = (2, 6, 0)
    torch_version_str: str = "2.6.0"
    torch_cuda_version: str | None = None  # torch.version.cuda; None for CPU-only builds
    nvidia_driver_present: bool = False  # an NVIDIA driver is loaded on this machine
    cuda_available: bool = False
    cuda_device_count: int = 0
    cuda_capabilities: tuple[tuple[int, int], ...] = ()
    cuda_names: tuple[str, ...] = ()
    mps_built: bool = False
    mps_available: bool = False
    mps_allocation_error: str | None = None  # why a one-element MPS allocation failed (VM Macs); None: it worked
    cpu_count: int = 1
    env: Mapping[str, str] = field(default_factory=dict)  # environment when braeburn loaded
    torch_loaded_before_braeburn: bool = False

    def replace(self, **changes) -> "HostFacts":
        return dataclasses.replace(self, **changes)

    @property
    def workers_start_by_spawn(self) -> bool:
        """DataLoader workers start by spawn here (macOS, Windows): each re-imports the script."""
        return self.system in ("Darwin", "Windows")


def _sysctl(name: str) -> str:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=2)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def _sw_vers() -> str:
    """``sw_vers -productVersion``: the version the system states. SYSTEM_VERSION_COMPAT=0 keeps the compatibility
    answer (10.16) away, should the user's environment ask for it."""
    try:
        out = subprocess.run(["sw_vers", "-productVersion"], capture_output=True, text=True, timeout=5,
                             env={**os.environ, "SYSTEM_VERSION_COMPAT": "0"})
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def _compatibility_answer(version: tuple[int, ...]) -> bool:
    """What macOS tells a program built against an older SDK instead of its version: "10.16" from macOS 11 on
    (SYSTEM_VERSION_COMPAT) and "16.0" on macOS 26 (no macOS 16 was released: 15 was followed by 26)."""
    return version[:2] == (10, 16) or version[:1] == (16,)


def macos_version() -> tuple[int, ...]:
    """This Mac's version as the system states it: ``platform.mac_ver()`` (SystemVersion.plist), or ``sw_vers``
    where that answer is empty or the compatibility one a Python built against an older SDK gets; () when neither
    says. torch's ``is_macos_or_newer`` is no source: it knows a few versions, warns on every other and answers
    False for it."""
    reported = parse_version(platform.mac_ver()[0])
    if reported and not _compatibility_answer(reported):
        return reported
    stated = parse_version(_sw_vers())
    return stated if stated and not _compatibility_answer(stated) else ()  # unknown: no rule reads a wrong one


def _mac_facts(machine: str) -> dict:
    translated = _sysctl("sysctl.proc_translated") == "1"
    arm_kernel = "ARM64" in platform.uname().version
    return {
        "macos_version": macos_version(),
        "rosetta": translated or (machine == "x86_64" and arm_kernel),
        "apple_silicon": arm_kernel or translated or machine == "arm64",
    }


def _cuda_facts(torch) -> dict:
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    caps = tuple(torch.cuda.get_device_capability(i) for i in range(count))
    names = tuple(torch.cuda.get_device_name(i) for i in range(count))
    return {
        "torch_cuda_version": torch.version.cuda,
        "cuda_available": available,
        "cuda_device_count": count,
        "cuda_capabilities": caps,
        "cuda_names": names,
        "nvidia_driver_present": os.path.exists("/proc/driver/nvidia/version"),
    }


def _mps_allocation_error(torch) -> str | None:
    from . import mps  # mps imports this module

    if not torch.backends.mps.is_available() or mps.watermark_env_problem(os.environ):
        return None  # nothing to probe, or a pair torch refuses, which the device's env_problems reports
    return mps.probe_allocation()


def gather_host_facts() -> HostFacts:
    """Read the real facts of this process. Imports torch (about a second)."""
    import torch

    system, machine = platform.system(), platform.machine()
    facts: dict = {"system": system, "machine": machine}
    if system == "Darwin":
        facts.update(_mac_facts(machine))
    facts.update(_cuda_facts(torch))
    facts.update(
        python_version=platform.python_version(),
        torch_version=parse_version(torch.__version__),
        torch_version_str=torch.__version__,
        mps_built=torch.backends.mps.is_built(),
        mps_available=torch.backends.mps.is_available(),
        mps_allocation_error=_mps_allocation_error(torch),
        cpu_count=os.cpu_count() or 1,
        env=dict(_early.ENV_AT_IMPORT),
        torch_loaded_before_braeburn=_early.TORCH_LOADED_FIRST,
    )
    return HostFacts(**facts)


_override: HostFacts | None = None
_cached: HostFacts | None = None


def current_host() -> HostFacts:
    """The facts every decision uses: the real ones, or those a test put in place."""
    global _cached
    if _override is not None:
        return _override
    if _cached is None:
        _cached = gather_host_facts()
    return _cached


@contextlib.contextmanager
def use_host(facts: HostFacts) -> Iterator[HostFacts]:
    """Make ``current_host()`` return ``facts`` inside the block (for tests)."""
    global _override
    previous, _override = _override, facts
    try:
        yield facts
    finally:
        _override = previous


def python_arch_note(host: HostFacts) -> str:
    if host.rosetta:
        return f"{host.machine} under Rosetta"
    return host.machine


__all__ = ["HostFacts", "current_host", "gather_host_facts", "use_host", "parse_version", "version_text"]
