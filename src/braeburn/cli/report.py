"""The facts `braeburn doctor` shows, as plain data (rendered as text or JSON by the CLI)."""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from dataclasses import replace

from .. import __version__
from .._early import set_by_braeburn
from ..data.loader import dataloader_workers_default
from ..devices.base import PRECISIONS
from ..devices.host import HostFacts, python_arch_note, version_text
from ..devices.registry import KINDS
from ..plan.envvars import BRAEBURN_VARIABLES
from ..plan.rules import PlanError, RunOptions, make_plan

EXIT_OK = 0  # the chosen device is usable and nothing needs fixing
EXIT_REFUSED = 1  # what was asked (--accelerator, BRAEBURN_DEVICE, --mixed-precision...) cannot work here
EXIT_FIXABLE = 3  # training works, but an accelerator here is unusable for a reason the user can fix


def _device_entry(kind, host: HostFacts) -> dict:
    availability = kind.availability(host)
    precisions = {}
    for dtype in PRECISIONS[1:]:
        support = kind.precision_support(dtype, host)
        usable = support.supported and (not support.needs_grad_scaler or support.grad_scaler_supported)
        precisions[dtype] = {"supported": usable, "grad_scaler": support.needs_grad_scaler, "reason": support.reason}
    return {"name": kind.name, "usable": availability.usable, "reason": availability.reason,
            "fix": availability.fix, "fixable": availability.fixable, "count": kind.device_count(host),
            "fails_although_reported": availability.skipped_with_warning,
            "process_group_backend": kind.process_group_backend, "float64": kind.supports_float64,
            "mixed_precision": precisions}


def _environment(host: HostFacts, current_env: Mapping[str, str]) -> list[dict]:
    rows = []
    defaults = set_by_braeburn(current_env)
    variables = [*BRAEBURN_VARIABLES, *(v for kind in KINDS for v in kind.environment_variables)]
    for name, purpose, read_at_load in variables:
        at_load = host.env.get(name)
        known = not host.torch_loaded_before_braeburn
        value = current_env.get(name)
        set_by = None if value is None else "braeburn (its default)" if name in defaults else "you"
        rows.append({"name": name, "value": value, "purpose": purpose, "set_by": set_by,
                     "read_when_torch_loads": read_at_load,
                     "set_before_torch_loaded": (at_load is not None) if known else None})
    return rows


def _selection(options: RunOptions, host: HostFacts, current_env: Mapping[str, str]) -> dict:
    try:
        plan = make_plan(options, host)
    except PlanError as error:
        return {"ok": False, "errors": [str(e) for e in error.errors]}
    problems = plan.device.env_problems(current_env, host.system)  # what torch reads would stop it
    if problems:
        return {"ok": False, "errors": problems}
    return {"ok": True, "device": plan.device.name, "device_reason": plan.device_reason, "devices": plan.devices,
            "precision": plan.precision, "grad_scaler": plan.grad_scaler, "precision_reason": plan.precision_reason,
            "compile": plan.compile, "compile_auto": plan.compile_auto, "compile_reason": plan.compile_reason, "env_for_child": plan.env,
            "notes": list(plan.notes)}


def build_report(host: HostFacts, options: RunOptions, current_env: Mapping[str, str], torch_info: dict) -> dict:
    """Everything doctor prints; ``exit_code`` follows the EXIT_* codes above."""
    devices = [_device_entry(kind, host) for kind in KINDS]
    selection = _selection(options, host, current_env)
    problems = [f"{d['name']}: {d['reason']}. Fix: {d['fix']}" for d in devices if d["fixable"] and not d["usable"]]
    if not selection["ok"]:
        code = EXIT_REFUSED
    else:
        code = EXIT_FIXABLE if problems else EXIT_OK
    os_name = f"macOS {version_text(host.macos_version)}" if host.system == "Darwin" else f"{host.system} {platform.release()}"
    return {
        "braeburn": __version__,
        "python": {"version": host.python_version, "arch": python_arch_note(host), "executable": sys.executable},
        "torch": {"version": host.torch_version_str, "cuda": host.torch_cuda_version, "mps_built": host.mps_built,
                  **torch_info},
        "os": {"name": os_name, "machine": host.machine, "apple_silicon": host.apple_silicon, "rosetta": host.rosetta},
        "devices": devices,
        "selected": selection,
        "environment": _environment(host, current_env),
        "dataloader": dict(zip(("num_workers", "reason"), dataloader_workers_default(host))),
        "torch_loaded_before_braeburn": host.torch_loaded_before_braeburn,
        "problems": problems,
        "exit_code": code,
    }


def with_env(host: HostFacts, env: Mapping[str, str]) -> HostFacts:
    return replace(host, env=dict(env))
