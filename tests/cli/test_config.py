"""`braeburn config`: the questionnaire through real standard input, --default, and `config show`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from braeburn.cli.main import main
from braeburn.cli.launch_config import LaunchSettings, read_config_file


FAKE_HOST_CLI = Path(__file__).with_name("fake_host_cli.py")


def braeburn(*args: str, stdin: str = "", env: dict | None = None, host: str | None = None) -> subprocess.CompletedProcess:
    """The real command in a child process; on faked host facts (a HOSTS name) where the questions depend on them."""
    command = [str(FAKE_HOST_CLI), host] if host else ["-m", "braeburn.cli.main"]
    return subprocess.run([sys.executable, *command, *args], input=stdin, text=True,
                          capture_output=True, env={**os.environ, **(env or {})}, timeout=60)




def answer(monkeypatch, capsys, lines: list[str], *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in lines)))
    code = main(["config", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.slow  # the braeburn CLI as a subprocess (21 s on a loaded machine)
def test_piped_answers_write_the_xdg_file(clean_env):
    # A machine without an accelerator (faked, so a GPU here changes nothing): no device question;
    # precision, then compile.
    result = braeburn("config", stdin="bf16\nfalse\n", env={"XDG_CONFIG_HOME": str(clean_env.parents[1])},
                      host="linux_cpu")
    assert result.returncode == 0, result.stderr
    assert "Mixed precision [auto/no/fp16/bf16]" in result.stdout
    values, problems = read_config_file(clean_env)
    assert problems == [] and values["mixed_precision"] == "bf16" and values["compile"] is False


@pytest.mark.slow  # the braeburn CLI as a subprocess (18 s on a loaded machine)
def test_a_wrong_answer_is_asked_again_and_the_end_of_input_takes_the_defaults(clean_env):
    result = braeburn("config", stdin="fp8\nno\n", env={"XDG_CONFIG_HOME": str(clean_env.parents[1])},
                      host="linux_cpu")
    assert "Please select one of the available options" in result.stdout
    assert result.returncode == 0, result.stderr
    assert "end of input: the questions left take the defaults offered" in result.stdout
    assert "torch.compile: auto (default)" in result.stdout  # it used to stop with an error
    values, problems = read_config_file(clean_env)
    assert problems == [] and values["mixed_precision"] == "no" and values["compile"] == "auto"


@pytest.mark.slow  # the braeburn CLI as subprocesses (10-33 s)
def test_a_rerun_asks_before_replacing_the_file_and_keeps_it_by_default(clean_env):
    env = {"XDG_CONFIG_HOME": str(clean_env.parents[1])}
    assert braeburn("config", stdin="bf16\nfalse\n", env=env, host="linux_cpu").returncode == 0
    before = clean_env.read_bytes()
    kept = braeburn("config", stdin="", env=env, host="linux_cpu")  # it replaced the file silently
    assert kept.returncode == 0 and "exists. Replace it?" in kept.stdout and "nothing written" in kept.stdout
    assert clean_env.read_bytes() == before
    replaced = braeburn("config", stdin="y\nno\ntrue\n", env=env, host="linux_cpu")
    assert replaced.returncode == 0, replaced.stderr
    assert read_config_file(clean_env)[0]["mixed_precision"] == "no"


def test_on_a_mac_it_asks_the_fallback_and_a_memory_limit(clean_env, fake_host, monkeypatch, capsys):
    fake_host("apple")
    code, out = answer(monkeypatch, capsys, ["y", "fp16", "n", "abc", "1.0", "auto"])
    assert code == 0, out
    assert "Train on mps" in out and "lacks on the CPU" in out and "memory limit" in out
    assert "'abc' must be a number" in out  # re-asked with the reason
    assert "processes" not in out  # one device, no process-group backend: nothing to ask
    values, _ = read_config_file(clean_env)
    settings = LaunchSettings(**values)
    assert (settings.mixed_precision, settings.mps_fallback, settings.mps_high_watermark_ratio) == ("fp16", False, 1.0)
    assert 0 < settings.mps_low_watermark_ratio < 1.0  # moved with the high one, or torch refuses to start


def test_precision_choices_are_what_the_device_supports(clean_env, fake_host, monkeypatch, capsys):
    fake_host("cuda", cuda_capabilities=((7, 5), (7, 5)))  # Turing: no bf16
    code, out = answer(monkeypatch, capsys, ["y", "bf16", "fp16", "1", "2", "ddp", "auto"])
    assert code == 0, out
    assert "Mixed precision [auto/no/fp16]" in out and "Please select one of the available options" in out
    assert "How many machines" in out and "lacks on the CPU" not in out
    settings = LaunchSettings(**read_config_file(clean_env)[0])
    assert (settings.mixed_precision, settings.num_processes, settings.strategy) == ("fp16", 2, "ddp")


def test_choosing_the_cpu_offers_the_cpu_choices(clean_env, fake_host, monkeypatch, capsys):
    fake_host("apple")
    code, out = answer(monkeypatch, capsys, ["n", "bf16", "auto"])
    assert code == 0, out
    assert "lacks on the CPU" not in out  # the CPU reads nothing before torch loads
    assert LaunchSettings(**read_config_file(clean_env)[0]).cpu is True


def test_regional_is_offered_and_written_as_a_compile_choice(clean_env, fake_host, monkeypatch, capsys):
    """The launch settings take compile="regional"; the questionnaire offered auto/true/false only."""
    fake_host("apple")
    code, out = answer(monkeypatch, capsys, ["n", "bf16", "regional"])
    assert code == 0, out
    assert "torch.compile [auto/true/false/regional]" in out
    values, problems = read_config_file(clean_env)
    assert problems == [] and values["compile"] == "regional"


def test_default_writes_once_and_force_replaces(clean_env, capsys):
    assert main(["config", "--default"]) == 0
    assert read_config_file(clean_env) == ({name: getattr(LaunchSettings(), name) for name in
                                            read_config_file(clean_env)[0]}, [])
    assert main(["config", "--default"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["config", "--default", "--force"]) == 0


@pytest.mark.slow  # the braeburn CLI as subprocesses (19 s on a loaded machine)
def test_show_reports_values_and_sources(clean_env, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('mixed_precision = "fp16"\nstrategy = "ddp"\ncompile = false\n')
    result = braeburn("config", "show", "--json", "--config-file", str(config), "--num-processes", "2", "--cpu",
                      env={"BRAEBURN_MIXED_PRECISION": "bf16", "BRAEBURN_STRATEGY": "fsdp"})
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["settings"]["num_processes"] == 2 and shown["sources"]["num_processes"] == "flag (--num-processes)"
    assert shown["settings"]["mixed_precision"] == "bf16"
    assert shown["sources"]["mixed_precision"] == "environment (BRAEBURN_MIXED_PRECISION)"
    assert shown["settings"]["compile"] is False and shown["sources"]["compile"] == f"file ({config})"
    assert shown["sources"]["max_restarts"] == "default"
    assert shown["plan"]["device"] == "cpu" and shown["plan"]["strategy"] == "fsdp"
    table = braeburn("config", "show", "--config-file", str(config))
    assert table.returncode == 0 and "file (" in table.stdout and "default" in table.stdout


@pytest.mark.slow  # the braeburn CLI as a subprocess (11 s on a loaded machine)
def test_show_lists_every_problem_of_a_broken_file(clean_env, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('num_procs = 2\nmax_restarts = "x"\n')
    result = braeburn("config", "show", "--config-file", str(config))
    assert result.returncode == 1
    assert f"{config}: num_procs: unknown key (its value is not shown" in result.stdout
    assert "max_restarts (a string of 1 character, not shown): must be a whole number" in result.stdout
