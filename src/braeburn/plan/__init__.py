"""The run plan: options + host facts -> device, precision, compile and strategy (``rules.make_plan``), and the
policies that carry it out (``precision``, ``precision_trial``, ``compile_policy``, ``compile_gains``), with the
environment variables, config files and option spellings that fill and name the options (``envvars``,
``config_files``, ``option_spelling``). Names load on first use, so a leaf module here imports nothing else."""

from __future__ import annotations

import importlib

_WHERE = {name: "rules" for name in ("COMPILE_CHOICES", "STRATEGIES", "OptionError", "Plan", "PlanError",
                                      "RunOptions", "make_plan")}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'braeburn.plan' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
