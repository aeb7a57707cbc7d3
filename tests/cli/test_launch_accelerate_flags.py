"""`braeburn launch` takes `accelerate launch`'s --num_cpu_threads_per_process and --dynamo_backend with their
meaning there: OMP_NUM_THREADS in every process, and compiling (inductor) or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from braeburn.cli.main import main

RECORD = """
import json, os, sys
with open(sys.argv[1], "w") as out:
    json.dump({name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "BRAEBURN_COMPILE")}, out)
"""


def _launch(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    target = tmp_path / "record.py"
    target.write_text(RECORD)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "braeburn.cli.main", "launch", "--cpu", *flags, str(target),
                           str(tmp_path / "seen.json")], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # 11 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_accelerate_launch_threads_and_dynamo_flags_reach_the_script(tmp_path, clean_env):
    done = _launch(tmp_path, "--num_cpu_threads_per_process", "3", "--dynamo_backend", "inductor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "seen.json").read_text()) == {"OMP_NUM_THREADS": "3", "BRAEBURN_COMPILE": "true"}


@pytest.mark.parametrize("backend, compile_setting", [("no", "false"), ("INDUCTOR", "true")])
def test_dynamo_backend_is_the_compile_setting(tmp_path, clean_env, capsys, backend, compile_setting):
    target = tmp_path / "script.py"
    target.write_text("")
    assert main(["launch", "--cpu", "--dynamo-backend", backend, "--dry-run", str(target)]) == 0
    assert f"BRAEBURN_COMPILE={compile_setting}" in capsys.readouterr().out


def test_a_dynamo_backend_braeburn_lacks_is_one_error_with_the_fix(tmp_path, clean_env, capsys):
    target = tmp_path / "script.py"
    target.write_text("")
    assert main(["launch", "--cpu", "--dynamo_backend", "aot_eager", str(target)]) != 0
    err = capsys.readouterr().err
    assert "--dynamo_backend=aot_eager" in err and "Fix: --dynamo_backend inductor (or no)" in err


def test_dynamo_backend_and_compile_that_disagree_are_refused(tmp_path, clean_env, capsys):
    target = tmp_path / "script.py"
    target.write_text("")
    assert main(["launch", "--cpu", "--dynamo_backend", "no", "--compile", "true", str(target)]) != 0
    assert "--dynamo_backend=no and --compile=true disagree" in capsys.readouterr().err


@pytest.mark.parametrize("flags, compile_setting", [
    (("--dynamo_backend", "inductor", "--compile", "regional"), "regional"),  # regional compilation with inductor
    (("--dynamo_backend", "INDUCTOR", "--compile", "Regional"), "regional"),
    (("--dynamo_backend", "inductor", "--dynamo_use_regional_compilation"), "regional"),  # Accelerate's spelling
    (("--dynamo_use_regional_compilation",), "regional"),
    (("--dynamo_use_regional_compilation", "--compile", "regional"), "regional"),
    (("--dynamo_backend", "inductor", "--compile", "yes"), "true"),  # --compile's own spelling of true
    (("--dynamo_backend", "no", "--compile", "off"), "false"),
])
def test_regional_compilation_with_inductor_is_accepted(tmp_path, clean_env, capsys, flags, compile_setting):
    target = tmp_path / "script.py"
    target.write_text("")
    assert main(["launch", "--cpu", *flags, "--dry-run", str(target)]) == 0, capsys.readouterr().err
    assert f"BRAEBURN_COMPILE={compile_setting}\n" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (("--dynamo_backend", "no", "--compile", "regional"), "--dynamo_backend=no and --compile=regional disagree"),
    (("--dynamo_backend", "no", "--dynamo_use_regional_compilation"),
     "--dynamo_backend=no and --dynamo_use_regional_compilation disagree"),
    (("--dynamo_backend", "inductor", "--compile", "false"), "--dynamo_backend=inductor and --compile=false disagree"),
    (("--dynamo_backend", "inductor", "--compile", "auto"), "--dynamo_backend=inductor and --compile=auto disagree"),
    (("--dynamo_use_regional_compilation", "--compile", "true"),
     "--dynamo_use_regional_compilation and --compile=true disagree"),
    (("--dynamo_backend", "aot_eager", "--compile", "regional"), "Fix: --dynamo_backend inductor (or no)"),
])
def test_only_real_compile_conflicts_are_refused(tmp_path, clean_env, capsys, flags, message):
    target = tmp_path / "script.py"
    target.write_text("")
    assert main(["launch", "--cpu", *flags, "--dry-run", str(target)]) != 0
    assert message in capsys.readouterr().err


def test_dynamo_backend_inductor_keeps_a_config_files_regional_compilation(tmp_path, clean_env, capsys):
    """As Accelerate's launcher fills --dynamo_use_regional_compilation from its config file, --dynamo_backend
    inductor on the command line compiles by regions where the file asks for regional compilation."""
    target = tmp_path / "script.py"
    target.write_text("")
    path = tmp_path / "accelerate.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nuse_cpu: true\nnum_processes: 1\n"
                    "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_regional_compilation: true\n")
    assert main(["launch", "--config_file", str(path), "--dynamo_backend", "inductor", "--dry-run", str(target)]) == 0
    assert "BRAEBURN_COMPILE=regional\n" in capsys.readouterr().out
    assert main(["launch", "--config_file", str(path), "--dynamo_backend", "inductor", "--compile", "true",
                 "--dry-run", str(target)]) == 0  # the flag says whole: the flag wins over the file
    assert "BRAEBURN_COMPILE=true\n" in capsys.readouterr().out


def test_a_dynamo_problem_is_said_with_every_other_problem_of_the_settings(tmp_path, clean_env, capsys):
    """--dynamo_backend's refusal came alone, before the other flags were read: a user fixed one, ran again, and met
    the next."""
    target = tmp_path / "script.py"
    target.write_text("")
    assert main(["launch", "--cpu", "--dynamo_backend", "aot_eager", "--mixed_precision", "fp32", "--num_processes",
                 "0", "--dry-run", str(target)]) != 0
    err = capsys.readouterr().err
    assert "3 problems in the launch settings" in err
    for said in ("--dynamo_backend=aot_eager", "mixed_precision = 'fp32'", "num_processes = '0'"):
        assert said in err


@pytest.mark.parametrize("flags", [("--dynamo_backend", "inductor", "--compile", "maybe"),
                                   ("--dynamo_use_regional_compilation", "--compile", "maybe")])
def test_a_compile_value_that_is_no_setting_is_refused_as_such_beside_dynamo_flags(tmp_path, clean_env, capsys, flags):
    """`--dynamo_backend inductor --compile maybe` said the two "disagree"; the fault is --compile's value."""
    target = tmp_path / "script.py"
    target.write_text("")
    assert main(["launch", "--cpu", *flags, "--dry-run", str(target)]) != 0
    err = capsys.readouterr().err
    assert "compile = 'maybe': must be auto, true, false or regional" in err and "disagree" not in err


