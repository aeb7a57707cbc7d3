"""`braeburn check script.py`: are the script's numbers right on the accelerator, and is it faster?

The user's script runs unchanged, twice, as child processes: first on the CPU in float32 (the
reference), then on the chosen accelerator, each for a few optimizer steps. The probe hooks in the
Accelerator (braeburn/probe.py) make both runs start from the same weights and seeds, record each
step's loss, gradients and time, and stop the run; this module compares the records.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..plan.envvars import (CHECK_DIR_VAR, CHECK_REFERENCE_VAR, CHECK_SIDE_VAR, CHECK_STEPS_VAR, CHECK_TARGET_VAR,
                       DEVICE_VAR, MIXED_PRECISION_VAR, SEED_VAR)

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_HELP = (f"exit status: {EXIT_PASS} the accelerator agrees with the CPU; {EXIT_FAIL} it disagrees, an op "
             f"failed, or the script failed; {EXIT_USAGE} usage error (bad options, a device that is not usable "
             "here, or a script that never trains through braeburn's Accelerator or Trainer)")

# (loss, gradient) relative-error tolerances per precision; the gradient limit applies to every
# parameter. float32 allows for TF32 convolutions (cuDNN's default). The mixed-precision limits sit
# about twice above what autocast itself costs on a small CNN with batch norm (CPU autocast against
# float32, same weights: bf16 up to 15% on batch-norm and first-layer gradients with a loss error of
# 4e-4; fp16 up to 8.5%, loss 2e-5): parameters whose gradient is a sum with heavy cancellation
# lose most. docs/check-and-bench.md has the table.
TOLERANCES: dict[str, tuple[float, float]] = {"no": (1e-3, 2e-2), "fp16": (5e-3, 0.15), "bf16": (2e-2, 0.3)}


@dataclass
class SideRun:
    """One child run of the script: its exit status, record and what its stderr said."""

    side: str
    device: str
    returncode: int
    record: dict | None
    stderr: str
    fallback_ops: Counter = field(default_factory=Counter)
    failed_ops: list[str] = field(default_factory=list)
    error: str | None = None


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_HELP
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps to compare (default 5)")
    parser.add_argument("--accelerator", default="auto", help="the device to check: auto, gpu, cuda, mps or cpu")
    parser.add_argument("--mixed-precision", "--mixed_precision", dest="mixed_precision", default="auto",
                        help="precision on the accelerator side: auto, no, fp16 or bf16 (the reference is float32)")
    parser.add_argument("--tolerance", default="", metavar="loss=X,grad=Y",
                        help="relative-error limits; defaults per precision: " +
                        "; ".join(f"{p}: loss={lo:g}, grad={g:g}" for p, (lo, g) in TOLERANCES.items()))
    parser.add_argument("--seed", type=int, default=1234, help="seed both runs start from (BRAEBURN_SEED)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds each run may take (default 600)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the records (printed path) instead of deleting them")
    parser.add_argument("script", help="the training script (it must train through braeburn's Accelerator or Trainer)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    parser.set_defaults(func=run)


def parse_tolerance(text: str, precision: str) -> tuple[float, float]:
    """'loss=1e-3,grad=1e-2' (either part optional) over the defaults for ``precision``."""
    loss, grad = TOLERANCES.get(precision, TOLERANCES["no"])
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if key.strip() not in ("loss", "grad") or number <= 0:
            raise ValueError(f"--tolerance {text!r}: {part!r} is not loss=NUMBER or grad=NUMBER with a number "
                             "above 0; pass e.g. --tolerance loss=1e-3,grad=1e-2")
        loss, grad = (number, grad) if key.strip() == "loss" else (loss, number)
    return loss, grad


# -- running the two sides ------------------------------------------------------------------


def side_env(side: str, device: str, precision: str, directory: Path, *, steps: int, seed: int,
             reference: Path | None = None, target: str | None = None, before_torch: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({DEVICE_VAR: device, MIXED_PRECISION_VAR: precision, CHECK_DIR_VAR: str(directory),
                CHECK_SIDE_VAR: side, CHECK_STEPS_VAR: str(steps), SEED_VAR: str(seed)})
    for name, value in (before_torch or {}).items():
        env.setdefault(name, value)  # a value the user set wins
    if reference is not None:
        env[CHECK_REFERENCE_VAR] = str(reference)
    if target is not None:
        env[CHECK_TARGET_VAR] = target
    return env


_FAILED_OP = re.compile(r"^\s*NotImplementedError: (.*)$", re.MULTILINE)
_FLOAT64_FAILURE = "doesn't support float64"


def read_stderr(run: SideRun) -> None:
    """Fallback ops, failed ops and the final error, from the child's stderr and record.

    The record's counts (every op and call, from the child's Accelerator) win; warning lines on
    stderr, which show each op once, fill in ops the record missed (a run that died before a step).
    """
    from ..devices.fallback import parse_fallback_warning

    for line in run.stderr.splitlines():
        op = parse_fallback_warning(line)
        if op is not None:
            run.fallback_ops[op] += 1
    for op, count in ((run.record or {}).get("fallback_ops") or {}).items():
        run.fallback_ops[op] = max(run.fallback_ops[op], int(count))
    run.failed_ops = [m.strip() for m in _FAILED_OP.findall(run.stderr)]
    if run.returncode != 0:
        lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
        run.error = lines[-1].strip() if lines else f"exit status {run.returncode}, no error text"


def run_side(script: str, script_args: list[str], env: dict, side: str, device: str, timeout: float) -> SideRun:
    from ..accelerator.probe import read_record

    command = [sys.executable, script, *script_args]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        returncode, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr.decode() if isinstance(expired.stderr, bytes) else (expired.stderr or "")
        returncode, stderr = 124, stderr + f"\nbraeburn: the {side} run took longer than --timeout {timeout:g}s"
    run = SideRun(side, device, returncode, read_record(env[CHECK_DIR_VAR]), stderr)
    read_stderr(run)
    return run


# -- comparing the records --------------------------------------------------------------------


# A speed verdict needs at least this many timed steps on each side: fewer give no spread to judge a ratio by.
MIN_TIMED_STEPS = 3


def step_times(record: dict | None) -> list[float]:
    """Each step's time; the first (warm-up, compilation, data-loader start) is left out."""
    times = [s["time_s"] for s in (record or {}).get("steps", [])]
    return times[1:] if len(times) > 1 else times


