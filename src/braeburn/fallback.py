"""The MPS CPU fallback: which ops ran on the CPU, and whether the fallback could be on at all.

With ``PYTORCH_ENABLE_MPS_FALLBACK=1`` PyTorch warns once per op that MPS lacks:
"The operator 'aten::X' is not currently supported on the MPS backend and will fall back to run on
the CPU. This may have performance implications." :class:`FallbackRecorder` counts those warnings
without swallowing them or any other warning. The variable is read only when libtorch loads, so
:func:`early_env_advice` says when it came too late. Imports no torch.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Mapping

from .devices.host import HostFacts

_FALLBACK_TEXT = re.compile(r"The operator '([^']+)' is not currently supported on the MPS backend "
                            r"and will fall back to run on the CPU")


def parse_fallback_warning(text: str) -> str | None:
    """The op name ('aten::X') in PyTorch's MPS fallback warning, or None for any other text."""
    match = _FALLBACK_TEXT.search(str(text))
    return match.group(1) if match else None


class FallbackRecorder:
    """Counts MPS fallback warnings while active; every warning still reaches the previous handler.

    Use as a context manager, or :meth:`start` / :meth:`stop`. It wraps ``warnings.showwarning`` (the
    hook Python calls for every warning the filters let through), so pytest's and the user's own
    warning capture keep working.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._previous = None
        self._hook = None

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
            if self._hook is not None:  # stopped while a later hook still chains through this one
                self.record(message)
            previous(message, category, filename, lineno, file, line)

        self._previous, self._hook = previous, showwarning
        warnings.showwarning = showwarning
        return self

    def stop(self) -> None:
        if self._hook is None:
            return
        if warnings.showwarning is self._hook:  # someone hooked after us: leave their chain intact
            warnings.showwarning = self._previous
        self._hook = None

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


__all__ = ["parse_fallback_warning", "FallbackRecorder", "early_env_advice"]
