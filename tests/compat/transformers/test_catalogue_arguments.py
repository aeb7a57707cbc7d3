"""Transformers' TrainingArguments read back: the values a script reads off ``transformers.TrainingArguments`` and
``braeburn.TrainingArguments`` built the same way, and what each reports in ``to_dict()`` and saves in
``to_json_string()`` (no training: these run in the fast tier)."""

from __future__ import annotations

import json

import pytest

from tests.compat.catalogue import Catalogue, Observation, assert_identical, assert_refused

from ._runs import Run

CATALOGUE = Catalogue("transformers")
idiom = CATALOGUE.idiom
REPORT_TO = ("none", ["none"], "all", ["all"], None, [], "tensorboard", ["tensorboard", "wandb"])


@pytest.fixture(autouse=True)
def _peers(no_launcher_env, one_thread):
    pytest.importorskip("transformers")


def _read_back(lib, tmp_path, value) -> dict:
    args = lib.TrainingArguments(output_dir=str(tmp_path / "out"), report_to=value)
    return {"attribute": args.report_to, "to_dict": args.to_dict()["report_to"],
            "to_json_string": json.loads(args.to_json_string())["report_to"]}


@idiom("TrainingArguments(report_to=...) read back: 'none', ['none'], 'all', ['all'], None, [], 'tensorboard', "
       "['tensorboard', 'wandb']", "identical",
       "the same value read back, in to_dict() and in to_json_string(): [] for 'none' (the default), the names of "
       "the integrations installed here for 'all', [None] for None (which both Trainers refuse), a name as a list")
def _report_to_read_back(tmp_path):
    import braeburn
    import transformers

    seen = {}
    for name, lib in (("transformers", transformers), ("braeburn", braeburn)):
        seen[name] = Observation(metrics={repr(value): _read_back(lib, tmp_path / name, value) for value in REPORT_TO})
    assert_identical(seen["transformers"], seen["braeburn"])
    assert seen["braeburn"].metrics["'none'"]["attribute"] == []


@idiom("TrainingArguments(report_to=None) given to the Trainer", "refused",
       "report_to='none' (None is stored as [None], as in Transformers, whose Trainer refuses it too)")
def _report_to_none_object(tmp_path):
    peer_run, run = Run("transformers", tmp_path), Run("braeburn", tmp_path)
    _, peer_error = peer_run.quietly(lambda: peer_run.trainer(peer_run.args(report_to=None), record=False))
    _, error = run.quietly(lambda: run.trainer(run.args(report_to=None), record=False).train())
    assert peer_error is not None and "None is not supported" in str(peer_error)
    assert error is not None, "braeburn trained with report_to=None"
    assert_refused(error, ["report_to=None", "[None]"], ["report_to='none'"])
    assert not (run.folder / "out" / "metrics.jsonl").exists()


@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)


def test_a_compile_mode_turns_torch_compile_on_as_in_transformers():
    import transformers

    import braeburn

    for given in ({"torch_compile_mode": "max-autotune"}, {"torch_compile_mode": "default", "torch_compile": False}):
        theirs = transformers.TrainingArguments(output_dir="/tmp/unused-compile-mode", **given)
        ours = braeburn.TrainingArguments(output_dir="/tmp/unused-compile-mode", **given)
        assert theirs.torch_compile is True and ours.torch_compile is True, given
        assert ours.compile == "true" and ours.torch_compile_mode == theirs.torch_compile_mode, given
    assert braeburn.TrainingArguments(output_dir="/tmp/unused-compile-mode").torch_compile is None  # braeburn's auto
