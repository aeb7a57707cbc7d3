"""The summary's time line: steps, compiling, checkpoints and evaluation add up to the training time."""

from __future__ import annotations

import re

import pytest

from braeburn.trainer.phase_clock import CHECKPOINT, EVALUATION, PhaseClock


def _seconds(line: str) -> tuple[float, list[float]]:
    total, parts = line.split("=", 1)
    return float(re.findall(r"[\d.]+", total)[0]), [float(part.split(" s")[0]) for part in parts.split(" + ")]


def test_the_steps_get_what_the_measured_phases_leave():
    clock = PhaseClock()
    clock.seconds.update({CHECKPOINT: 12.0, EVALUATION: 1.5})
    clock.counts.update({CHECKPOINT: 4, EVALUATION: 2})
    line = clock.line(179.5, 5000, 34.2)
    assert line.startswith("  time       179.5 s = 131.8 s in 5000 steps (26.4 ms/step")
    assert "34.2 s compiling + 12.0 s checkpoints on the training thread (4x) + 1.5 s evaluation (2x)" in line
    assert "waiting" not in line  # a phase that never happened is not named
    total, parts = _seconds(line)
    assert sum(parts) == pytest.approx(total)


@pytest.mark.usefixtures("no_launcher_env", "one_thread")
def test_a_real_runs_summary_adds_up(tmp_path, capsys):
    from tests.plan.test_compile_policy import train_tiny

    train_tiny(tmp_path)  # 27 steps, an evaluation and a checkpoint each epoch
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  time "))
    assert "in 27 steps" in line and "evaluation (3x)" in line and "checkpoints on the training thread" in line
    total, parts = _seconds(line)
    assert sum(parts) == pytest.approx(total, abs=0.3)  # each part is rounded to 0.1 s
