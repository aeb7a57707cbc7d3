"""`braeburn config`: set up `braeburn launch` once.

    braeburn config              a questionnaire that asks only what matters on this machine
    braeburn config --default    write a sensible file with no questions
    braeburn config show         the effective settings, where each came from, and the plan they make

Questions come from device capabilities, never from device names: the precision choices are what
the chosen kind supports here, the pre-torch environment questions appear only for a kind that has
such variables, and processes and machines only where a kind has several devices and a
process-group backend.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.prompt import Confirm, Prompt
from rich.table import Table

from ..devices.base import PRECISIONS, DeviceKind
from ..devices.host import HostFacts, current_host
from ..devices.registry import accelerator_kinds, fallback_kind
from .launch_config import (SETTING_NAMES, ConfigError, Invalid, LaunchSettings, ResolvedSettings,
                             add_settings_arguments, default_config_path, flag_values, parse_setting,
                             resolve_settings, write_config_file)
from ..plan.rules import STRATEGIES, make_plan
from .launch import plan_launch, resolve_multi_gpu, run_options

# torch's own defaults keep the low watermark at 1.4/1.7 of the high one; a lower high limit with the
# default low one makes torch refuse to start the allocator, so both move together.
LOW_TO_HIGH = 1.4 / 1.7


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-file", "--config_file", dest="config_file", type=Path, default=None,
                        metavar="PATH", help=f"where to write (default: {default_config_path()})")
    parser.add_argument("--default", action="store_true", help="write a sensible file without asking anything")
    parser.add_argument("--force", action="store_true", help="with --default: replace an existing file")
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION")
    show = actions.add_parser("show", help="print the effective settings and where each came from",
                              description="The settings `braeburn launch` would use (the same flags apply), "
                              "where each came from, and the plan they make on this machine.")
    add_settings_arguments(show)
    show.add_argument("--json", action="store_true", help="print as JSON")
    show.set_defaults(func=show_settings)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = args.config_file or default_config_path()
    console = Console(highlight=False)
    if args.default:
        if path.exists() and not args.force:
            raise FileExistsError(f"{path} already exists and --default does not replace it; pass --force to "
                                  "overwrite it, or --config-file PATH to write elsewhere")
        settings = LaunchSettings()
    else:
        console.print(f"[bold]braeburn config[/]: a few questions about this machine; the answers go to {path}")
        asker = Asker(console)
        if path.exists() and not asker.confirm(f"{path} exists. Replace it?", default=False):
            console.print(f"Kept {path} as it is; nothing written (--config-file PATH writes elsewhere).")
            return 0
        settings = ask_questions(current_host(), asker)
    write_config_file(settings, path)
    console.print(f"Wrote {path}\nCheck it with `braeburn config show`; use it with `braeburn launch script.py`.")
    return 0


# -- the questionnaire ------------------------------------------------------------------------------

class Asker:
    """rich prompts read through input(), so answers can be typed or piped; at the end of input every question
    left takes the default it offers (as pressing Enter would), and says so."""

    def __init__(self, console: Console):
        self.console = console
        self.ended = False

    def _guard(self, ask, question: str, **kwargs) -> Any:
        if not self.ended:
            try:
                return ask(question, console=self.console, **kwargs)
            except EOFError:
                self.ended = True
                self.console.print("\n(end of input: the questions left take the defaults offered)")
        default = kwargs.get("default")
        shown = ("yes" if default else "no") if isinstance(default, bool) else (default if default != "" else "(empty)")
        self.console.print(f"{question}: {shown} (default)")
        return default

    def confirm(self, question: str, default: bool) -> bool:
        return self._guard(Confirm.ask, question, default=default)

    def choose(self, question: str, choices: list[str], default: str) -> str:
        return self._guard(Prompt.ask, question, choices=choices, default=default)

    def setting(self, question: str, name: str, default: Any) -> Any:
        """Ask until the answer passes the setting's own parser (the same one that checks files)."""
        while True:
            answer = self._guard(Prompt.ask, question, default="" if default is None else str(default))
            try:
                return parse_setting(name, answer)
            except Invalid as bad:
                if self.ended:
                    raise EOFError(f"standard input ended at {question!r}, whose default {answer!r} {bad.why}; "
                                   "answer it, or write a file without questions: braeburn config --default") from None
                self.console.print(f"[red]{answer!r} {bad.why}.[/] {bad.fix[:1].upper()}{bad.fix[1:]}.")


