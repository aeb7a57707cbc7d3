"""ACCELERATE_DYNAMO_* beside Accelerator(dynamo_backend=...), and accelerator.state.dynamo_plugin: braeburn reads
what Accelerate 1.15's TorchDynamoPlugin reads, refuses what it cannot honour, and reports the plugin's fields."""

from __future__ import annotations

import dataclasses

import pytest

accelerate_utils = pytest.importorskip("accelerate.utils")

from braeburn import Accelerator  # noqa: E402
from braeburn.compat.accelerate.options import NotSupportedError  # noqa: E402

_FIELDS = ("mode", "fullgraph", "dynamic", "options", "disable", "use_regional_compilation")


def _setenv(monkeypatch, env: dict) -> None:
    for name in ("MODE", "USE_FULLGRAPH", "USE_DYNAMIC", "USE_REGIONAL_COMPILATION", "BACKEND"):
        monkeypatch.delenv(f"ACCELERATE_DYNAMO_{name}", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_dynamo_backend_in_code_takes_the_mode_from_the_environment(no_launcher_env, monkeypatch):
    _setenv(monkeypatch, {"ACCELERATE_DYNAMO_MODE": "max-autotune"})
    assert accelerate_utils.TorchDynamoPlugin(backend="inductor").mode == "max-autotune"
    assert Accelerator(cpu=True, dynamo_backend="inductor").compile_mode == "max-autotune"
    assert Accelerator(cpu=True, dynamo_backend="inductor", compile_mode="reduce-overhead").compile_mode \
        == "reduce-overhead"  # the argument wins


@pytest.mark.parametrize("name, value", [("ACCELERATE_DYNAMO_USE_FULLGRAPH", "True"),
                                         ("ACCELERATE_DYNAMO_USE_DYNAMIC", "1"),
                                         ("ACCELERATE_DYNAMO_MODE", "fastest")])
@pytest.mark.parametrize("backend_in_code", [True, False])
def test_a_dynamo_variable_braeburn_cannot_honour_is_refused_by_name(no_launcher_env, monkeypatch, name, value,
                                                                     backend_in_code):
    env = {name: value} if backend_in_code else {name: value, "ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"}
    _setenv(monkeypatch, env)
    with pytest.raises(NotSupportedError) as raised:
        Accelerator(cpu=True, **({"dynamo_backend": "inductor"} if backend_in_code else {}))
    message = str(raised.value)
    assert message.startswith("1 ACCELERATE_* variable that braeburn does not support:")  # not "Accelerator argument"
    assert f"{name}={value!r}" in message or f"{name}={value}" in message
    assert "unset it" in message


def test_the_launchers_default_dynamo_variables_are_taken(no_launcher_env, monkeypatch):
    """`accelerate launch --dynamo_backend inductor` sets all four; USE_DYNAMIC=False is said once, not refused."""
    _setenv(monkeypatch, {"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR", "ACCELERATE_DYNAMO_MODE": "default",
                          "ACCELERATE_DYNAMO_USE_FULLGRAPH": "False", "ACCELERATE_DYNAMO_USE_DYNAMIC": "False",
                          "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False"})
    from braeburn.accelerator import core

    core._said_once.clear()
    with pytest.warns(UserWarning, match=r"ACCELERATE_DYNAMO_USE_DYNAMIC=False: braeburn lets torch.compile.*"
                      r"`accelerate launch` always sets it: launch with `braeburn launch`"):
        acc = Accelerator(cpu=True)
    assert acc.compile_mode is None
    _setenv(monkeypatch, {"ACCELERATE_DYNAMO_USE_FULLGRAPH": "True", "ACCELERATE_DYNAMO_BACKEND": "NO"})
    Accelerator(cpu=True, compile=False)  # nothing compiles: Accelerate ignores fullgraph there too


@pytest.mark.parametrize("env, kwargs, theirs", [
    ({}, {"compile": False}, {}),
    ({"ACCELERATE_DYNAMO_MODE": "max-autotune"}, {"dynamo_backend": "inductor"}, {"backend": "inductor"}),
    ({"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "true"}, {"dynamo_backend": "inductor"}, {"backend": "inductor"}),
    ({"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR", "ACCELERATE_DYNAMO_USE_DYNAMIC": "False"}, {}, {}),
    ({"ACCELERATE_DYNAMO_MODE": "reduce-overhead", "ACCELERATE_DYNAMO_USE_FULLGRAPH": "true"},
     {"dynamo_backend": "no"}, {"backend": "no"}),
])
def test_state_dynamo_plugin_has_accelerates_fields_and_values(no_launcher_env, monkeypatch, env, kwargs, theirs):
    _setenv(monkeypatch, env)
    expected = accelerate_utils.TorchDynamoPlugin(**theirs)  # what Accelerator(...) builds from the same settings
    ours = Accelerator(cpu=True, **kwargs).state.dynamo_plugin
    assert {f: getattr(ours, f) for f in _FIELDS} == {f: getattr(expected, f) for f in _FIELDS}
    assert ours.backend == expected.backend and ours.backend.value == expected.backend.value
    assert set(_FIELDS) | {"backend"} <= {f.name for f in dataclasses.fields(ours)}


@pytest.mark.parametrize("name", ["ACCELERATE_DYNAMO_USE_FULLGRAPH", "ACCELERATE_DYNAMO_USE_DYNAMIC"])
def test_a_dynamo_flag_that_is_no_truth_value_is_refused_as_accelerate_refuses_it(no_launcher_env, monkeypatch, name):
    """Accelerate's TorchDynamoPlugin stops at 'maybe' (str_to_bool); braeburn compiled without a word (fullgraph),
    or said Accelerate passes dynamic=False (dynamic)."""
    _setenv(monkeypatch, {name: "maybe", "ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"})
    with pytest.raises(ValueError, match="invalid truth value"):
        accelerate_utils.TorchDynamoPlugin()
    with pytest.raises(NotSupportedError, match=rf"{name}='maybe': is not true or false .*set it to True or False"):
        Accelerator(cpu=True)


@pytest.mark.parametrize("kwargs", [{"compile": True}, {"compile": "true"}, {"compile": "regional"}])
def test_compile_asked_in_code_reads_the_dynamo_variables_as_a_backend_in_code_does(no_launcher_env, monkeypatch,
                                                                                    kwargs):
    """`compile=True` (the Trainer's torch_compile=True) is dynamo_backend="inductor", whose TorchDynamoPlugin reads
    ACCELERATE_DYNAMO_MODE and USE_FULLGRAPH: the mode was dropped (state.dynamo_plugin said it was used) and a
    fullgraph braeburn cannot honour compiled without a word."""
    _setenv(monkeypatch, {"ACCELERATE_DYNAMO_MODE": "max-autotune-no-cudagraphs"})
    assert accelerate_utils.TorchDynamoPlugin(backend="inductor").mode == "max-autotune-no-cudagraphs"
    acc = Accelerator(cpu=True, **kwargs)
    assert acc.compile_mode == "max-autotune-no-cudagraphs" == acc.state.dynamo_plugin.mode
    _setenv(monkeypatch, {"ACCELERATE_DYNAMO_USE_FULLGRAPH": "true"})
    with pytest.raises(NotSupportedError, match="ACCELERATE_DYNAMO_USE_FULLGRAPH='true'"):
        Accelerator(cpu=True, **kwargs)


@pytest.mark.parametrize("compile", [False, "false", "False"])
def test_dynamo_backend_no_compiles_nothing_and_asks_nothing_of_the_variables(no_launcher_env, monkeypatch, compile):
    """dynamo_backend="no" beside compile="false" (a string, as a config passes it) was read as compiling: the
    variables' fullgraph refused and their mode taken, where Accelerate compiles nothing and accepts them."""
    _setenv(monkeypatch, {"ACCELERATE_DYNAMO_USE_FULLGRAPH": "true", "ACCELERATE_DYNAMO_MODE": "max-autotune"})
    assert accelerate_utils.TorchDynamoPlugin(backend="no").fullgraph is True  # accepted there
    acc = Accelerator(cpu=True, dynamo_backend="no", compile=compile)
    assert acc.compile_mode is None and not acc.plan.compile


@pytest.mark.parametrize("env, kwargs", [({}, {"dynamo_backend": "inductor"}), ({}, {"compile": True}),
                                         ({"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"}, {})])
def test_a_dynamo_variable_is_refused_with_the_arguments_braeburn_refuses(no_launcher_env, monkeypatch, env, kwargs):
    """One error for an unsupported Accelerator argument and an ACCELERATE_DYNAMO_* value braeburn cannot honour
    (the variable was said only once the argument was fixed)."""
    _setenv(monkeypatch, {**env, "ACCELERATE_DYNAMO_USE_FULLGRAPH": "true"})
    with pytest.raises(NotSupportedError) as raised:
        Accelerator(cpu=True, deepspeed_plugin=object(), **kwargs)
    assert [error.option for error in raised.value.errors] == ["deepspeed_plugin", "ACCELERATE_DYNAMO_USE_FULLGRAPH"]
    assert str(raised.value).startswith("2 Accelerator arguments and ACCELERATE_* variables that braeburn does not")
    _setenv(monkeypatch, {"ACCELERATE_DYNAMO_USE_FULLGRAPH": "true"})  # nothing compiles: the variable asks nothing
    with pytest.raises(NotSupportedError) as raised:
        Accelerator(cpu=True, deepspeed_plugin=object(), compile=False)
    assert [error.option for error in raised.value.errors] == ["deepspeed_plugin"]