def step_seconds(record: dict | None) -> float | None:
    """Median step time, the first step left out."""
    times = step_times(record)
    return statistics.median(times) if times else None


def speedup_range(reference: list[float], accelerator: list[float]) -> tuple[float, float] | None:
    """The lowest and highest speed-up the timed steps allow: slowest reference over fastest accelerator step
    and the other way round. Each step is one more measurement; the range is their spread."""
    if not reference or not accelerator or min(accelerator) <= 0:
        return None
    return min(reference) / max(accelerator), max(reference) / min(accelerator)


def _number(value) -> float:
    return float(value) if value is not None else float("nan")


def compare_runs(reference: SideRun, accelerator: SideRun, tolerances: tuple[float, float]) -> dict:
    """Per-step agreement, the worst parameters, timings and the verdict, as plain data."""
    from ..accelerator.probe import relative_error

    loss_tol, grad_tol = tolerances
    ref_steps = {s["step"]: s for s in (reference.record or {}).get("steps", [])}
    rows, worst, problems = [], {}, []
    for step in (accelerator.record or {}).get("steps", []):
        ref = ref_steps.get(step["step"])
        if ref is None:
            continue
        loss_err = relative_error(_number(step["loss"]), _number(ref["loss"]))
        grad = step.get("grad") or {}
        grad_err = _number(grad.get("max_rel"))
        for name, err in grad.get("worst", []):
            worst[name] = max(worst.get(name, 0.0), _number(err))
        ok = loss_err <= loss_tol and grad_err <= grad_tol
        rows.append({"step": step["step"], "loss": step["loss"], "reference_loss": ref["loss"], "loss_rel": loss_err,
                     "grad_max_rel": grad_err, "grad_global_rel": _number(grad.get("global_rel")),
                     "worst": (grad.get("worst") or [[None, None]])[0][0],
                     "nonfinite": grad.get("nonfinite", []), "ok": ok})
        if not ok:
            problems.append(f"step {step['step']}: loss error {loss_err:.2e} (limit {loss_tol:g}), gradient "
                            f"error {grad_err:.2e} (limit {grad_tol:g})")
    worst_params = sorted(worst.items(), key=lambda item: item[1], reverse=True)[:5]
    return {"steps": rows, "worst_parameters": worst_params, "problems": problems}


