"""The MPS CPU fallback: which ops ran on the CPU, how often, and whether the fallback could be on at all.

With ``PYTORCH_ENABLE_MPS_FALLBACK=1`` PyTorch warns when an op MPS lacks runs on the CPU:
"The operator 'aten::X' is not currently supported on the MPS backend and will fall back to run on
the CPU. This may have performance implications." It does so through ``TORCH_WARN_ONCE`` at one call
site shared by every op (``aten/src/ATen/mps/MPSFallback.mm``): once per process in total, unless
``torch.set_warn_always(True)``. :class:`FallbackRecorder` (``count_every_call=True``) turns that on
while it records, and lets every fallback warning through Python's filters, so it counts every op and
every call; the user still sees each op's warning once. Other warnings are untouched. The variable is
read only when libtorch loads, so :func:`early_env_advice` says when it came too late or holds a value
libtorch cannot parse. Imports no torch at module level.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Mapping

from .._early import set_by_braeburn
from .host import HostFacts

_FALLBACK_TEXT = re.compile(r"The operator '([^']+)' is not currently supported on the MPS backend "
                            r"and will fall back to run on the CPU")


def parse_fallback_warning(text: str) -> str | None:
    """The op name ('aten::X') in PyTorch's MPS fallback warning, or None for any other text."""
    match = _FALLBACK_TEXT.search(str(text))
    return match.group(1) if match else None


_warn_always_users = 0
_warn_always_before = False


def _warn_always(change: int) -> None:
    """torch.set_warn_always(True) while any recorder counts every call; the user's setting after."""
    global _warn_always_users, _warn_always_before
    import torch

    if change > 0 and _warn_always_users == 0:
        _warn_always_before = torch.is_warn_always_enabled()
    _warn_always_users = max(0, _warn_always_users + change)
    torch.set_warn_always(True if _warn_always_users else _warn_always_before)


class FallbackRecorder:
    """Counts MPS fallback warnings while active; other warnings reach the previous handler untouched.

    Use as a context manager, or :meth:`start` / :meth:`stop`. It wraps ``warnings.showwarning`` (the
    hook Python calls for every warning the filters let through), so pytest's and the user's own
    warning capture keep working. With ``count_every_call`` it also makes torch warn at every fallback
    (``torch.set_warn_always(True)``) and lets those warnings past Python's once-per-location filter,
    showing each op's warning once and counting the rest; both are restored by :meth:`stop`.
    """

    def __init__(self, count_every_call: bool = False) -> None:
        self.counts: Counter[str] = Counter()
        self.count_every_call = count_every_call
        self._previous = None
        self._hook = None
        self._filter = None

    def record(self, message: object) -> str | None:
        op = parse_fallback_warning(str(message))
        if op is not None:
            self.counts[op] += 1
        return op

    def start(self) -> "FallbackRecorder":
        if self._hook is not None:
            return self
        previous = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            op = self.record(message) if self._hook is not None else None  # None: stopped, still chained
            if op is not None and self.count_every_call and self.counts[op] > 1:
                return  # shown once already; the rest are only counted
            previous(message, category, filename, lineno, file, line)

        self._previous, self._hook = previous, showwarning
        warnings.showwarning = showwarning
        if self.count_every_call:
            self._count_every_call()
        return self

    def _count_every_call(self) -> None:
        _warn_always(+1)
        warnings.filterwarnings("always", message=_FALLBACK_TEXT.pattern)
        self._filter = warnings.filters[0]

    def stop(self) -> None:
        if self._hook is None:
            return
        if warnings.showwarning is self._hook:  # someone hooked after us: leave their chain intact
            warnings.showwarning = self._previous
        self._hook = None
        if self._filter is not None:
            # Only fallback warnings matched it and "always" records nothing in the once-registries,
            # so removing it leaves every other warning's state as it would have been.
            if self._filter in warnings.filters:
                warnings.filters.remove(self._filter)
            self._filter = None
        if self.count_every_call:
            _warn_always(-1)

    @property
    def active(self) -> bool:
        return self._hook is not None

    def report(self) -> list[tuple[str, int]]:
        """(op, count) pairs, most frequent first."""
        return self.counts.most_common()

    def __enter__(self) -> "FallbackRecorder":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def early_env_advice(plan_env: Mapping[str, str], host: HostFacts, environ: Mapping[str, str]) -> str | None:
    """Advice when variables the device needs before torch loads were missing when it loaded.

    ``plan_env`` is what the plan wants set (the device kind's ``env_before_torch``). When torch loaded
    before braeburn, the environment braeburn saw at import (``host.env``) is what torch saw; otherwise
    torch loaded later and saw ``environ``. A value the user set, whatever it is, is left alone.
    """
    seen = host.env if host.torch_loaded_before_braeburn else environ
    missing = {name: value for name, value in plan_env.items() if name not in seen}
    if not missing:
        return None
    exports = " ".join(f"{name}={value}" for name, value in missing.items())
    when = ("torch was imported before braeburn" if host.torch_loaded_before_braeburn
            else "torch loaded without them")
    return (f"{', '.join(missing)} must be set before torch loads, but {when}, so setting them now would do "
            "nothing (without the CPU fallback, ops the device lacks fail instead of running on the CPU). "
            f"Start the script with `braeburn launch script.py`, or `export {exports}` before starting Python.")


def early_env_conflicts(plan_env: Mapping[str, str], host: HostFacts, environ: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(variable, wanted value, why and the fix) where an explicit option asks for another value than the
    default braeburn's import set before torch loaded: libtorch read the default, so the option would be
    silently ignored."""
    if host.torch_loaded_before_braeburn:  # braeburn's import set nothing then
        return []
    defaults = set_by_braeburn(environ)
    return [(name, value, f"`import braeburn` set its default {name}={defaults[name]} before torch loaded, and "
             "torch reads it only when it loads, so this option cannot take effect in this process. Export "
             f"{name}={value} before starting Python, or pass the option to `braeburn launch`, which sets it "
             "before the script starts") for name, value in plan_env.items()
            if name in defaults and defaults[name] != value]


__all__ = ["parse_fallback_warning", "FallbackRecorder", "early_env_advice", "early_env_conflicts"]
