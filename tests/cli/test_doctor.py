"""`braeburn doctor`: text, JSON and exit codes, on real and faked hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from braeburn.cli.main import main
from tests.conftest import APPLE_M


def run_doctor(capsys, *args):
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def test_json_on_fake_apple_silicon(fake_host, capsys):
    fake_host("apple", env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"})
    code, out = run_doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["exit_code"] == 0
    assert report["selected"]["device"] == "mps" and report["selected"]["precision"] == "no"
    mps = next(d for d in report["devices"] if d["name"] == "mps")
    assert mps["usable"] and mps["process_group_backend"] is None and mps["float64"] is False
    fallback = next(v for v in report["environment"] if v["name"] == "PYTORCH_ENABLE_MPS_FALLBACK")
    assert fallback["set_before_torch_loaded"] is True


def test_rosetta_is_fixable_exit_3_with_fix_in_text(fake_host, capsys):
    fake_host("apple", machine="x86_64", rosetta=True, mps_available=False)
    code, out = run_doctor(capsys)
    assert code == 3
    assert "Rosetta" in out and "arm64 Python" in out and "Chosen device: cpu" in out


def test_refused_request_exits_1(fake_host, capsys):
    fake_host("linux_cpu")
    code, out = run_doctor(capsys, "--accelerator", "mps")
    assert code == 1
    assert "MPS is not available" in out and "--cpu" in out


def test_braeburn_device_env_is_honoured(fake_host, capsys, monkeypatch):
    fake_host("apple")
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    code, out = run_doctor(capsys, "--json")
    assert json.loads(out)["selected"]["device"] == "cpu"


def test_torch_loaded_first_makes_env_timing_unknown(fake_host, capsys):
    fake_host("apple", torch_loaded_before_braeburn=True)
    _, out = run_doctor(capsys, "--json")
    rows = json.loads(out)["environment"]
    assert all(r["set_before_torch_loaded"] is None for r in rows)


@pytest.mark.slow  # braeburn doctor as a subprocess (10 s on a loaded machine)
def test_real_command_on_this_machine():
    """The installed console script runs for real, in a fresh process."""
    result = subprocess.run([sys.executable, "-m", "braeburn.cli.main", "doctor", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode in (0, 3), result.stderr
    report = json.loads(result.stdout)
    assert report["selected"]["ok"] and any(d["usable"] for d in report["devices"])
    text = subprocess.run([sys.executable, "-m", "braeburn.cli.main", "doctor"], capture_output=True, text=True,
                          timeout=60)
    assert "Chosen device" in text.stdout and "exit status" in text.stdout


@pytest.mark.parametrize("argv", [["--version"], ["doctor", "--help"]])
def test_cli_surface(argv, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "braeburn" in out


def test_no_verb_prints_help(capsys):
    assert main([]) == 2
    assert "doctor" in capsys.readouterr().out
    _ = APPLE_M


@pytest.mark.slow  # braeburn doctor as a subprocess (10 s on a loaded machine)
def test_an_80_column_terminal_shows_every_variable_name_whole():
    """`doctor` in 80 columns cut the names a user copies into `export` (PYTORCH_MPS_HIGH_…)."""
    done = subprocess.run([sys.executable, "-m", "braeburn.cli.main", "doctor"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "80", "BRAEBURN_DEVICE": "cpu"})
    for name in ("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "PYTORCH_MPS_LOW_WATERMARK_RATIO", "PYTORCH_ENABLE_MPS_FALLBACK",
                 "BRAEBURN_MIXED_PRECISION", "CUDA_VISIBLE_DEVICES"):
        assert name in done.stdout, done.stdout
    assert "…" not in done.stdout