def float64_findings(reference: SideRun, accelerator: SideRun) -> list[str]:
    """float64 use the reference run saw, when the target device cannot hold float64."""
    from ..devices.registry import get_kind

    if get_kind(accelerator.device).supports_float64:
        return []
    record = reference.record or {}
    found = list(record.get("float64", []))
    found += [f"{op} made a float64 tensor ({count}x in step 1)" for op, count in record.get("float64_ops", {}).items()]
    if _FLOAT64_FAILURE in accelerator.stderr:
        found.append(f"the {accelerator.device} run failed converting to float64")
    return found


def build_report(script: str, reference: SideRun, accelerator: SideRun, tolerance_text: str) -> dict:
    precision = (accelerator.record or {}).get("precision") or "no"
    tolerances = parse_tolerance(tolerance_text, precision)
    comparison = compare_runs(reference, accelerator, tolerances)
    ref_time, acc_time = step_seconds(reference.record), step_seconds(accelerator.record)
    timed = min(len(step_times(reference.record)), len(step_times(accelerator.record)))
    judged = timed >= MIN_TIMED_STEPS  # fewer: the medians are shown, no ratio is claimed
    float64 = float64_findings(reference, accelerator)
    failures = list(comparison["problems"])
    for run in (reference, accelerator):
        if run.error and not (run.record or {}).get("stopped_by_check"):
            failures.append(f"the {run.side} run ({run.device}) failed: {run.error}")
    failures += [f"{accelerator.device} has no float64: {item}" for item in float64]
    if not comparison["steps"] and not failures:
        failures.append("no step could be compared")
    return {
        "script": script, "device": accelerator.device, "precision": precision, "tolerances":
        {"loss": tolerances[0], "grad": tolerances[1]}, "steps": comparison["steps"],
        "worst_parameters": comparison["worst_parameters"],
        "step_seconds": {"reference": ref_time, "accelerator": acc_time},
        "speedup": ref_time / acc_time if judged and ref_time and acc_time else None,
        "speedup_range": speedup_range(step_times(reference.record), step_times(accelerator.record)) if judged else None,
        "timed_steps": timed,
        "fallback_ops": dict(accelerator.fallback_ops.most_common()), "failed_ops": accelerator.failed_ops,
        "float64": float64, "dropout_disabled": (reference.record or {}).get("dropout_disabled", []),
        "failures": failures, "passed": not failures,
    }


# -- the verb ---------------------------------------------------------------------------------


def _resolve_device(args) -> tuple[object, str]:
    from ..devices.host import current_host
    from ..plan.rules import RunOptions, make_plan

    plan = make_plan(RunOptions(accelerator=args.accelerator, mixed_precision=args.mixed_precision), current_host())
    return plan.device, args.mixed_precision


