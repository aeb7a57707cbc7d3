"""The suite's two tiers: `python -m pytest` with no path runs the fast tier; the tests marked ``slow`` are the rest.

A test is marked ``slow`` (``@pytest.mark.slow``, or ``pytestmark = pytest.mark.slow`` for a whole module) where
it takes seconds of its own: several processes (gloo jobs, torchrun, ``braeburn launch``), signals sent to runs,
scripts run as subprocesses, full example runs. Which tests those are was decided from measured durations
(``--durations=0``), and the README states the fast tier's time.

- No path and no ``-m`` (the README's command, ``python -m pytest -n 2``): the slow tests are deselected, and the
  summary says how to run them.
- ``-m EXPR`` decides by itself: ``-m slow`` is the rest (CI runs it after the fast tier, `.ci/run`),
  ``-m "slow or not slow"`` everything.
- A path (``tests``, a file, a node id): everything under it runs, slow tests included.

The markers only select: each test passes in either tier, on any machine.
"""

from __future__ import annotations

import pytest

SLOW = "slow"
REST_COMMAND = "python -m pytest -n 2 -m slow"


def fast_tier_only(config: pytest.Config) -> bool:
    """True where this run is the fast tier: no path was given (pytest took its testpaths) and no ``-m``."""
    return not config.option.markexpr and config.args_source == pytest.Config.ArgsSource.TESTPATHS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not fast_tier_only(config):
        return
    slow = [item for item in items if item.get_closest_marker(SLOW)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker(SLOW)]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if fast_tier_only(config):
        terminalreporter.write_line(f"the fast tier ran: the tests marked {SLOW} were left out; "
                                    f"`{REST_COMMAND}` runs them (CI runs both: .ci/run)")