def test_accelerates_other_dynamo_flags_are_refused_with_the_fix_all_at_once(tmp_path, clean_env, capsys):
    """--dynamo_mode, --dynamo_use_fullgraph and --dynamo_use_dynamic, Accelerate's siblings of --dynamo_backend, were
    "unrecognized arguments" with no fix; --dynamo_mode default changes nothing and is taken."""
    target = tmp_path / "script.py"
    target.write_text("")
    assert main(["launch", "--cpu", "--dynamo_backend", "inductor", "--dynamo_mode", "max-autotune",
                 "--dynamo_use_fullgraph", "--dynamo_use_dynamic", "--mixed_precision", "fp32", "--dry-run",
                 str(target)]) != 0
    err = capsys.readouterr().err
    assert "4 problems in the launch settings" in err and "mixed_precision = 'fp32'" in err
    assert "--dynamo_mode=max-autotune: braeburn launch passes no torch.compile mode" in err
    assert "Accelerator(compile_mode='max-autotune')" in err and "--torch_compile_mode max-autotune" in err
    assert "--dynamo_use_fullgraph: " in err and "--dynamo_use_dynamic: " in err and err.count("Fix: leave it out") == 3
    assert main(["launch", "--cpu", "--dynamo_backend", "inductor", "--dynamo_mode", "default", "--dry-run",
                 str(target)]) == 0
    assert "BRAEBURN_COMPILE=true\n" in capsys.readouterr().out
