"""mixed_precision="auto" on MPS decides from a measurement: the rule from tables of timings, the whole measurement
with simulated steps (skipped fp16 updates, noise, a clear winner; 20 repetitions each), the plan's candidates from
the device facts (the Trainer's trial on a faked Mac is in test_precision_trial_trainer.py)."""

from __future__ import annotations

import types

import numpy
import pytest
import torch

from braeburn.plan.rules import RunOptions, make_plan
from braeburn.plan.precision_trial import (MEASURE_STEPS, MIN_GAIN, ROUNDS, Trial, Window, clearly_faster, decide,
                                      measure_reason, min_run_steps, run_trials, stop_after_first_round, trial_steps)
from tests.conftest import APPLE_M, CUDA_BOX, LINUX_CPU

MS = 0.001


def timed(precision: str, *ms: float, skipped: tuple[int, ...] = (), loss: float = 2.3, **fields) -> Trial:
    """A trial with one window per value of ``ms`` (ms/step); the windows numbered in ``skipped`` had a step whose
    update the grad scaler skipped."""
    windows = tuple(Window(each * MS * MEASURE_STEPS, (True,) * (MEASURE_STEPS - 1) + (index not in skipped,))
                    for index, each in enumerate(ms))
    return Trial(precision, windows, loss, **fields)


F32 = timed("no", 10.0, 10.2, 9.9, 10.1)


# -- the rule, from tables ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows, chosen, words", [
    ([F32, timed("bf16", 8.0, 8.1, 7.9, 8.0), timed("fp16", 6.0, 6.1, 6.2, 5.9)], "fp16",
     "fp16, measured 40% faster than float32 over 4 interleaved rounds"),                    # a clear winner
    ([F32, timed("fp16", 9.8, 10.3, 9.7, 9.9)], "no", "fp16 +2% against float32, within the spread"),  # overlap
    # every round faster, but the medians' gap (1.0 ms) is within the candidate's own spread (1.05 ms)
    ([F32, timed("fp16", 8.8, 9.85, 9.0, 9.1)], "no", "fp16 +10% against float32, within the spread"),
    ([F32, timed("fp16", 9.6, 9.6, 9.6, 9.6)], "no", "only 4% faster"),  # beyond a spread of 0.3 ms, but under MIN_GAIN
    ([F32, timed("fp16", 1.0, 1.0, 1.0, 1.0, skipped=(0,))], "no",                  # cheap skipped steps: left out
     "fp16 had 3 of 4 rounds with every update applied (4 needed)"),
    ([F32, timed("fp16", 6.0, 6.1, 6.2, 5.9, finite=False)], "no", "fp16 a loss was not finite"),
    ([F32, timed("fp16", 6.0, 6.1, 6.2, 5.9, loss=2.6)], "no", "its loss 2.6 is not float32's 2.3 within 2%"),
    ([F32, timed("fp16", 6.0, 6.1, 6.2, 5.9, loss=2.31)], "fp16", "40% faster"),               # within tolerance
    ([F32, Trial("bf16", error="MPS backend out of memory"), timed("fp16", 7.0, 7.1, 7.0, 7.1)], "fp16",
     "bf16 failed (MPS backend out of memory)"),
    ([Trial("no", error="MPS backend out of memory"), timed("fp16", 7.0, 7.1, 7.0, 7.1)], "no",
     "float32's own trial failed"),
    # two winners that the spread cannot tell apart: the first in the device's order, not the noise's
    ([F32, timed("bf16", 7.0, 7.3, 7.1, 7.2), timed("fp16", 6.9, 7.2, 7.0, 7.1)], "bf16", "bf16, measured 29% faster"),
    ([F32, timed("bf16", 8.0, 8.1, 7.9, 8.0), timed("fp16", 6.0, 6.1, 6.2, 5.9)], "fp16", "fp16, measured 40%"),
])
def test_decide_from_tables(rows, chosen, words):
    decision = decide(rows)
    assert decision.precision == chosen, decision.reason
    assert words in decision.reason, decision.reason


def test_a_trial_stopped_after_its_first_round_keeps_float32():
    decision = decide([timed("no", 10.0), timed("fp16", 6.0)], stopped="after one round ...")
    assert decision.precision == "no" and "the trial stopped early: after one round" in decision.reason


@pytest.mark.parametrize("fast, slow, expected", [
    ((7.0, 7.1, 7.2), (10.0, 10.1, 10.2), True),
    ((7.0, 7.1, 10.1), (10.0, 10.1, 10.2), False),     # one slow round overlaps
    ((9.0, 9.9, 9.2), (10.0, 10.1, 11.5), False),      # no overlap, but float32's spread (1.5) beats the gap (0.9)
    ((10.0, 10.0), (10.0, 10.0), False), ((), (10.0,), False)])
def test_clearly_faster(fast, slow, expected):
    assert clearly_faster(fast, slow) is expected


