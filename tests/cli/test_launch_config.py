"""LaunchSettings: precedence and sources, the TOML file, and every problem reported with where and the fix."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from braeburn.cli.launch_config import (SETTING_NAMES, ConfigError, LaunchSettings, add_settings_arguments,
                                    default_config_path, flag_values, read_config_file, resolve_settings,
                                    settings_to_toml, write_config_file)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_nothing_set_gives_defaults_from_default(tmp_path):
    resolved = resolve_settings({}, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert resolved.settings == LaunchSettings()
    assert {str(s) for s in resolved.sources.values()} == {"default"}
    assert resolved.config_file is None and resolved.problems == []


def test_flag_beats_environment_beats_file_beats_default(tmp_path):
    path = write(tmp_path, 'mixed_precision = "fp16"\nnum_processes = 4\nstrategy = "fsdp"\nmax_restarts = 2\n')
    env = {"BRAEBURN_MIXED_PRECISION": "bf16", "BRAEBURN_NUM_PROCESSES": "3"}
    resolved = resolve_settings({"num_processes": "2"}, env, path)
    s, src = resolved.settings, resolved.sources
    assert (s.num_processes, src["num_processes"].kind, src["num_processes"].detail) == (2, "flag", "--num-processes")
    assert (s.mixed_precision, str(src["mixed_precision"])) == ("bf16", "environment (BRAEBURN_MIXED_PRECISION)")
    assert (s.strategy, str(src["strategy"])) == ("fsdp", f"file ({path})")
    assert (s.max_restarts, src["max_restarts"].kind) == (2, "file")
    assert (s.num_machines, src["num_machines"].kind) == (1, "default")
    assert resolved.problems == []


def test_the_default_file_is_read_from_xdg_config_home(tmp_path):
    (tmp_path / "braeburn").mkdir()
    (tmp_path / "braeburn" / "config.toml").write_text("compile = false\n")
    resolved = resolve_settings({}, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert resolved.settings.compile is False and resolved.sources["compile"].kind == "file"
    assert default_config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "braeburn" / "config.toml"
    assert default_config_path({"HOME": "/home/ann"}) == Path("/home/ann/.config/braeburn/config.toml")
    assert default_config_path({"HOME": "/home/ann", "XDG_CONFIG_HOME": "relative"}).parts[:3] == ("/", "home", "ann")


def test_braeburn_device_cpu_is_the_cpu_switch_and_a_flag_still_wins(tmp_path):
    env = {"BRAEBURN_DEVICE": "cpu", "XDG_CONFIG_HOME": str(tmp_path)}
    assert resolve_settings({}, env).settings.cpu is True
    overridden = resolve_settings({"cpu": False}, env)
    assert overridden.settings.cpu is False and overridden.sources["cpu"].kind == "flag"


def test_broken_toml_names_file_line_column_and_fix_never_the_lines_text(tmp_path):
    """The offending line was printed, and a token on it with it."""
    path = write(tmp_path, 'num_processes = 2\nmixed_precision = bf16 # hf_SECRETtoml123\n')
    with pytest.raises(ConfigError) as caught:
        resolve_settings({}, {}, path).raise_for_problems()
    message = str(caught.value)
    assert f"{path}, line 2, column 19: (syntax): not valid TOML (Invalid value)" in message
    assert "bf16 #" not in message and "SECRET" not in message
    assert "strings need quotes" in message and "braeburn config --default --force" in message


def test_every_bad_key_and_value_is_reported_at_once(tmp_path):
    path = write(tmp_path, 'num_proceses = 2\nmax_restarts = "3"\ncpu = "yes"\nstrategy = "zero3"\n'
                           'gpu_ids = [0, 0]\nmps_high_watermark_ratio = -1\n')
    resolved = resolve_settings({}, {}, path)
    by_key = {p.key: p for p in resolved.problems}
    assert set(by_key) == {"num_proceses", "max_restarts", "cpu", "strategy", "gpu_ids", "mps_high_watermark_ratio"}
    assert all(p.where == str(path) for p in resolved.problems)
    assert "did you mean 'num_processes'" in by_key["num_proceses"].fix
    assert "whole number" in by_key["max_restarts"].why and "no quotes" in by_key["max_restarts"].fix
    assert "true or false" in by_key["cpu"].why
    assert "'ddp'" in by_key["strategy"].fix
    assert "distinct" in by_key["gpu_ids"].why
    assert ">= 0" in by_key["mps_high_watermark_ratio"].why
    # bad values fall back to the lower layers, so a plan can still list its own problems beside these
    assert resolved.settings.max_restarts == 0 and resolved.settings.strategy == "auto"
    with pytest.raises(ConfigError, match="6 problems"):
        resolved.raise_for_problems()


def test_bad_environment_and_flag_values_name_their_place(tmp_path):
    resolved = resolve_settings({"main_process_port": "99999"}, {"BRAEBURN_NUM_MACHINES": "two",
                                                                  "XDG_CONFIG_HOME": str(tmp_path)})
    text = [str(p) for p in resolved.problems]
    assert any(t.startswith("environment variable BRAEBURN_NUM_MACHINES: num_machines = 'two'") and "unset" in t
               for t in text)
    assert any(t.startswith("flag --main-process-port: main_process_port = '99999'") and "65535" in t for t in text)


def test_a_missing_explicit_config_file_is_an_error(tmp_path):
    problems = resolve_settings({}, {}, tmp_path / "nope.toml").problems
    assert len(problems) == 1 and "does not exist" in problems[0].why and "braeburn config" in problems[0].fix


@pytest.mark.parametrize("flags, key, words", [
    ({"num_machines": "2", "machine_rank": "2", "main_process_ip": "10.0.0.1", "num_processes": "2"},
     "machine_rank", "below num_machines"),
    ({"num_machines": "2", "num_processes": "2"}, "num_machines", "--main-process-ip"),
    ({"num_machines": "2", "num_processes": "3", "main_process_ip": "10.0.0.1"}, "num_processes", "multiple of 2"),
])
def test_rules_between_settings(tmp_path, flags, key, words):
    problems = resolve_settings(flags, {"XDG_CONFIG_HOME": str(tmp_path)}).problems
    assert [p.key for p in problems] == [key]
    assert words in str(problems[0]) and problems[0].where.startswith("flag --")


def test_written_file_reads_back_the_same_and_keeps_comments(tmp_path):
    settings = LaunchSettings(cpu=True, mixed_precision="bf16", num_processes=4, num_machines=2,
                              main_process_ip="10.0.0.1", main_process_port=29400, gpu_ids="0,1", compile=False,
                              mps_high_watermark_ratio=1.0, mps_low_watermark_ratio=0.8)
    path = tmp_path / "deep" / "er" / "config.toml"
    write_config_file(settings, path)
    values, problems = read_config_file(path)
    assert problems == [] and LaunchSettings(**values) == settings
    assert "# which devices to use" in path.read_text()
    assert read_config_file(write(tmp_path, "gpu_ids = [2, 0]\n"))[0] == {"gpu_ids": "2,0"}


def test_writing_refuses_settings_a_reader_would_refuse(tmp_path):
    with pytest.raises(ConfigError, match="machine_rank"):
        write_config_file(LaunchSettings(machine_rank=3), tmp_path / "c.toml")
    assert not (tmp_path / "c.toml").exists()


def test_every_setting_has_a_flag_and_a_commented_line():
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser)
    flags = {option for action in parser._actions for option in action.option_strings}
    assert {"--config-file", "--cpu", "--no-cpu", "--mixed-precision", "--num-processes", "--num-machines",
            "--machine-rank", "--main-process-ip", "--main-process-port", "--max-restarts", "--devices",
            "--gpu-ids", "--strategy", "--compile", "--mps-fallback", "--no-mps-fallback",
            "--mps-high-watermark-ratio", "--mps-low-watermark-ratio"} <= flags
    args = parser.parse_args(["--num_processes", "2", "--no-mps-fallback", "--devices", "0,1"])
    assert flag_values(args) == {"num_processes": "2", "mps_fallback": False, "gpu_ids": "0,1"}
    text = settings_to_toml(LaunchSettings())
    assert all(name in text for name in SETTING_NAMES)


@pytest.mark.parametrize("text, words", [
    ("num_processes = " + "[" * 5000 + "]" * 5000 + "\n", "more than 32 levels deep"),
    ("[" + ".".join(["a"] * 40) + "]\nx = 1\n", "more than 32 levels deep"),
    ("# padding\n" * 100_001 + "num_processes = 2\n", "more than the 1,000,000"),
])
def test_a_config_file_too_deep_or_too_large_is_refused_in_one_line(tmp_path, text, words):
    problems = resolve_settings({}, {}, write(tmp_path, text)).problems
    assert len(problems) == 1 and words in str(problems[0]) and len(str(problems[0])) < 600


def test_infinite_and_huge_numbers_are_refused_all_at_once(tmp_path):
    path = write(tmp_path, "mps_low_watermark_ratio = inf\nmax_restarts = 100000000000000000000\n")
    flags = {"num_processes": "100000", "cpu": "true", "mps_high_watermark_ratio": "nan", "num_machines": "10000000"}
    problems = resolve_settings(flags, {}, path).problems
    by_key = {p.key: str(p) for p in problems}
    assert set(by_key) == {"mps_low_watermark_ratio", "max_restarts", "mps_high_watermark_ratio", "num_machines",
                           "num_processes"}  # all at once
    assert "finite" in by_key["mps_low_watermark_ratio"] and "finite" in by_key["mps_high_watermark_ratio"]
    assert "from 0 to 10000" in by_key["max_restarts"] and "from 1 to 65536" in by_key["num_machines"]
    assert "100,000 processes on each machine" in by_key["num_processes"]
    assert not resolve_settings({"num_processes": "64", "cpu": "true"}, {"XDG_CONFIG_HOME": str(tmp_path)}).problems


# -- Accelerate's config files: unreadable files, secrets, YAML's booleans ---------------------------------

@pytest.mark.parametrize("name, data", [
    ("deep.json", "[" * 100_000 + "]" * 100_000),  # a bare "maximum recursion depth" RecursionError
    ("nested.json", '{"a": ' * 40 + "1" + "}" * 40),  # within json's limit, beyond braeburn's
    ("binary.json", b"\x00\xff\xfe\x00garbage"),
    ("binary.yaml", b"\x00\x01\x02\x03"),
    ("list.yaml", "- distributed_type\n- NO\n"),
    ("huge_number.json", '{"num_processes": ' + "9" * 5000 + "}"),
])
def test_a_deep_or_garbled_accelerate_file_is_one_error_naming_the_file(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    problems = resolve_settings({}, {}, path).problems
    assert len(problems) == 1, problems
    text = str(problems[0])
    assert text.startswith(f"{path}: (file): cannot be read as Accelerate's config file (") and len(text) < 600
    assert "recursion" not in text


def test_an_unknown_key_or_a_refused_table_is_named_without_its_value(tmp_path, capsys):
    """A token in a config file ended up in the log: unknown keys were echoed with their values."""
    from braeburn.cli.main import main

    secret = "hf_aVerySecretToken123"
    accelerate = tmp_path / "accelerate.yaml"
    accelerate.write_text(f"distributed_type: 'NO'\nhf_token: {secret}\ntpu_env: ['HF_TOKEN={secret}']\n"
                          f"deepspeed_config:\n  token: {secret}\n")
    own = tmp_path / "own.toml"
    own.write_text(f'wandb_api_key = "{secret}"\nnum_proceses = 2\n')
    by_key = {p.key: str(p) for p in resolve_settings({}, {}, accelerate).problems}
    assert set(by_key) == {"hf_token", "tpu_env", "deepspeed_config"}
    assert by_key["hf_token"].startswith(f"{accelerate}: hf_token: is not a key of Accelerate 1.15's config file "
                                         "(its value is not shown)")
    assert by_key["tpu_env"] == (f"{accelerate}: tpu_env: braeburn does not run on TPUs. Fix: remove tpu_env, or "
                                 "write tpu_env: [].")
    by_key = {p.key: str(p) for p in resolve_settings({}, {}, own).problems}
    assert by_key["wandb_api_key"].startswith(f"{own}: wandb_api_key: unknown key (its value is not shown")
    assert "did you mean 'num_processes'" in by_key["num_proceses"]
    target = tmp_path / "t.py"
    target.write_text("")
    for config in (accelerate, own):
        assert main(["launch", "--config-file", str(config), "--dry-run", str(target)]) == 1
        said = capsys.readouterr()
        assert "hf_token" in said.err + said.out or "wandb_api_key" in said.err + said.out
        assert secret not in said.err + said.out


SECRET = "hf_SECRETvalue123"

# (file, its text with {s} for the secret, what the message says instead of the value)
SECRET_UNDER_A_KNOWN_KEY = [
    ("dynamo.yaml", "distributed_type: MULTI_CPU\nuse_cpu: true\nnum_processes: 2\ndynamo_config:\n"
     "  dynamo_backend: INDUCTOR\n  hub_token: {s}\n", "dynamo_config (a mapping of 2 entries, not shown): "),
    ("list.yaml", "distributed_type: [{s}, {s}]\n", "distributed_type (a list of 2 items, not shown): "),
    ("string.yaml", "distributed_type: {s}\n", "distributed_type (a string of 17 characters, not shown): is not "
     "one of Accelerate's distributed types"),
    ("rdzv.yaml", "rdzv_backend: {{token: {s}}}\n", "rdzv_backend (a mapping of 1 entry, not shown): "),
    ("address.yaml", "main_process_ip: {{user: admin, password: {s}}}\n",
     "main_process_ip (a mapping of 2 entries, not shown): must be a host name"),
    ("precision.yaml", "mixed_precision: {{token: {s}}}\n", "mixed_precision (a mapping of 1 entry, not shown): "),
    ("compute.yaml", "compute_environment: {s}\n", "compute_environment (a string of 17 characters, not shown): "),
    ("alias.yaml", "x-secrets: &s {{hf_token: {s}}}\ndynamo_config:\n  <<: *s\n  dynamo_backend: NO\n",
     "dynamo_config (a mapping of 2 entries, not shown): "),
    ("own.toml", 'mixed_precision = "{s}"\nmain_process_ip = "{s} x"\nstrategy = ["{s}"]\n',
     "strategy (a list of 1 item, not shown): "),
    ("syntax.toml", 'num_processes = 2\nhf_token = "{s}\n',
     ", line 2, column 30: (syntax): not valid TOML (Illegal character '\\n')"),
    ("syntax.yaml", 'compute_environment: LOCAL_MACHINE\nhf_token: "{s}\n', ", line 3, column 1: (syntax): not valid "
     "YAML"),
    ("pure_python_syntax.yaml", 'compute_environment: LOCAL_MACHINE\nhf_token: "{s}\n', ", line 3, column 1: "
     "(syntax): not valid YAML (while scanning a quoted scalar; found unexpected end of stream)"),
    ("syntax.json", '{{"hf_token": "{s}" "x": 1}}', ", line 1, column 34: (syntax): not valid JSON (Expecting ',' "
     "delimiter)"),
]


@pytest.mark.parametrize("name, text, instead", SECRET_UNDER_A_KNOWN_KEY,
                         ids=[case[0] for case in SECRET_UNDER_A_KNOWN_KEY])
def test_a_value_that_is_no_legal_choice_is_never_shown_only_its_shape(tmp_path, capsys, monkeypatch, name, text,
                                                                       instead):
    """Tokens under known keys were printed: a table under dynamo_config, a list as distributed_type, a table as
    rdzv_backend or main_process_ip, mixed_precision lower-cased, a TOML syntax error's line."""
    import yaml

    from braeburn.cli.main import main

    if name.startswith("pure_python"):  # PyYAML without libyaml quotes the offending line in its errors
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    path = tmp_path / name
    path.write_text(text.format(s=SECRET))
    target = tmp_path / "t.py"
    target.write_text("")
    assert main(["launch", "--config-file", str(path), "--dry-run", str(target)]) == 1
    said = capsys.readouterr()
    assert SECRET.lower() not in (said.out + said.err).lower()
    assert str(path) + ("" if instead.startswith(",") else ": ") + instead in said.err