def _usable_precisions(kind: DeviceKind, host: HostFacts) -> list[str]:
    usable = []
    for dtype in PRECISIONS[1:]:
        support = kind.precision_support(dtype, host)
        if support.supported and (not support.needs_grad_scaler or support.grad_scaler_supported):
            usable.append(dtype)
    return usable


def _ask_device(host: HostFacts, asker: Asker) -> tuple[dict, DeviceKind]:
    usable = [kind for kind in accelerator_kinds() if kind.availability(host).usable]
    if not usable:
        asker.console.print("No accelerator is usable here, so training runs on the CPU (`braeburn doctor` says why).")
        return {"cpu": False}, fallback_kind()
    kind = usable[0]
    use = asker.confirm(f"Train on {kind.name} ({kind.describe(host)})? n: CPU only", default=True)
    return {"cpu": not use}, (kind if use else fallback_kind())


def _ask_precision(kind: DeviceKind, host: HostFacts, cpu: bool, asker: Asker) -> dict:
    auto = make_plan(run_options(LaunchSettings(cpu=cpu), None), host).precision_reason
    choices = ["auto", "no", *_usable_precisions(kind, host)]
    asker.console.print(f"Mixed precision on {kind.name}: {', '.join(choices)} (here {auto})")
    return {"mixed_precision": asker.choose("Mixed precision", choices, default="auto")}


def _ask_pre_torch_environment(kind: DeviceKind, asker: Asker) -> dict:
    if not kind.env_before_torch():  # this kind reads nothing from the environment at load time
        return {}
    answers = {"mps_fallback": asker.confirm(f"Run operators {kind.name} lacks on the CPU instead of failing "
                                             "(slower for those operators, but the script runs)?", default=True)}
    high = asker.setting(f"{kind.name} memory limit as a share of the recommended maximum, 0 to 2.0 (e.g. "
                         "1.0; 0 lifts it; empty keeps torch's default 1.7)", "mps_high_watermark_ratio", None)
    if high is not None:
        answers["mps_high_watermark_ratio"] = high
        if high > 0:
            answers["mps_low_watermark_ratio"] = round(high * LOW_TO_HIGH, 3)
    return answers


def _ask_processes(kind: DeviceKind, host: HostFacts, asker: Asker) -> dict:
    count = kind.device_count(host)
    if kind.process_group_backend is None or count < 2:
        return {}
    answers: dict[str, Any] = {"num_machines": asker.setting("How many machines take part?", "num_machines", 1)}
    machines = answers["num_machines"]
    if machines > 1:
        answers["machine_rank"] = asker.setting(f"This machine's rank (0 to {machines - 1}; 0 hosts the "
                                                "rendezvous)", "machine_rank", 0)
        answers["main_process_ip"] = asker.setting("Address of machine 0", "main_process_ip", None)
        answers["main_process_port"] = asker.setting("Rendezvous port (the same on every machine)",
                                                     "main_process_port", 29500)
    answers["num_processes"] = asker.setting(f"How many processes in total, on all machines ({count} "
                                             f"{kind.name} devices here)?", "num_processes", count * machines)
    if answers["num_processes"] > 1:
        answers["strategy"] = asker.choose("Distributed strategy (auto is ddp; fsdp shards a model too big "
                                           "for one device)", list(STRATEGIES), default="auto")
    return answers


