"""compile="auto" weighs the gain expected for this model: this machine's record, its family's, or a default."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from braeburn.plan import compile_gains
from braeburn.plan.compile_gains import FAMILY_GAINS, FamilyGain, estimate, read_records, remember
from braeburn.plan.compile_policy import decide
from braeburn.devices.cpu import CpuDevice
from tests.plan.test_compile_policy import fresh_dynamo  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
AUTO = dict(requested="auto", device_compiles=True, device_reason="compiles here", convolutional=False,
            num_processes=1)


class Named(torch.nn.Module):
    def __init__(self, model_type: str | None):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        if model_type:
            self.config = type("Config", (), {"model_type": model_type})()


def test_the_family_table_is_the_benchmarks_measurement():
    """FAMILY_GAINS is what benchmarks/compile_gains.py measured (GPT-2: benchmarks/compile_lengths.py through the
    Trainer, tests/plan/test_compile_choice.py); re-measuring means updating both."""
    measured = json.loads((ROOT / "benchmarks/results/h100-compile-gains/gains.json").read_text())["families"]
    assert {family: gain for family, gain in FAMILY_GAINS.items() if family != "gpt2"} == {
        family: FamilyGain(gain=r["gain"], cold_seconds=r["cold_seconds"], warm_seconds=r["warm_seconds"])
        for family, r in measured.items() if family != "gpt2"}


@pytest.mark.parametrize("model_type, source, words", [
    ("gpt2", "family", "gpt2 models save about 43% compiled and take about 24 s to compile (measured on an H200, "
                       "through the Trainer)"),
    ("t5", "default", "a t5 model: assuming 30% saved"),
    (None, "default", "a named model"),
])
def test_without_a_record_the_family_or_the_default_speaks(model_type, source, words):
    guess = estimate(Named(model_type), "key", {})
    assert guess.source == source and words in guess.words


def test_a_record_of_this_model_wins_and_expects_warm_caches():
    record = {"eager_step_seconds": 0.05, "compiled_step_seconds": 0.03, "compile_seconds": 52.2}
    first = estimate(Named("gpt2"), "key", {"key": record})
    gpt2 = FAMILY_GAINS["gpt2"]
    assert first.source == "record" and first.gain == pytest.approx(0.4)
    assert first.compile_seconds == pytest.approx(52.2 * gpt2.warm_seconds / gpt2.cold_seconds)  # the family's ratio
    assert "compiled here before: 50.0 -> 30.0 ms/step (40% saved)" in first.words
    later = estimate(Named("gpt2"), "key", {"key": {**record, "warm_compile_seconds": 6.0}})
    assert later.compile_seconds == 6.0 and "about 6 s with torch's caches warm (52 s the first time)" in later.words
    slower = estimate(Named("gpt2"), "key", {"key": {**record, "compiled_step_seconds": 0.08}})
    assert slower.gain == 0.0  # compiling made it slower here: no gain, never a negative one


def test_the_gpt2_recipe_compiles_mrpc_stays_eager_and_a_warm_cache_compiles_shorter_runs():
    """Measured numbers: GPT-2 small at 50.2 ms/step with 4,987 steps to go stayed eager under the old rule."""
    gpt2 = estimate(Named("gpt2"), "key", {})
    assert decide(**AUTO, remaining_steps=4987, eager_step_seconds=0.0502, estimate=gpt2).compile
    assert not decide(**AUTO, remaining_steps=4987, eager_step_seconds=0.0502).compile  # the old 30%/45 s guess
    mrpc = estimate(Named("bert"), "key", {})
    assert not decide(**AUTO, remaining_steps=332, eager_step_seconds=0.0328, estimate=mrpc).compile
    assert not decide(**AUTO, remaining_steps=1000, eager_step_seconds=0.0502, estimate=gpt2).compile
    warm = estimate(Named("gpt2"), "key", {"key": {"eager_step_seconds": 0.0502, "compiled_step_seconds": 0.03,
                                                   "compile_seconds": 52.0, "warm_compile_seconds": 7.0}})
    decision = decide(**AUTO, remaining_steps=1000, eager_step_seconds=0.0502, estimate=warm)
    assert decision.compile and "1.25x" in decision.reason and "compiled here before" in decision.reason


def test_remember_keeps_the_first_compile_as_cold_and_later_ones_as_warm(tmp_path):
    path = tmp_path / "records.json"
    remember("a", eager_step_seconds=0.05, compiled_step_seconds=0.03, compile_seconds=50.0, path=path)
    assert read_records(path)["a"] == {"eager_step_seconds": 0.05, "compiled_step_seconds": 0.03,
                                       "compile_seconds": 50.0, "runs": 1}
    remember("a", eager_step_seconds=0.05, compiled_step_seconds=0.031, compile_seconds=7.0, path=path)
    record = read_records(path)["a"]
    assert record["compile_seconds"] == 50.0 and record["warm_compile_seconds"] == 7.0 and record["runs"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["records.json"]  # no partial file left


def test_records_are_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_gains, "MAX_RECORDS", 3)
    path = tmp_path / "records.json"
    for key in "abcde":
        remember(key, eager_step_seconds=1.0, compiled_step_seconds=0.5, compile_seconds=1.0, path=path)
    assert list(read_records(path)) == ["c", "d", "e"]  # the oldest go first


def test_unreadable_or_foreign_records_are_ignored(tmp_path):
    path = tmp_path / "records.json"
    for text in ("not json", "[1, 2]", '{"records": {"a": {"eager_step_seconds": "fast"}}}'):
        path.write_text(text)
        assert read_records(path) == {}
    assert read_records(tmp_path / "missing.json") == {}
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"records": {"a": {"eager_step_seconds": 1, "compiled_step_seconds": 1,
                                                    "compile_seconds": 1}}}))
    link = tmp_path / "linked.json"
    link.symlink_to(target)
    assert read_records(link) == {}  # a link planted in the cache folder is not followed


def test_remember_writes_through_no_planted_link(tmp_path):
    path = tmp_path / "records.json"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / f".records.json.{os.getpid()}.tmp").symlink_to(victim)
    remember("a", eager_step_seconds=1.0, compiled_step_seconds=0.5, compile_seconds=1.0, path=path)
    assert victim.read_text() == "keep me" and not path.exists()  # the record is lost, the file outside is not


def test_records_live_beside_torchs_compile_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("BRAEBURN_COMPILE_RECORDS", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    assert compile_gains.records_path() == tmp_path / "inductor" / "braeburn-compile-records.json"
    monkeypatch.setenv("BRAEBURN_COMPILE_RECORDS", str(tmp_path / "mine.json"))
    assert compile_gains.records_path() == tmp_path / "mine.json"


@pytest.mark.slow  # torch.compile of a model, then a second run (21 s on a loaded machine)
@pytest.mark.usefixtures("no_launcher_env", "one_thread", "fresh_dynamo")
def test_a_compiled_run_leaves_a_record_and_the_next_auto_run_uses_it(tmp_path, monkeypatch, capsys):
    """compile=true times eager and compiled steps and keeps them; with that record (here rewritten to say
    compiling paid well), compile="auto" compiles a run the default guess would keep eager, and says why."""
    from tests.plan.test_compile_policy import train_tiny

    path = Path(os.environ["BRAEBURN_COMPILE_RECORDS"])
    path.unlink(missing_ok=True)
    trainer, _ = train_tiny(tmp_path / "first", compile="true")
    records = read_records(path)
    assert len(records) == 1
    (key, record), = records.items()
    assert "TinyText" in key and "batch 8" in key and record["runs"] == 1
    assert record["eager_step_seconds"] > 0 and record["compiled_step_seconds"] > 0 and record["compile_seconds"] > 0
    assert "ms/step eager ->" in capsys.readouterr().out  # compile=true now says whether it paid, too

    record.update(eager_step_seconds=1.0, compiled_step_seconds=0.1, compile_seconds=1e-3)
    path.write_text(json.dumps({"records": {key: record}}))
    monkeypatch.setattr(CpuDevice, "compile_by_default", lambda self, host: (True, "pretend the CPU compiles"))
    trainer, _ = train_tiny(tmp_path / "second")
    stats = trainer.accelerator.compile_stats()
    assert stats.compiled and "compiled here before" in stats.reason
    out = capsys.readouterr().out
    assert "torch's caches on disk were warm" in out
    assert read_records(path)[key]["runs"] == 2
