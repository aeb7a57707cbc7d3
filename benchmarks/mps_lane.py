"""The MPS lane on a Mac: check every claim braeburn makes about Apple silicon, and write a report to paste.

    python benchmarks/mps_lane.py                     # report in outputs/mps-lane-report.md
    python benchmarks/mps_lane.py --out report.md

Runs tests/devices/test_mps_lane.py (each test carries requires("mps"); where MPS is not usable, every one is skipped
and the report says why) and writes: braeburn, Python, torch and macOS versions, the chip and its memory,
whether MPS is usable, each claim's outcome (with the first line of a failure), and the precision that
mixed_precision="auto" measured, and the facts braeburn read about the Mac next to what the system itself says
(sw_vers, sysctl, torch). Exit status: pytest's (0 when every claim that ran held), or NOTHING_TESTED (6) when no
claim could run at all (every test skipped: MPS not usable here), since such a lane proves nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Under the folder the command is run from, like the examples' outputs/ (from the repository root, .gitignore covers
# it): never an untracked file beside README.md.
DEFAULT_REPORT = Path("outputs") / "mps-lane-report.md"
sys.path.insert(0, str(ROOT / "src"))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))

import braeburn  # noqa: E402  (before torch: the MPS fallback default, as for a user's script)

try:
    import pytest  # noqa: E402
except ImportError:  # the README's first command installs the examples' extra, which has no pytest
    raise SystemExit('benchmarks/mps_lane.py runs braeburn\'s tests, which need pytest and the peers they compare '
                     'against: pip install -e ".[test]" (the README\'s test set-up), then run it again') from None
import torch  # noqa: E402


class Results:
    """A pytest plugin that keeps each test's outcome, the first line of a failure and its recorded properties."""

    def __init__(self):
        self.rows: list[tuple[str, str, str]] = []
        self.properties: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report) -> None:
        if report.when != "call" and report.outcome == "passed":
            return  # setup and teardown that passed say nothing
        name = report.nodeid.split("::", 1)[-1]
        detail = ""
        if report.skipped:
            detail = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            detail = (crash.message if crash is not None else str(report.longrepr)).splitlines()[0]
        self.rows.append((name, report.outcome, detail))
        self.properties += [(name, f"{key}: {value}") for key, value in report.user_properties]


def _sysctl(name: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_lines() -> list[str]:
    from braeburn.devices.host import current_host, version_text
    from braeburn.devices.registry import get_kind

    host = current_host()
    mps = get_kind("mps").availability(host)
    memory = _sysctl("hw.memsize")
    return [f"- braeburn {braeburn.__version__}, Python {platform.python_version()} ({platform.machine()}), "
            f"torch {torch.__version__}",
            f"- OS: {'macOS ' + version_text(host.macos_version) if host.system == 'Darwin' else host.system}; "
            f"chip: {_sysctl('machdep.cpu.brand_string') or platform.processor() or 'unknown'}"
            + (f", {int(memory) / 2**30:.0f} GiB" if memory.isdigit() else ""),
            f"- MPS: {'usable' if mps.usable else 'not usable'} ({mps.reason})"]


NOTHING_TESTED = 6  # beside pytest's own 0-5


def _system(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=5,
                              env={**os.environ, "SYSTEM_VERSION_COMPAT": "0"})  # the real version, never 10.16
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def fact_lines() -> list[str]:
    """Each fact braeburn read about this machine next to the system's own answer to the same question."""
    from braeburn.devices.host import current_host, version_text

    host = current_host()
    said = lambda text: text or "(no answer)"  # noqa: E731
    rows = [("macOS version", version_text(host.macos_version) if host.system == "Darwin" else f"not macOS ({host.system})",
             f"`sw_vers -productVersion`: {said(_system(['sw_vers', '-productVersion']))}"),
            ("Apple silicon", _yes(host.apple_silicon), f"`sysctl -n hw.optional.arm64`: {said(_sysctl('hw.optional.arm64'))}"),
            ("Rosetta (this Python translated)", _yes(host.rosetta),
             f"`sysctl -n sysctl.proc_translated`: {said(_sysctl('sysctl.proc_translated'))}"),
            ("MPS built / available", f"{_yes(host.mps_built)} / {_yes(host.mps_available)}",
             f"torch: {torch.backends.mps.is_built()} / {torch.backends.mps.is_available()}")]
    return ["", "| fact | braeburn read | the system says |", "|---|---|---|",
            *(f"| {name} | {ours} | {theirs} |" for name, ours, theirs in rows)]


def lane_exit(code: int, results: Results) -> int:
    """pytest's status, or NOTHING_TESTED where no claim ran: a lane that skipped everything proved nothing."""
    ran = any(outcome in ("passed", "failed") for _, outcome, _ in results.rows)
    return code if ran or code != 0 else NOTHING_TESTED


def report(results: Results, code: int) -> str:
    counts = {outcome: sum(1 for row in results.rows if row[1] == outcome)
              for outcome in ("passed", "failed", "skipped")}
    lines = ["## braeburn MPS lane", "", *machine_lines(),
             f"- result: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
             f"(pytest exit {code})"]
    if lane_exit(code, results) == NOTHING_TESTED:
        lines.append(f"- NOTHING WAS TESTED: every claim was skipped (the reasons are below); exit {NOTHING_TESTED}")
    lines += [*fact_lines(), "", "| claim (test) | outcome | detail |", "|---|---|---|"]
    lines += [f"| {name} | {outcome} | {detail.replace('|', '/')} |" for name, outcome, detail in results.rows]
    if results.properties:
        lines += ["", *(f"- {name}: {value}" for name, value in results.properties)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_REPORT),
                        help=f"where to write the report (Markdown; default {DEFAULT_REPORT}, from the current folder)")
    args = parser.parse_args(argv)
    args.out = Path(args.out).resolve()  # before the chdir below: a relative --out is relative to where it was run
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results = Results()
    os.chdir(ROOT)
    code = int(pytest.main(["tests/devices/test_mps_lane.py", "-q", "-rs", "-p", "no:cacheprovider"],
                           plugins=[results]))
    text = report(results, code)
    Path(args.out).write_text(text)
    print(f"\n{text}\nreport written to {Path(args.out).resolve()}")
    return lane_exit(code, results)


if __name__ == "__main__":
    sys.exit(main())
