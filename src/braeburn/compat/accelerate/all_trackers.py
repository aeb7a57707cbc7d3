"""``log_with="all"`` as Accelerate means it: every one of its trackers installed here. Where one of them is a tracker
braeburn does not have (aim, comet_ml, clearml, dvclive, swanlab, trackio; or TensorBoard through tensorboardX alone),
braeburn's "all" would start fewer trackers than Accelerate's, a run that silently differs: refused, naming them and
the way out. The list is the installed Accelerate's own (``accelerate.tracking.get_available_trackers``)."""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

from ...accelerator import trackers as tracking


SECOND_INIT = ("a second call under Accelerate starts a second set beside the first, restarts the first and logs every "
               "value, and this config, into both runs; call init_trackers once per Accelerator (for another run, "
               "end_training() and a new Accelerator)")


def accelerates_all() -> list[str]:
    """The trackers Accelerate's ``log_with="all"`` starts here; none where Accelerate is not installed."""
    if importlib.util.find_spec("accelerate") is None:
        return []
    from accelerate import tracking as accelerate_tracking

    return [str(getattr(kind, "value", kind)) for kind in accelerate_tracking.get_available_trackers()]


def resolve_log_with(log_with: Any) -> list[Any]:
    """braeburn's trackers for ``log_with``, or a ValueError for an "all" that would start fewer than Accelerate's;
    Accelerate's warning when none is left."""
    chosen = tracking.resolve_log_with(log_with)
    items = log_with if isinstance(log_with, (list, tuple)) else [log_with]
    if any(isinstance(item, str) and str(getattr(item, "value", item)).lower() == "all" for item in items):
        lacking = tracking.beyond_braeburn(accelerates_all())
        if lacking:
            named = [n for n in chosen if isinstance(n, str)]
            raise ValueError(
                f"log_with='all': Accelerate's 'all' starts every tracker installed here, {', '.join(lacking)} among "
                f"them, which braeburn {tracking.why_lacking(lacking)}; name the trackers braeburn should start "
                f"instead (log_with={named!r}), and pass an object of a GeneralTracker subclass of yours in log_with "
                f"for {', '.join(lacking)}")
    if not chosen and log_with is not None:  # Accelerate's own warning, word for word
        warnings.warn(f"`log_with={log_with}` was passed but no supported trackers are currently installed.")
    return chosen


__all__ = ["SECOND_INIT", "accelerates_all", "resolve_log_with"]
