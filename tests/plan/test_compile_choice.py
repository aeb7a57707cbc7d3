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


def test_with_this_machines_measured_costs_gpt2_small_is_never_compiled_by_regions():
    """On the H200 the regional variant measured 49.3 ms against 27.7 ms whole (61.1 eager): whole-model compiling
    is faster at every length where either pays, so the rule picks eager or whole, never regional."""
    whole = FAMILY_GAINS["gpt2"]
    regional = REGIONAL_GAINS["gpt2"]
    eager = 0.0611
    for steps in (500, 1000, 2000, 3000, 5000, 7500):
        chosen = choose_compile(steps * eager, _option(whole.gain, whole.cold_seconds),
                                _option(regional.gain, regional.cold_seconds))
        assert chosen != "regional", steps
    assert choose_compile(3000 * eager, _option(whole.gain, whole.cold_seconds)) == "whole"


def test_regional_gains_are_what_the_benchmark_measured():
    """REGIONAL_GAINS is benchmarks/regional_compile.py's result; re-measuring means updating both."""
    results = json.loads((ROOT / "benchmarks/results/h200-issue44/compile/regional/regional.json").read_text())
    rows = {(r["variant"], r["cache"]): r for r in results["results"]}
    eager = rows[("eager", "cold")]["step_ms"]
    regional = FamilyGain(gain=round(1 - rows[("regional", "cold")]["step_ms"] / eager, 2),
                          cold_seconds=round(rows[("regional", "cold")]["first_step_seconds"], 1),
                          warm_seconds=round(rows[("regional", "warm")]["first_step_seconds"], 1))
    assert REGIONAL_GAINS == {"gpt2": regional}


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
