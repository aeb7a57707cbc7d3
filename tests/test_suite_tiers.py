"""The suite's tiers (tests/tiers.py): the README's command runs the fast tier, `-m slow` the rest, a path all of it."""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    """A project laid out as this one (testpaths, the slow marker, tests/conftest.py taking the tiers' hooks) with
    one fast test, one slow test and one slow module."""
    root = tmp_path_factory.mktemp("suite")
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
                                         'markers = ["slow: the rest"]\naddopts = "-ra"\n')
    tests = root / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    shutil.copy(ROOT / "tests" / "tiers.py", tests / "tiers.py")
    (tests / "conftest.py").write_text("from tests.tiers import pytest_collection_modifyitems, "
                                       "pytest_terminal_summary  # noqa: F401\n")
    (tests / "test_mixed.py").write_text("import pytest\n\ndef test_fast():\n    pass\n\n"
                                         "@pytest.mark.slow\ndef test_slow_one():\n    pass\n")
    (tests / "test_slow_module.py").write_text("import pytest\n\npytestmark = pytest.mark.slow\n\n"
                                               "def test_in_a_slow_module():\n    pass\n")
    return root


def _run(root: Path, *args: str) -> tuple[set[str], str]:
    """The tests that passed, and the output."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", *args], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return set(re.findall(r"::(\w+) PASSED", done.stdout)), done.stdout


@pytest.mark.slow  # 4 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_no_path_runs_the_fast_tier_and_says_how_to_run_the_rest(suite):
    passed, out = _run(suite)
    assert passed == {"test_fast"} and "2 deselected" in out
    assert "the tests marked slow were left out; `python -m pytest -n 2 -m slow` runs them" in out


@pytest.mark.slow  # three pytest runs as subprocesses (11 s on a loaded machine)
def test_minus_m_slow_runs_the_rest_and_both_together_are_the_whole_suite(suite):
    rest, out = _run(suite, "-m", "slow")
    assert rest == {"test_slow_one", "test_in_a_slow_module"} and "were left out" not in out
    fast, _ = _run(suite)
    everything, _ = _run(suite, "-m", "slow or not slow")
    assert fast | rest == everything and not fast & rest


@pytest.mark.slow  # two pytest runs as subprocesses (7 s on a loaded machine)
def test_a_path_or_a_node_id_runs_its_slow_tests_too(suite):
    assert _run(suite, "tests")[0] == {"test_fast", "test_slow_one", "test_in_a_slow_module"}
    assert _run(suite, "tests/test_mixed.py::test_slow_one")[0] == {"test_slow_one"}


@pytest.mark.slow  # a pytest run with two xdist workers (13 s on a loaded machine)
def test_the_fast_tier_is_the_same_under_xdist(suite):
    _, out = _run(suite, "-n", "2")  # each worker collects and deselects on its own
    assert "1 passed" in out and "test_fast" in out and "were left out" in out
    assert "test_slow_one" not in out and "test_in_a_slow_module" not in out


def test_the_slow_marker_is_registered_with_what_it_means():
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    slow = next(marker for marker in markers if marker.startswith("slow:"))
    assert "python -m pytest -n 2" in slow and "-m slow" in slow and ".ci/run" in slow


def _ci(tmp_path: Path, fast: str, rest: str) -> subprocess.CompletedProcess:
    """.ci/run in a copy of the project whose README's two test commands are ``fast`` and ``rest``."""
    (tmp_path / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "README.md").write_text(f"<!-- test-command -->\n<!-- not run: runs the test suite -->\n```bash\n{fast}\n"
                                        f"```\n\n<!-- test-command: the rest -->\n```bash\n{rest}\n```\n")
    return subprocess.run(["bash", ".ci/run"], cwd=tmp_path, capture_output=True, text=True, timeout=60)


MAKE_VENV = "python3 -c \"import os; os.makedirs('.venv/bin'); open('.venv/bin/activate', 'w').close()\""


def test_ci_runs_the_readmes_fast_tier_then_the_rest_in_the_same_environment(tmp_path):
    done = _ci(tmp_path, f"{MAKE_VENV} && echo FAST-TIER-RAN", ". .venv/bin/activate && echo REST-RAN")
    assert done.returncode == 0, done.stderr
    assert done.stdout.index("FAST-TIER-RAN") < done.stdout.index("REST-RAN")
    assert "CI (fast tier): exit 0 after" in done.stdout and "CI (rest tier): exit 0 after" in done.stdout