def test_a_legal_choice_braeburn_cannot_honour_is_still_shown(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("distributed_type: DEEPSPEED\nrdzv_backend: c10d\ncompute_environment: AMAZON_SAGEMAKER\n"
                    "mixed_precision: fp8\nnum_processes: 0\n")
    text = "\n".join(str(p) for p in resolve_settings({}, {}, path).problems)
    for shown in ("distributed_type = 'DEEPSPEED': braeburn cannot run DEEPSPEED", "rdzv_backend = 'c10d'",
                  "compute_environment = 'AMAZON_SAGEMAKER'", "mixed_precision = 'fp8'", "num_processes = 0"):
        assert shown in text


def test_accelerates_distributed_types_are_braeburns(tmp_path):
    from braeburn import DistributedType
    from braeburn.compat.accelerate.config_file import ACCELERATE_DISTRIBUTED_TYPES

    assert ACCELERATE_DISTRIBUTED_TYPES == tuple(kind.value for kind in DistributedType)


@pytest.mark.parametrize("text", ["distributed_type: NO\n", "distributed_type: no\n", "distributed_type: Off\n",
                                  "distributed_type: null\n"])
def test_an_unquoted_no_is_one_process_as_accelerate_reads_it(tmp_path, text):
    """YAML 1.1 reads an unquoted NO as false: "braeburn cannot run False"."""
    path = tmp_path / "accelerate.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\n" + text + "mixed_precision: NO\ndynamo_backend: NO\n"
                    "use_cpu: true\nnum_processes: 1\n")
    resolved = resolve_settings({}, {}, path)
    assert resolved.problems == []
    s = resolved.settings
    assert (s.num_processes, s.cpu, s.multi_gpu, s.strategy, s.mixed_precision, s.compile) == \
        (1, True, False, "auto", "no", False)


