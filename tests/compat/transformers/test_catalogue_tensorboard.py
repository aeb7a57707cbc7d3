"""The Transformers Trainer's TensorBoard idioms (report_to='all' or 'tensorboard'), each run under
``transformers.Trainer`` and ``braeburn.Trainer`` in the same test (tiny BERT, CPU, one thread), comparing the event
files, tags, steps and values. See tests/compat/catalogue.py."""

from __future__ import annotations

import importlib.util

import pytest

from tests.compat._tensorboard import RANDOM_SUFFIX, shown, tensorboard_view, unsuffixed
from tests.compat.catalogue import Catalogue, Observation, assert_identical, assert_on_purpose, assert_refused

from . import _runs
from ._runs import catalogue_peers  # noqa: F401  (an autouse fixture)
from ._runs import Run, train_both

CATALOGUE = Catalogue("transformers")
idiom = CATALOGUE.idiom


def _clocked(tag: str) -> bool:
    name = tag.rsplit("/", 1)[-1]  # eval/runtime (eval_runtime), train/train_runtime, eval/samples_per_second ...
    return name == "runtime" or name.endswith(_runs.TIMING)


def _tensorboard_seen(run, trainer) -> dict:
    """The TensorBoard files under output_dir/runs and what TensorBoard reads from them, the clock's values by name."""
    out = run.folder / "out"
    files = sorted(shown(path.relative_to(out).as_posix()) for path in (out / "runs").rglob("*") if path.is_file())
    view = {path.removesuffix(f".{RANDOM_SUFFIX}"): {
        "scalars": {tag: [(step, "<timing>" if _clocked(tag) else value) for step, value in points]
                    for tag, points in seen["scalars"].items()},
        "texts": seen["texts"]} for path, seen in tensorboard_view(out).items()}
    return {"files": files, "tensorboard": view, "args": trainer.args.to_json_string()}


@idiom("report_to='all' (and report_to='tensorboard') with the tensorboard package installed", "on purpose",
       "Transformers' folder and file (output_dir/runs/<date>_<host>/, one event file), tags (train/loss, eval/loss, "
       "train/train_loss ...), steps, values (timings by name) and model_config text; one line says that the args "
       "text holds braeburn's TrainingArguments; the event file's name ends in 8 random hex characters "
       "(docs/reliability.md). Without the package neither writes TensorBoard files, and 'tensorboard' is refused "
       "by both")
def _report_to_all(tmp_path):
    installed = importlib.util.find_spec("tensorboard") is not None
    for value in ("all", "tensorboard") if installed else ("all",):
        args = dict(report_to=value, max_steps=3, eval_strategy="steps", eval_steps=2)
        peer, ours, runs = train_both(tmp_path / value, args, after=_tensorboard_seen)
        assert peer.exit is None and ours.exit is None, (peer.exit, ours.exit)
        theirs, mine = peer.extra.pop("tensorboard"), ours.extra.pop("tensorboard")
        assert [f for f in peer.extra.pop("files") if RANDOM_SUFFIX in f] == []
        assert unsuffixed(ours.extra.pop("files")) == [f.removesuffix(f".{RANDOM_SUFFIX}") for f in theirs] == list(
            theirs) == (["runs/<date>_<host>/events.out.tfevents.<time>.<host>.<pid>.<n>"] if installed else [])
        for seen, args_json in ((theirs, peer.extra.pop("args")), (mine, ours.extra.pop("args"))):
            for file in seen.values():  # the args text: each library's own TrainingArguments
                assert file["texts"].pop("args/text_summary") == [(0, [args_json.encode()])]
        assert theirs == mine
        assert_identical(peer, ours)
        said = [line for line in runs[1].printed.splitlines() if "report_to=" in line]
        if installed:
            assert_on_purpose(said, f"report_to={value}")
            assert {"train/loss", "eval/loss", "train/train_loss"} <= set(mine[next(iter(mine))]["scalars"])
        else:
            assert said == []
    if not installed:  # report_to='tensorboard' without the package: refused by both before training
        peer_run, run = Run("transformers", tmp_path / "refused"), Run("braeburn", tmp_path / "refused")
        _, peer_error = peer_run.quietly(lambda: peer_run.trainer(peer_run.args(report_to="tensorboard")))
        _, error = run.quietly(lambda: run.trainer(run.args(report_to="tensorboard")))
        assert peer_error is not None and "tensorboard" in str(peer_error)
        assert_refused(error, ["report_to", "tensorboard"], ["pip install tensorboard"])


@idiom("trainer.log({...}) and trainer.evaluate() after train() with report_to='tensorboard'", "identical",
       "as Transformers' TensorBoardCallback: a second event file in the run's folder, runs/<date>_<host>/, with the "
       "custom values (train/<key>; a bool as 1.0, NaN as NaN, text as text) and eval/loss ... at the last step")