def test_the_table_shows_every_precision_in_one_line():
    rows = [F32, Trial("bf16", error="no bf16 kernel"), timed("fp16", 6.0, 1.0, 6.2, 5.9, skipped=(1,), finite=False)]
    assert decide(rows).table == ("float32 10.1 ms/step [9.9-10.2, 4 rounds] loss 2.3000 | "
                                  "bf16 failed (no bf16 kernel) | "
                                  "fp16 6.0 ms/step [5.9-6.2, 3 rounds, 1 left out: skipped updates] loss not finite")


# -- when the trial runs at all, and when it stops after one round ----------------------------------------------
def test_the_trial_costs_what_a_minimum_gain_earns_back():
    assert trial_steps(2) == 3 * (2 + MEASURE_STEPS) + (ROUNDS - 1) * 3 * MEASURE_STEPS == 54
    assert min_run_steps(2) == 1080 and min_run_steps(1) == 720  # 54 / 0.05 and 36 / 0.05
    assert min_run_steps(2) * MIN_GAIN >= trial_steps(2)


@pytest.mark.parametrize("steps, processes, custom, words", [
    (min_run_steps(2) - 1, 1, False, "a run of 1079 steps is too short to earn back the trial: its 54 steps"),
    (100, 1, False, "only over 1080+ steps"), (min_run_steps(2), 2, False, "several processes"),
    (min_run_steps(2), 1, True, "training_step"), (min_run_steps(2), 1, False, None)])
def test_when_a_run_is_measured(steps, processes, custom, words):
    reason = measure_reason(steps, processes, custom, candidates=2)
    assert (reason is None) if words is None else words in reason, reason


@pytest.mark.parametrize("steps, accumulation, words", [
    (500, 8, None),  # 4000 batches: what the trial's 54 batches are weighed against (500 once)
    (100, 8, "a run of 100 optimizer steps (800 batches with gradient_accumulation_steps=8) is too short to earn "
             "back the trial: its 54 steps train nothing, and the smallest gain it may choose (5%) repays them only "
             "over 1080+ batches"),
    (135, 8, None), (1079, 1, "a run of 1079 steps is too short")])
def test_with_gradient_accumulation_the_gate_counts_batches_on_both_sides(steps, accumulation, words):
    reason = measure_reason(steps, 1, False, candidates=2, accumulation=accumulation)
    assert (reason is None) if words is None else words in reason, reason


def test_with_gradient_accumulation_the_first_round_weighs_every_batch_still_to_train():
    rows = [timed(name, ms) for name, ms in zip(("no", "bf16", "fp16"), (10.0, 9.8, 9.9))]
    assert "0.3 s over the remaining 1500 steps" in stop_after_first_round(rows, 1.0 * MS, 1500)
    # 1500 optimizer steps of 8 batches: 2.4 s saved, more than the 0.4 s the other rounds cost
    assert stop_after_first_round(rows, 1.0 * MS, 1500, accumulation=8) is None
    assert ("0.1 s over the remaining 150 optimizer steps (600 batches with gradient_accumulation_steps=4), not "
            "more than") in stop_after_first_round(rows, 20.0 * MS, 150, accumulation=4)


@pytest.mark.parametrize("first_round, restore_ms, remaining, words", [
    ((10.0, 12.0, 11.0), 0.0, 10**6, "the best, fp16, was -10% faster"),     # float32 fastest: stop
    ((10.0, 9.8, 9.9), 1.0, 1500, "the best, bf16, was 2% faster: 0.3 s over the remaining 1500 steps, not more "
                                  "than the 0.4 s the other 3 rounds would cost"),
    ((10.0, 9.8, 9.9), 1.0, 10**5, None),                                     # the same gain over a long run: go on
    ((10.0, 6.0, 7.0), 1.0, 1080, None)])                                     # a large gain: go on
def test_the_trial_goes_on_only_where_the_first_round_says_it_pays(first_round, restore_ms, remaining, words):
    rows = [timed(name, ms) for name, ms in zip(("no", "bf16", "fp16"), first_round)]
    reason = stop_after_first_round(rows, restore_ms * MS, remaining)
    assert (reason is None) if words is None else words in reason, reason


def test_the_first_round_stops_the_trial_when_no_candidate_is_left():
    rows = [timed("no", 10.0), Trial("bf16", error="no kernel"), timed("fp16", 1.0, skipped=(0,))]
    assert "no mixed precision is left" in stop_after_first_round(rows, 0.0, 10**6)


# -- the whole measurement, simulated: 20 repetitions of each case ------------------------------------------------
class FakeClock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms * MS