def test_an_unquoted_yes_as_distributed_type_says_what_yaml_did(tmp_path):
    path = tmp_path / "accelerate.yaml"
    path.write_text("distributed_type: yes\n")
    [problem] = resolve_settings({}, {}, path).problems
    assert "distributed_type = True: YAML reads an unquoted yes, on or true as true" in str(problem)
    assert "in quotes" in problem.fix


def test_compile_regional_is_a_launch_setting_from_a_flag_a_file_and_accelerates_regional_compilation(tmp_path):
    """compile="regional" is the Trainer's fourth choice: the launch settings refused it ("must be auto, true or
    false"), from --compile, a braeburn file and Accelerate's dynamo_use_regional_compilation alike."""
    assert resolve_settings({"compile": "Regional"}, {}).settings.compile == "regional"
    assert resolve_settings({}, {}, write(tmp_path, 'compile = "regional"\n')).settings.compile == "regional"
    path = tmp_path / "accelerate.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nuse_cpu: true\nnum_processes: 1\n"
                    "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_regional_compilation: true\n")
    resolved = resolve_settings({}, {}, path)
    assert resolved.problems == [] and resolved.settings.compile == "regional"
    problems = resolve_settings({"compile": "maybe"}, {}).problems
    assert "must be auto, true, false or regional" in str(problems[0])