def _tensorboard_after_train(tmp_path):
    pytest.importorskip("tensorboard")

    def after(run, trainer):
        run.quietly(lambda: trainer.log({"custom": 1.5, "flag": True, "nan": float("nan"), "note": "x"}))
        run.quietly(trainer.evaluate)
        return _tensorboard_seen(run, trainer)

    peer, ours, _ = train_both(tmp_path, dict(report_to="tensorboard", max_steps=2), after=after)
    theirs, mine = peer.extra.pop("tensorboard"), ours.extra.pop("tensorboard")
    assert unsuffixed(ours.extra.pop("files")) == peer.extra.pop("files") == [
        "runs/<date>_<host>/events.out.tfevents.<time>.<host>.<pid>.<n>"] * 2
    for seen, args_json in ((theirs, peer.extra.pop("args")), (mine, ours.extra.pop("args"))):
        for file in seen.values():
            file["texts"].pop("args/text_summary", None)
    mine = {path.replace(f".{RANDOM_SUFFIX}", ""): seen for path, seen in mine.items()}
    assert_identical(Observation(metrics=theirs), Observation(metrics=mine))
    assert_identical(peer, ours)
    later = theirs["runs/<date>_<host>/events.out.tfevents.<time>.<host>.<pid>.<n>#2"]
    assert later["scalars"]["train/custom"] == [(2, 1.5)] and later["scalars"]["eval/loss"][0][0] == 2


@idiom("trainer.evaluate() before trainer.train() with report_to='tensorboard'", "on purpose",
       "the same event file, scalars, steps and texts (eval/loss at step 0, then the training in the same file); "
       "Transformers writes it into runs/<date>_<host> of the current directory, braeburn into output_dir/runs/"
       "<date>_<host> where train() writes, and one line says so (Transformers' eval/model_preparation_time left out)")
def _tensorboard_evaluate_first(tmp_path):
    pytest.importorskip("tensorboard")
    seen, said = {}, ""
    for name in _runs.LIBS:
        run = Run(name, tmp_path)
        (run.folder / "cwd").mkdir(parents=True)
        trainer = run.trainer(run.args(report_to="tensorboard", max_steps=2))
        with pytest.MonkeyPatch.context() as patch:  # Transformers writes into the current directory
            patch.chdir(run.folder / "cwd")
            run.quietly(trainer.evaluate)
            said = run.printed
            _, error = run.quietly(trainer.train)
        assert error is None, error
        view = {}
        for path, events in tensorboard_view(run.folder).items():
            events["texts"].pop("args/text_summary")
            events["scalars"] = {tag: [(step, "<timing>" if _clocked(tag) else value) for step, value in points]
                                 for tag, points in events["scalars"].items() if tag != "eval/model_preparation_time"}
            view[path.replace(f".{RANDOM_SUFFIX}", "")] = events
        seen[name] = view
    file = "runs/<date>_<host>/events.out.tfevents.<time>.<host>.<pid>.<n>"
    assert list(seen["transformers"]) == [f"cwd/{file}"] and list(seen["braeburn"]) == [f"out/{file}"]
    assert seen["transformers"][f"cwd/{file}"] == seen["braeburn"][f"out/{file}"]
    assert seen["braeburn"][f"out/{file}"]["scalars"]["eval/loss"][0][0] == 0
    assert_on_purpose([line for line in said.splitlines() if line.startswith("braeburn")], "evaluate() first")


# -- refused before training, with the way out ------------------------------------------------------------------
@idiom("report_to='all' where an integration braeburn lacks is installed (codecarbon, comet_ml, clearml, neptune, "
       "dvclive ...)", "refused", "names the integrations Transformers' 'all' would report to that braeburn cannot; the "
       "way out: --report_to with braeburn's trackers, and a TrainerCallback of yours for the others")
def _report_to_all_beyond_braeburn(tmp_path):
    import transformers.integrations as integrations

    with pytest.MonkeyPatch.context() as patch:  # codecarbon installed here, as Transformers finds it
        patch.setattr(integrations, "get_available_reporting_integrations", lambda: ["codecarbon"])
        assert Run("transformers", tmp_path).args(report_to="all").report_to == ["codecarbon"]
        run = Run("braeburn", tmp_path)
        _, error = run.quietly(lambda: run.trainer(run.args(report_to="all"), record=False))
    assert error is not None, "braeburn took report_to='all'"
    assert_refused(error, ["report_to='all'", "codecarbon"], ["--report_to", "TrainerCallback"])


# -- the test: one per idiom (last, so that every idiom above is registered) -----------------------------------
@pytest.mark.slow  # the catalogue took 62 s as one file with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