def _ask_compile(kind: DeviceKind, host: HostFacts, asker: Asker) -> dict:
    on, why = kind.compile_by_default(host)
    asker.console.print(f"torch.compile: auto here means {'on' if on else 'off'} ({why})")
    answer = asker.choose("torch.compile", ["auto", "true", "false", "regional"], default="auto")
    return {"compile": answer if answer in ("auto", "regional") else answer == "true"}


def ask_questions(host: HostFacts, asker: Asker) -> LaunchSettings:
    """Only the questions that matter on ``host``; the answers, checked against ``host``."""
    values, kind = _ask_device(host, asker)
    values.update(_ask_precision(kind, host, values["cpu"], asker))
    values.update(_ask_pre_torch_environment(kind, asker))
    values.update(_ask_processes(kind, host, asker))
    values.update(_ask_compile(kind, host, asker))
    settings = LaunchSettings(**values)
    resolved = ResolvedSettings(settings, {}, None, [])
    plan_launch(resolved, host, env={})  # the answers must make a plan here; raises ConfigError if not
    return settings


# -- show -------------------------------------------------------------------------------------------

def _plan_summary(resolved: ResolvedSettings, host: HostFacts) -> dict:
    try:
        plan = plan_launch(resolve_multi_gpu(resolved, host), host)
    except ConfigError as error:
        return {"ok": False, "problems": [str(p) for p in error.problems] + error.extra}
    return {"ok": True, "device": plan.device.name, "device_reason": plan.device_reason,
            "precision": plan.precision, "precision_reason": plan.precision_reason, "strategy": plan.strategy,
            "backend": plan.backend, "compile": plan.compile, "compile_reason": plan.compile_reason,
            "env_before_torch": plan.env}


def show_settings(args: argparse.Namespace) -> int:
    resolved = resolve_settings(flag_values(args), os.environ, args.config_file)
    summary = _plan_summary(resolved, current_host())
    settings = {name: getattr(resolved.settings, name) for name in SETTING_NAMES}
    sources = {name: str(resolved.sources[name]) for name in SETTING_NAMES}
    if args.json:
        print(json.dumps({"config_file": str(resolved.config_file) if resolved.config_file else None,
                          "settings": settings, "sources": sources, "plan": summary}, indent=2))
        return 0 if summary["ok"] else 1
    # Piped output is read by programs and people searching it: do not wrap it at 80 columns.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 240)
    read = resolved.config_file or f"none ({default_config_path()} does not exist)"
    console.print(f"config file: {read}")
    table = Table(title="Effective settings (flag > environment > file > default)", title_justify="left")
    for column in ("setting", "value", "from"):
        table.add_column(column)
    for name in SETTING_NAMES:
        value = settings[name]
        table.add_row(name, "[dim]unset[/]" if value is None else json.dumps(value), sources[name])
    console.print(table)
    _print_plan(summary, console)
    return 0 if summary["ok"] else 1


def _print_plan(summary: dict, console: Console) -> None:
    if not summary["ok"]:
        console.print("[bold red]These settings cannot run here:[/]")
        for problem in summary["problems"]:
            console.print(f"  - {problem}", markup=False, soft_wrap=True)
        return
    console.print(f"[bold]device[/] {summary['device']}: {summary['device_reason']}")
    console.print(f"[bold]precision[/] {summary['precision']}: {summary['precision_reason']}")
    console.print(f"[bold]strategy[/] {summary['strategy']} (process-group backend {summary['backend'] or 'none'})")
    console.print(f"[bold]compile[/] {'on' if summary['compile'] else 'off'}: {summary['compile_reason']}")
    for name, value in summary["env_before_torch"].items():
        mark = " (already set in your environment: kept)" if name in os.environ else ""
        console.print(f"[bold]set before torch loads[/] {name}={value}{mark}")


__all__ = ["add_parser", "ask_questions", "show_settings"]