DYNAMO_FILES = {  # an Accelerate file's dynamo keys -> the compile setting, as `accelerate launch` reads the file
    "top_level_wins": ("dynamo_backend: INDUCTOR\ndynamo_config:\n  dynamo_backend: 'NO'\n", True),
    "top_level_wins_over_regional": ("dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_regional_compilation: "
                                     "true\ndynamo_backend: INDUCTOR\n", True),
    "top_level_no": ("dynamo_backend: 'NO'\ndynamo_config:\n  dynamo_backend: INDUCTOR\n", False),
    "regional_beside_no": ("dynamo_config:\n  dynamo_backend: 'NO'\n  dynamo_use_regional_compilation: true\n", False),
    "regional": ("dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_regional_compilation: true\n", "regional"),
}


@pytest.mark.parametrize("name", list(DYNAMO_FILES))
def test_an_accelerate_files_dynamo_keys_mean_what_accelerate_reads(tmp_path, name):
    """A file with both a top-level dynamo_backend and a dynamo_config: Accelerate's loader replaces dynamo_config
    with the top-level key (braeburn took whichever came last, and says now that dynamo_config is not used);
    regional compilation beside backend NO compiles nothing there (braeburn refused the file)."""
    text, expected = DYNAMO_FILES[name]
    path = tmp_path / "accelerate.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nuse_cpu: true\nnum_processes: 1\n"
                    "mixed_precision: 'no'\n" + text)
    resolved = resolve_settings({}, {}, path)
    assert resolved.problems == [] and resolved.settings.compile == expected
    both = name.startswith("top_level")
    assert [note.key for note in resolved.notes] == (["dynamo_config"] if both else [])
    if both:
        assert "replaces dynamo_config" in str(resolved.notes[0])
    if importlib.util.find_spec("accelerate") is not None:  # Accelerate's own reading of the same file
        from accelerate.commands.config.config_args import load_config_from_file

        dynamo = load_config_from_file(str(path)).dynamo_config
        backend = dynamo.get("dynamo_backend", "NO")
        theirs = False if backend == "NO" else "regional" if dynamo.get("dynamo_use_regional_compilation") else True
        assert theirs == expected


