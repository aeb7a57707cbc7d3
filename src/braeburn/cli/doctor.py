"""`braeburn doctor`: what this machine can train on, why, and what to fix."""

from __future__ import annotations

import argparse
import json
import os

from rich.console import Console
from rich.table import Table

from ..devices.host import current_host
from ..plan.envvars import env_device
from ..plan.rules import RunOptions
from .report import EXIT_FIXABLE, EXIT_OK, EXIT_REFUSED, build_report

EXIT_CODES_HELP = (f"exit status: {EXIT_OK} the chosen device is usable and nothing needs fixing; "
                   f"{EXIT_REFUSED} what was asked cannot work here; {EXIT_FIXABLE} training works, but an "
                   "accelerator on this machine is unusable for a reason you can fix")


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_CODES_HELP
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--cpu", action="store_true", help="report as if --cpu were passed")
    parser.add_argument("--accelerator", default="auto", help="check this request: auto, gpu, cuda, mps or cpu")
    parser.add_argument("--mixed-precision", "--mixed_precision", dest="mixed_precision", default="auto",
                        help="check this precision: auto, no, fp16 or bf16")
    parser.set_defaults(func=run)


def _torch_info() -> dict:
    import torch

    return {"location": os.path.dirname(torch.__file__), "debug": torch.version.debug}


def run(args: argparse.Namespace) -> int:
    host = current_host()
    options = RunOptions(accelerator=args.accelerator, cpu=args.cpu, mixed_precision=args.mixed_precision,
                         env_device=env_device())
    report = build_report(host, options, os.environ, _torch_info())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report, Console(highlight=False))
    return report["exit_code"]


def _device_table(report: dict) -> Table:
    table = Table(title="Devices", title_justify="left", show_lines=False)
    for column in ("device", "status", "count", "mixed precision", "distributed", "why / fix"):
        table.add_column(column)
    for d in report["devices"]:
        status = "[green]usable[/]" if d["usable"] else ("[yellow]fixable[/]" if d["fixable"] else
                                                         "[red]fails[/]" if d.get("fails_although_reported") else "[dim]absent[/]")
        precisions = ", ".join(name for name, p in d["mixed_precision"].items() if p["supported"]) or "none"
        precisions = precisions if d["usable"] else "-"
        why = d["reason"] + (f"\nfix: {d['fix']}" if d["fix"] else "")
        table.add_row(d["name"], status, str(d["count"]), precisions, d["process_group_backend"] or "none", why)
    return table


def _env_table(report: dict) -> Table:
    table = Table(title="Environment", title_justify="left")
    # the names are what a user copies into `export`: never cut, whatever the terminal's width
    table.add_column("variable", no_wrap=True, min_width=max((len(row["name"]) for row in report["environment"]),
                                                             default=8))
    for column in ("value", "set by", "set before torch loaded", "what it does"):
        table.add_column(column, overflow="fold")  # a narrow terminal folds long words instead of cutting them
    for row in report["environment"]:
        before = {True: "yes", False: "no", None: "unknown (torch loaded first)"}[row["set_before_torch_loaded"]]
        if not row["read_when_torch_loads"]:
            before = "-"
        table.add_row(row["name"], row["value"] if row["value"] is not None else "[dim]unset[/]", row["set_by"] or "-",
                      before, row["purpose"])
    return table


def render(report: dict, console: Console) -> None:
    py, torch_, os_ = report["python"], report["torch"], report["os"]
    console.print(f"[bold]braeburn {report['braeburn']}[/]")
    console.print(f"Python  {py['version']} ({py['arch']})  {py['executable']}")
    built = f"CUDA {torch_['cuda']}" if torch_["cuda"] else "no CUDA"
    console.print(f"torch   {torch_['version']} ({built}; MPS {'built' if torch_['mps_built'] else 'not built'})")
    console.print(f"OS      {os_['name']} ({os_['machine']}{', Rosetta' if os_['rosetta'] else ''})")
    console.print(_device_table(report))
    selected = report["selected"]
    if selected["ok"]:
        console.print(f"[bold]Chosen device:[/] {selected['device']} - {selected['device_reason']}")
        console.print(f"[bold]Precision:[/] {selected['precision_reason']}")
        state = "auto" if selected["compile"] and selected.get("compile_auto") else "on" if selected["compile"] else "off"
        console.print(f"[bold]torch.compile:[/] {state} - {selected['compile_reason']}")
        for note in selected.get("notes", []):
            console.print(f"[yellow]Note:[/] {note}")
    else:
        console.print("[bold red]Cannot use what was asked:[/]")
        for error in selected["errors"]:
            console.print(f"  - {error}")
    console.print(_env_table(report))
    workers = report["dataloader"]
    console.print(f"[bold]DataLoader workers (Trainer):[/] {workers['num_workers']} by default - {workers['reason']}")
    for problem in report["problems"]:
        console.print(f"[yellow]To fix:[/] {problem}")
    console.print(f"exit status {report['exit_code']} ({EXIT_CODES_HELP.split(': ', 1)[1]})")
