"""The run plan: options + host facts -> device, precision, compile and strategy (``rules.make_plan``), and the
policies that carry it out (``precision``, ``precision_trial``, ``compile_policy``, ``compile_gains``), with the
environment variables and config files that fill the options (``envvars``, ``config_files``). No module here
imports torch at import time except the policies that run it."""

from .rules import (COMPILE_CHOICES, STRATEGIES, OptionError, Plan, PlanError, RunOptions, make_plan)

__all__ = ["COMPILE_CHOICES", "STRATEGIES", "OptionError", "Plan", "PlanError", "RunOptions", "make_plan"]