def test_a_dynamo_option_braeburn_cannot_honour_is_named(tmp_path):
    path = tmp_path / "accelerate.yaml"
    path.write_text("dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_fullgraph: true\n"
                    "  dynamo_mode: default\n")
    [problem] = resolve_settings({}, {}, path).problems
    assert "(dynamo_use_fullgraph cannot be honoured)" in str(problem) and "dynamo_mode" not in str(problem)


@pytest.mark.parametrize("value, expected", [('"true"', "regional"), ("'True'", "regional"), ('"yes"', "regional"),
                                             ('"false"', True), ("'0'", True)])
def test_a_quoted_regional_compilation_flag_is_read_as_accelerate_reads_it(tmp_path, value, expected):
    """`accelerate launch` passes dynamo_use_regional_compilation on as text and TorchDynamoPlugin reads it with
    str_to_bool, so a quoted "true" compiles by regions there (braeburn refused the file)."""
    from accelerate.utils import TorchDynamoPlugin

    path = tmp_path / "accelerate.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nuse_cpu: true\nnum_processes: 1\n"
                    f"dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_regional_compilation: {value}\n")
    resolved = resolve_settings({}, {}, path)
    assert resolved.problems == [] and resolved.settings.compile == expected
    import yaml
    text = str(yaml.safe_load(path.read_text())["dynamo_config"]["dynamo_use_regional_compilation"])
    with pytest.MonkeyPatch.context() as env:  # what the launcher's variable makes of it in Accelerate
        env.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", text)
        assert TorchDynamoPlugin(backend="inductor").use_regional_compilation is (expected == "regional")