def test_ci_fails_when_either_tier_fails_and_runs_both(tmp_path):
    done = _ci(tmp_path / "a", f"{MAKE_VENV} && exit 3", ". .venv/bin/activate && echo REST-RAN")
    assert done.returncode == 1 and "REST-RAN" in done.stdout and "CI: failed: fast" in done.stderr
    done = _ci(tmp_path / "b", MAKE_VENV, ". .venv/bin/activate && exit 4")
    assert done.returncode == 1 and "CI (rest tier): exit 4" in done.stdout and "CI: failed: rest" in done.stderr


def test_the_readme_gives_both_commands_and_the_rest_is_the_slow_tier():
    text = (ROOT / "README.md").read_text()
    fast = text.split("<!-- test-command -->", 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]
    rest = text.split("<!-- test-command: the rest -->", 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]
    assert fast.startswith("python3 -m venv .venv") and fast.endswith("&& python -m pytest -n 2")
    assert rest == f". .venv/bin/activate && {tiers.REST_COMMAND}"


# -- the README's counts and times of the tiers ----------------------------------------------------


def _readme_tiers_paragraph() -> str:
    text = (ROOT / "README.md").read_text()
    return " ".join(text[text.index("Run the tests:"):text.index("<!-- test-command -->")].split())


def _minutes(text: str) -> float:
    minutes, seconds = re.fullmatch(r"(\d+) min (\d+) s", text).groups()
    return int(minutes) * 60 + int(seconds)


def test_the_readmes_tier_time_is_a_recorded_measurement_whose_runs_all_passed():
    """The README gave 3 min 7 s with two burners from 10 runs that each failed 14 tests (torch 2.11, another
    machine's CPU), and an idle time recorded nowhere. Its figures now are those of the results file it cites: the
    runs, all passed, their median and range of wall time, the torch and the burners, the tests counted."""
    said = _readme_tiers_paragraph()
    (cited,) = re.findall(r"`(benchmarks/results/[^`]+\.tsv)`", said)
    lines = (ROOT / cited).read_text().splitlines()
    header = " ".join(line for line in lines if line.startswith("#"))
    rows = [line.split("\t") for line in lines[1:] if line and not line.startswith(("#", "run\t"))]
    seconds = sorted(float(row[3]) for row in rows)
    assert rows and all(row[4] == "passed" for row in rows), rows
    stated = re.search(r"(\d+) runs, all passed, a median of (\d+ min \d+ s) \((\d+ min \d+ s) to (\d+ min \d+ s);",
                       said)
    assert stated, said
    assert int(stated.group(1)) == len(rows)
    assert _minutes(stated.group(2)) == round(statistics.median(seconds))
    assert (_minutes(stated.group(3)), _minutes(stated.group(4))) == (round(seconds[0]), round(seconds[-1]))
    torch_version = re.search(r"torch (\S+),", header).group(1)
    assert f"(torch {torch_version})" in said and "2 cores offered" in header and "2 CPU burners" in header
    assert "with two CPU burners on the same 2 cores" in said
    passed, skipped = (int(n) for n in re.search(r"(\d+) passed, (\d+) skipped", rows[0][5]).groups())
    timed = re.search(r"\(([\d,]+) when timed below, (\d+) of which skip", said)
    assert (int(timed.group(1).replace(",", "")), int(timed.group(2))) == (passed + skipped, skipped)


def _collected(*args: str) -> int:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    return int(re.search(r"(\d+)(?:/\d+)? tests? collected", done.stdout).group(1))


@pytest.mark.slow  # two collections of the whole suite as subprocesses (20-30 s on 2 cores)
def test_the_readmes_test_counts_are_within_five_percent_of_the_suites():
    """The README said 1,405 fast tests when the tier had 1,402: its counts are "about" ones, kept within 5%."""
    said = _readme_tiers_paragraph()
    fast = int(re.search(r"the fast tier, about ([\d,]+) tests", said).group(1).replace(",", ""))
    slow = int(re.search(r"About ([\d,]+) more tests are marked `slow`", said).group(1).replace(",", ""))
    assert abs(_collected() - fast) <= 0.05 * fast
    assert abs(_collected("-m", "slow") - slow) <= 0.05 * slow
