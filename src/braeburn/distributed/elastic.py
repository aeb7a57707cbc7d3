"""Elastic restarts: how a worker that torchrun restarted knows it should resume.

``braeburn launch --max-restarts N`` runs the job under ``torch.distributed.run``. When a worker
dies, torchrun stops the others and starts the whole group again, with
``TORCHELASTIC_RESTART_COUNT`` raised by one. A restarted worker (count > 0) resumes from the
latest complete checkpoint in its output folder, so the job ends with the result an uninterrupted
run would have had; if no checkpoint was written yet it starts again from the beginning.

The count is believed only beside the other variables torchrun's agent gives every worker it starts
(``TORCHELASTIC_RUN_ID``, and ``TORCHELASTIC_MAX_RESTARTS`` no smaller than the count). A count inherited
without them (a shell left over from an earlier job, a copied environment) is ignored, and said so once:
it would otherwise resume, or overwrite the output folder, without the user asking.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

RESTART_COUNT_VAR = "TORCHELASTIC_RESTART_COUNT"
RUN_ID_VAR, MAX_RESTARTS_VAR = "TORCHELASTIC_RUN_ID", "TORCHELASTIC_MAX_RESTARTS"
_said_ignored: set[str] = set()


def restart_count(env: Mapping[str, str] | None = None) -> int:
    """How many times torchrun has restarted this job (0 outside torchrun, on the first attempt, or when
    the count was inherited without a torchrun agent)."""
    env = os.environ if env is None else env
    text = env.get(RESTART_COUNT_VAR, "").strip()
    count = int(text) if text.isdigit() and len(text) < 10 else 0
    if count and not _set_by_agent(env, count):
        _say_ignored(env, text)
        return 0
    return count


def _set_by_agent(env: Mapping[str, str], count: int) -> bool:
    most = env.get(MAX_RESTARTS_VAR, "").strip()
    return bool(env.get(RUN_ID_VAR, "").strip()) and most.isdigit() and count <= int(most)


def _say_ignored(env: Mapping[str, str], text: str) -> None:
    if text in _said_ignored:
        return
    _said_ignored.add(text)
    found = ", ".join(f"{name}={env[name]!r}" for name in (RUN_ID_VAR, MAX_RESTARTS_VAR) if name in env) or "neither"
    print(f"braeburn: warning: {RESTART_COUNT_VAR}={text} is set, but not by a torchrun agent ({RUN_ID_VAR} and a "
          f"{MAX_RESTARTS_VAR} of at least {text} come with it; found {found}): it was inherited, and is ignored. This "
          f"run starts as configured, not as a restarted worker. Unset {RESTART_COUNT_VAR} to silence this; use "
          "`braeburn launch --max-restarts N` for restarts.", file=sys.stderr, flush=True)


def is_restarted(env: Mapping[str, str] | None = None) -> bool:
    return restart_count(env) > 0


def resume_request(latest: Path | None, env: Mapping[str, str] | None = None) -> str | None:
    """"latest" for a restarted worker when a checkpoint exists; None otherwise (start as asked)."""
    return "latest" if is_restarted(env) and latest is not None else None


__all__ = ["RESTART_COUNT_VAR", "restart_count", "is_restarted", "resume_request"]