def test_a_quoted_regional_compilation_word_that_is_no_truth_value_is_still_refused(tmp_path):
    path = tmp_path / "accelerate.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nuse_cpu: true\nnum_processes: 1\n"
                    "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_regional_compilation: 'maybe'\n")
    [problem] = resolve_settings({}, {}, path).problems
    assert "dynamo_use_regional_compilation" in str(problem)


@pytest.mark.parametrize("key, value, expected", [
    ("dynamo_use_regional_compilation", "1", "regional"), ("dynamo_use_regional_compilation", "0", True),
    ("dynamo_use_fullgraph", '"false"', True), ("dynamo_use_fullgraph", "'No'", True),
    ("dynamo_use_dynamic", '"False"', True), ("dynamo_use_dynamic", "0", True)])
def test_a_dynamo_flag_written_as_accelerate_launch_reads_it_is_taken(tmp_path, key, value, expected):
    """`accelerate launch` passes str(value) of every dynamo_use_* key to TorchDynamoPlugin's str_to_bool: an
    unquoted 1 is true, a quoted "false" false (braeburn refused both: "cannot be honoured")."""
    from accelerate.utils import TorchDynamoPlugin

    path = tmp_path / "accelerate.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nuse_cpu: true\nnum_processes: 1\n"
                    f"dynamo_config:\n  dynamo_backend: INDUCTOR\n  {key}: {value}\n")
    resolved = resolve_settings({}, {}, path)
    assert resolved.problems == [] and resolved.settings.compile == expected
    import yaml
    text = str(yaml.safe_load(path.read_text())["dynamo_config"][key])
    variable = "ACCELERATE_" + key.upper()
    field = {"dynamo_use_regional_compilation": "use_regional_compilation", "dynamo_use_fullgraph": "fullgraph",
             "dynamo_use_dynamic": "dynamic"}[key]
    with pytest.MonkeyPatch.context() as env:  # what the launcher's variable makes of it in Accelerate
        env.setenv(variable, text)
        assert getattr(TorchDynamoPlugin(backend="inductor"), field) is (expected == "regional")


@pytest.mark.parametrize("value", ["2", "' true'", "'maybe'"])
def test_a_dynamo_flag_that_is_no_truth_word_is_still_refused(tmp_path, value):
    path = tmp_path / "accelerate.yaml"
    path.write_text(f"dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_fullgraph: {value}\n")
    [problem] = resolve_settings({}, {}, path).problems
    assert "(dynamo_use_fullgraph cannot be honoured)" in str(problem)