def _usage_error(message: str) -> int:
    print(f"braeburn check: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _no_record_message(run: SideRun, script: str) -> str:
    tail = "\n".join(run.stderr.strip().splitlines()[-15:])
    if run.returncode != 0:
        return (f"{script} failed on the {run.side} run ({run.device}) before its first optimizer step, so this is "
                f"not a device problem. Its error output ends with:\n{tail}")
    return (f"{script} ran ({run.side} side, {run.device}) but never reached an optimizer step through braeburn's "
            "Accelerator or Trainer, so there was nothing to compare. `braeburn check` watches the steps of "
            "scripts that train with braeburn.Accelerator (prepare/backward/optimizer.step) or braeburn's Trainer")


def _option_errors(args) -> tuple[list[str], tuple[object, str] | None]:
    """Every problem with the options at once (each names the option, the value, why and the fix), and the device
    and precision when they resolve."""
    from ..plan.rules import PlanError

    errors = []
    if not Path(args.script).is_file():
        errors.append(f"script {args.script!r} does not exist; pass the path of a Python training script")
    if args.steps < 1:
        errors.append(f"--steps {args.steps}: at least one step is needed to compare; pass --steps 5")
    if not 0 < args.timeout < float("inf"):
        errors.append(f"--timeout {args.timeout:g}: each run needs some seconds to start and train; pass a number of "
                      "seconds above 0, e.g. --timeout 600 (the default)")
    try:
        parse_tolerance(args.tolerance, "no")
    except ValueError as error:
        errors.append(str(error))
    try:
        return errors, _resolve_device(args)
    except PlanError as error:
        return errors + [str(item) for item in error.errors], None


def run(args: argparse.Namespace) -> int:
    errors, resolved = _option_errors(args)
    if errors:
        if len(errors) == 1:
            return _usage_error(errors[0])
        return _usage_error(f"{len(errors)} problems with the options:\n" + "\n".join(f"  - {e}" for e in errors))
    kind, precision = resolved
    root = Path(tempfile.mkdtemp(prefix="braeburn-check-"))
    try:
        return _check(args, kind, precision, root)
    finally:
        if args.keep:
            print(f"records kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def _check(args, kind, precision: str, root: Path) -> int:
    from ..devices.registry import fallback_kind

    reference_kind = fallback_kind()
    common = {"steps": args.steps, "seed": args.seed, "target": kind.name}
    sides = (("reference", reference_kind, "no", {}),
             ("accelerator", kind, precision, {"reference": root / "reference", "before_torch": kind.env_before_torch()}))
    runs = []
    for side, side_kind, side_precision, extra in sides:
        env = side_env(side, side_kind.name, side_precision, root / side, **common, **extra)
        if not args.json:
            print(f"braeburn check: {side} run on {side_kind.name} ({args.steps} steps)...", file=sys.stderr)
        run_ = run_side(args.script, args.script_args, env, side, side_kind.name, args.timeout)
        runs.append(run_)
        if not (run_.record or {}).get("steps"):
            if run_.returncode == 0:  # it trained without braeburn: nothing was watched
                return _usage_error(_no_record_message(run_, args.script))
            if side == "reference":  # it fails on the CPU too: not a device problem
                print(f"braeburn check: FAIL: {_no_record_message(run_, args.script)}", file=sys.stderr)
                return EXIT_FAIL
    report = build_report(args.script, runs[0], runs[1], args.tolerance)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        render(report, reference_kind.name)
    return EXIT_PASS if report["passed"] else EXIT_FAIL


# -- rendering --------------------------------------------------------------------------------


def _fmt(value, spec: str = ".3e") -> str:
    if value is None:
        return "-"
    try:
        return format(float(value), spec)
    except (TypeError, ValueError):
        return str(value)


def _precision(report: dict) -> str:
    return "float32" if report["precision"] == "no" else report["precision"]


def _side_labels(report: dict, reference: str) -> tuple[str, str]:
    """How the two runs are named in the table and the timing line, distinct even when both are the CPU."""
    return f"{report['device']} ({_precision(report)})", f"{reference} (float32, reference)"


def _steps_table(report: dict, reference: str):
    from rich.table import Table

    checked, against = _side_labels(report, reference)
    table = Table(title=f"Per step: {checked} against {against}", title_justify="left")
    for column in ("step", f"loss {checked}", "loss reference", "loss rel. err", "grad max rel. err",
                   "grad global rel. err", "worst parameter", ""):
        table.add_column(column, justify="right" if column.startswith(("loss", "grad", "step")) else "left")
    for row in report["steps"]:
        mark = "[green]ok[/]" if row["ok"] else "[red]FAIL[/]"
        worst = row["worst"] if row["worst"] and row["grad_max_rel"] > 0 else "-"
        if row["nonfinite"]:
            worst += f" (non-finite: {len(row['nonfinite'])})"
        table.add_row(str(row["step"]), _fmt(row["loss"], ".6g"), _fmt(row["reference_loss"], ".6g"),
                      _fmt(row["loss_rel"]), _fmt(row["grad_max_rel"]), _fmt(row.get("grad_global_rel")), worst, mark)
    return table


def _timing_line(report: dict, reference: str) -> str:
    times, speedup, device = report["step_seconds"], report["speedup"], report["device"]
    checked, against = _side_labels(report, reference)
    line = f"step time: {checked} {_fmt(times['accelerator'] and times['accelerator'] * 1e3, '.2f')} ms, " \
           f"{against} {_fmt(times['reference'] and times['reference'] * 1e3, '.2f')} ms"
    if speedup is None:
        return line + _too_few_steps(report.get("timed_steps", 0)) if times["accelerator"] and times["reference"] \
            else line
    if device == reference and report["precision"] == "no":
        return line + " (the same device and precision on both sides)"
    label = f"{device} ({_precision(report)})"
    low, high = report.get("speedup_range") or (speedup, speedup)
    spread = f" (medians of {report.get('timed_steps', 0)} steps each; the steps allow {low:.2f}x-{high:.2f}x)"
    if low <= 1 <= high:
        return line + f": no clear difference between {label} and float32 on the {reference}, " \
                      f"{speedup:.2f}x{spread}; a longer run (--steps) narrows it"
    if speedup >= 1:
        return line + f": {label} is {speedup:.2f}x faster{spread}"
    if device == reference:
        return line + f": {label} is {1 / speedup:.2f}x slower than float32 here{spread}"
    return line + f": [bold yellow]the CPU is the faster choice for this script ({1 / speedup:.2f}x faster)[/]{spread}"


def _too_few_steps(timed: int) -> str:
    return (f" (no speed verdict: {timed} step{'' if timed == 1 else 's'} timed on each side, and a verdict needs "
            f"{MIN_TIMED_STEPS} after the first (warm-up) step; pass --steps {MIN_TIMED_STEPS + 1} or more to get "
            "one)")


def render(report: dict, reference: str) -> None:
    from rich.table import Table

    from .console import make_console

    console = make_console()
    console.print(f"[bold]braeburn check[/] {report['script']}: {report['device']} ({_precision(report)}) "
                  f"against the {reference} in float32; tolerances loss {report['tolerances']['loss']:g}, "
                  f"gradients {report['tolerances']['grad']:g} (relative)")
    if report["steps"]:
        console.print(_steps_table(report, reference))
    if any(err > 0 for _, err in report["worst_parameters"]):
        table = Table(title="Parameters whose gradients disagree most (max over steps)", title_justify="left")
        table.add_column("parameter")
        table.add_column("rel. err", justify="right")
        for name, err in report["worst_parameters"]:
            table.add_row(name, _fmt(err))
        console.print(table)
    console.print(_timing_line(report, reference))
    if report["fallback_ops"]:
        ops = ", ".join(f"{op} ({n}x)" for op, n in report["fallback_ops"].items())
        console.print(f"[yellow]ops that fell back to the CPU:[/] {ops}")
    for op in report["failed_ops"]:
        console.print(f"[red]op failed:[/] {op}")
    for item in report["float64"]:
        console.print(f"[red]float64:[/] {item} - {report['device']} has no float64; use float32")
    if report["dropout_disabled"]:
        console.print(f"[dim]dropout set to 0 on both sides for the comparison: "
                      f"{', '.join(report['dropout_disabled'])}[/]")
    if report["passed"]:
        console.print(f"[bold green]PASS[/]: {report['device']} agrees with the CPU on {len(report['steps'])} steps")
    else:
        console.print("[bold red]FAIL[/]:")
        for failure in report["failures"]:
            console.print(f"  - {failure}")