class SimulatedRun:
    """Steps that cost ``ms[precision]`` with per-step noise (5%, and 1 step in 20 slowed by 30%). fp16 has a grad
    scaler: fresh at 65536, it skips (and halves) while above ``overflow_above``, and skips 1 step in
    ``skip_every`` at random; a skipped step costs only ``skipped_ms`` (no optimizer update)."""

    def __init__(self, seed: int, ms: dict[str, float], skipped_ms: float = 1.0, overflow_above: float = 2**9,
                 skip_every: int = 0):
        self.rng, self.ms, self.skipped_ms = numpy.random.default_rng(seed), ms, skipped_ms
        self.overflow_above, self.skip_every, self.clock = overflow_above, skip_every, FakeClock()
        self.scales: dict[str, float] = {}
        self.timed_skips = 0

    def start(self, precision: str):
        def step():
            applied = True
            if precision == "fp16":
                scale = self.scales.setdefault(precision, 65536.0)
                now_and_then = self.skip_every and self.rng.random() < 1 / self.skip_every
                applied = scale <= self.overflow_above and not now_and_then
                self.scales[precision] = scale if applied else scale / 2
            cost = self.ms[precision] if applied else self.skipped_ms
            cost *= 1 + self.rng.normal(0, 0.05) + 0.3 * (self.rng.random() < 0.05)
            self.clock.advance(cost)
            self.timed_skips += not applied
            return torch.tensor(2.3), applied
        return step

    def measure(self):
        snapshot = types.SimpleNamespace(restore=lambda: None)
        trials, stopped = run_trials(("no", "bf16", "fp16"), self.start, snapshot, lambda: None, lambda e: False,
                                     lambda: None, remaining_steps=10**6, clock=self.clock.perf_counter)
        return decide(trials, stopped), trials


@pytest.mark.parametrize("case, ms, options, chosen", [
    ("skipped fp16 steps, each update as costly", {"no": 21.0, "bf16": 21.0, "fp16": 21.0}, {}, "no"),
    ("skipped fp16 steps now and then", {"no": 21.0, "bf16": 21.0, "fp16": 21.0}, {"skip_every": 6}, "no"),
    ("equal costs with noise", {"no": 10.0, "bf16": 10.0, "fp16": 10.0}, {"skipped_ms": 10.0}, "no"),
    ("a clear winner", {"no": 10.0, "bf16": 10.5, "fp16": 7.0}, {}, "fp16")])
def test_the_trial_picks_only_a_clear_winner_in_20_of_20_repetitions(case, ms, options, chosen):
    decisions, left_out = [], 0
    for seed in range(20):
        run = SimulatedRun(seed, ms, **options)
        decision, trials = run.measure()
        decisions.append(decision.precision)
        if decision.precision != "no":  # chosen on every round; float32 may also stop after the first
            assert [len(trial.windows) for trial in trials] == [ROUNDS] * 3, (case, seed, decision.reason)
        assert run.timed_skips >= 7  # the fresh scaler's overflows (65536 down to 512): cheap steps were there to time
        left_out += sum(not window.usable for window in trials[2].windows)
    assert decisions == [chosen] * 20, (case, decisions)
    assert (left_out > 0) == ("now and then" in case)  # skips inside timed windows: those windows were left out


def test_the_rates_the_docs_state_over_1000_simulated_trials():
    # precision_trial's docstring and docs/devices.md state these rates (seeds 0-999: 4 and 1000 of 1000)
    def mixed_picks(ms: dict[str, float]) -> int:
        return sum(SimulatedRun(seed, ms, skipped_ms=ms["fp16"]).measure()[0].precision != "no" for seed in range(1000))

    assert mixed_picks({"no": 10.0, "bf16": 10.0, "fp16": 10.0}) <= 10  # equal costs: at most 1% pick one
    assert mixed_picks({"no": 10.0, "bf16": 10.0, "fp16": 7.5}) >= 995  # 25% faster: found at least 99.5%


def test_the_rounds_are_interleaved_in_a_rotating_order():
    order: list[str] = []

    def start(precision):
        order.append(precision)
        return lambda: (torch.tensor(1.0), True)
    run_trials(("no", "bf16", "fp16"), start, types.SimpleNamespace(restore=lambda: None), lambda: None,
               lambda e: False, lambda: None)
    assert order == ["no", "bf16", "fp16", "bf16", "fp16", "no", "fp16", "no", "bf16", "no", "bf16", "fp16"]


# -- the plan: which candidates the device facts allow -------------------------------------------------------
@pytest.mark.parametrize("host, candidates", [
    (APPLE_M, ("bf16", "fp16")),
    (APPLE_M.replace(macos_version=(13, 6)), ("fp16",)),  # bf16 needs macOS 14
    (APPLE_M.replace(torch_version=(2, 7, 1), torch_version_str="2.7.1"), ("bf16",)),  # GradScaler("mps"): 2.8
    (LINUX_CPU, ()), (CUDA_BOX, ())])
def test_auto_leaves_the_candidates_the_device_allows(host, candidates):
    plan = make_plan(RunOptions(), host)
    assert plan.precision_candidates == candidates
    if candidates:
        assert plan.precision == "no" and "until measured" in plan.precision_reason
    assert make_plan(RunOptions(mixed_precision="no"), host).precision_candidates == ()
    assert make_plan(RunOptions(mixed_precision="fp16"), APPLE_M).precision_candidates == ()
