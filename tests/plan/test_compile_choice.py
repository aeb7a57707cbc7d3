"""compile="auto"'s three-way rule (eager, regional, whole), a pure function: each way of compiling qualifies when
its saving is at least its margin times its cost; of those, the shortest expected run wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from braeburn.plan.compile_gains import FAMILY_GAINS, REGIONAL_GAINS, CompileEstimate, FamilyGain, estimate
from braeburn.plan.compile_policy import choose_compile, decide, expected_seconds

ROOT = Path(__file__).resolve().parents[2]


def _option(gain: float, seconds: float, source: str = "family") -> CompileEstimate:
    return CompileEstimate(gain, seconds, source, f"{gain:.0%} saved, {seconds:.0f} s to compile")


def _auto(steps: int, step_seconds: float, whole: CompileEstimate, regional: CompileEstimate | None):
    expected = CompileEstimate(whole.gain, whole.compile_seconds, whole.source, whole.words, regional)
    return decide(requested="auto", device_compiles=True, device_reason="", convolutional=False, num_processes=1,
                  remaining_steps=steps, eager_step_seconds=step_seconds, estimate=expected)


# The H100 bare-loop numbers: 60 ms eager (about), whole 30.9 ms after about 27 s of compiling, regional
# (blocks, head and loss) 34.2 ms after about 14.5 s: regional wins a middle band of run lengths.
EAGER = 0.060
WHOLE = _option(1 - 30.9 / 60, 27.0)
REGIONAL = _option(1 - 34.2 / 60, 14.5)


@pytest.mark.parametrize("steps, chosen", [(300, None), (1000, "regional"), (3000, "regional"), (7500, "whole")])
def test_each_run_length_gets_its_fastest_way(steps, chosen):
    assert choose_compile(steps * EAGER, WHOLE, REGIONAL) == chosen


@pytest.mark.parametrize("steps", [300, 700, 1000, 2000, 3000, 5000, 7500, 20000])
def test_the_chosen_way_is_the_fastest_of_those_that_earn_their_margin(steps):
    ahead = steps * EAGER
    chosen = choose_compile(ahead, WHOLE, REGIONAL)
    qualified = {name: option for name, option in (("whole", WHOLE), ("regional", REGIONAL))
                 if ahead * option.gain >= option.payback * option.compile_seconds}
    times = {name: expected_seconds(ahead, option) for name, option in qualified.items()}
    assert chosen == (min(times, key=times.get) if times else None)
    if chosen is not None:
        assert expected_seconds(ahead, qualified[chosen]) < ahead  # compiling is expected to shorten the run


def test_without_a_regional_estimate_the_rule_is_the_whole_model_rule():
    for steps in range(100, 5000, 37):
        ahead = steps * EAGER
        assert choose_compile(ahead, WHOLE) == ("whole" if ahead * WHOLE.gain >= 1.5 * WHOLE.compile_seconds else None)


def test_decide_compiles_by_regions_and_says_so():
    decision = _auto(2000, EAGER, WHOLE, REGIONAL)
    assert decision.compile and decision.regional and "by regions" in decision.reason
    whole = _auto(20000, EAGER, WHOLE, REGIONAL)
    assert whole.compile and not whole.regional
    eager = _auto(200, EAGER, WHOLE, REGIONAL)
    assert not eager.compile and not eager.regional


LENGTHS = ROOT / "benchmarks/results/device-2026-11-26-s5/gpu1/out/lengths/compile_lengths.json"


def _lengths() -> dict:
    return {run["label"]: run for run in json.loads(LENGTHS.read_text())}


def _step_seconds(run: dict, first: int, last: int) -> float:
    return (run["marks"][str(last)] - run["marks"][str(first)]) / (last - first)


def test_gpt2s_gains_are_what_the_trainer_measured_on_the_h200():
    """FAMILY_GAINS and REGIONAL_GAINS for GPT-2 are benchmarks/compile_lengths.py's runs (the warm compiles from
    benchmarks/regional_compile.py); re-measuring means updating both."""
    runs = _lengths()
    eager = _step_seconds(runs["eager"], 500, 5000)
    regional_json = json.loads((ROOT / "benchmarks/results/h200-issue44/compile/regional/regional.json").read_text())
    warm = {r["variant"]: r["first_step_seconds"] for r in regional_json["results"] if r["cache"] == "warm"}
    for table, label in ((FAMILY_GAINS, "whole"), (REGIONAL_GAINS, "regional")):
        run, gain = runs[label], table["gpt2"]
        assert gain.gain == round(1 - _step_seconds(run, 3000, 7500) / eager, 2)
        assert gain.cold_seconds == round(run["compile_stats"]["compile_seconds"], 1)
        assert gain.warm_seconds == round(warm[label], 1)
        assert "H200" in gain.measured_on


@pytest.mark.parametrize("steps", [500, 3000, 7500])
def test_at_each_measured_length_auto_chooses_the_way_that_was_fastest_there(steps):
    """The Trainer's own runs (cold caches, H200): the seconds to step 500, 3,000 and 7,500 of eager, regional and
    whole compiling (the eager run stopped at 5,000 steps, by then slower than whole's 7,500). The rule, given the
    eager step time measured and the steps to go after its decision at step 13, picks the way that got there
    first."""
    runs = _lengths()
    reached = {way: runs[way]["marks"].get(str(steps)) for way in ("eager", "regional", "whole")}
    if reached["eager"] is None:  # stopped earlier, already slower than the fastest way's whole length
        assert runs["eager"]["marks"]["5000"] > min(t for t in reached.values() if t is not None)
        reached["eager"] = float("inf")
    fastest = min(reached, key=reached.get)
    assert {500: "eager", 3000: "whole", 7500: "whole"}[steps] == fastest
    family = estimate(type("M", (), {"config": type("C", (), {"model_type": "gpt2"})()})(), "key", {})
    decision = _auto(steps - 13, _step_seconds(runs["eager"], 500, 3000), family, family.regional)
    assert (("regional" if decision.regional else "whole") if decision.compile else "eager") == fastest


def test_a_family_estimate_carries_its_regional_estimate_and_a_record_does_not():
    class Config:
        model_type = "gpt2"

    class Model:
        config = Config()

    assert estimate(Model(), "key", {}).regional.gain == REGIONAL_GAINS["gpt2"].gain
    record = {"eager_step_seconds": 0.06, "compiled_step_seconds": 0.03, "compile_seconds": 30.0}
    assert estimate(Model(), "key", {"key": record}).regional is None  # compiled here before: caches warm, whole


def test_compile_regional_asked_compiles_by_regions_whatever_the_run_length():
    for steps in (None, 10, 100000):
        decision = decide(requested="regional", device_compiles=True, device_reason="", convolutional=False,
                          num_processes=1, remaining_steps=steps, eager_step_seconds=None if steps is None else 0.06,
                          requested_reason="compile=regional, as asked")
        assert decision.compile and decision.regional and decision.reason == "compile=regional, as asked"
