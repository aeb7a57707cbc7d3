"""Elastic restarts: how a worker that torchrun restarted knows it should resume.

``braeburn launch --max-restarts N`` runs the job under ``torch.distributed.run``. When a worker
dies, torchrun stops the others and starts the whole group again, with
``TORCHELASTIC_RESTART_COUNT`` raised by one. A restarted worker (count > 0) resumes from the
latest complete checkpoint in its output folder, so the job ends with the result an uninterrupted
run would have had; if no checkpoint was written yet it starts again from the beginning.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

RESTART_COUNT_VAR = "TORCHELASTIC_RESTART_COUNT"


def restart_count(env: Mapping[str, str] | None = None) -> int:
    """How many times torchrun has restarted this job (0 outside torchrun or on the first attempt)."""
    text = (os.environ if env is None else env).get(RESTART_COUNT_VAR, "").strip()
    return int(text) if text.isdigit() else 0


def is_restarted(env: Mapping[str, str] | None = None) -> bool:
    return restart_count(env) > 0


def resume_request(latest: Path | None, env: Mapping[str, str] | None = None) -> str | None:
    """"latest" for a restarted worker when a checkpoint exists; None otherwise (start as asked)."""
    return "latest" if is_restarted(env) and latest is not None else None


__all__ = ["RESTART_COUNT_VAR", "restart_count", "is_restarted", "resume_request"]
