"""`braeburn launch [options] script.py [args...]`: run a script with the settings, the right way.

One process runs the script directly as a child. Several processes, several machines or
``--max-restarts`` go through ``torch.distributed.run`` (elastic launch), which restarts workers
and ends the whole job when a rank crashes. Either way the child gets, before torch loads, the
environment the plan asks for (never overriding what the user set) and the BRAEBURN_* variables
that make ``Accelerator``/``Trainer`` follow the launcher's choices.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ..devices.host import HostFacts, current_host
from ..envvars import COMPILE_VAR, DEVICE_VAR, MIXED_PRECISION_VAR, STRATEGY_VAR
from ..launch_config import (ConfigError, LaunchSettings, ResolvedSettings, add_settings_arguments, flag_values,
                             resolve_settings)
from ..plan import OptionError, Plan, PlanError, RunOptions, make_plan

LOCALHOST = "127.0.0.1"
MULTI_NODE_DEFAULT_PORT = 29500  # torchrun's default: every machine must agree on it without talking


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.usage = "braeburn launch [options] (script.py | -m module) [script args...]"
    add_settings_arguments(parser)
    parser.add_argument("-m", "--module", action="store_true",
                        help="run the target as a module, like `python -m module`")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the command and the environment it would set, and run nothing")
    parser.add_argument("script", help="the training script (or, with -m, the module)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.module and not os.path.isfile(args.script):
        raise FileNotFoundError(f"script {args.script!r} was not found (working directory {os.getcwd()}); "
                                "check the path, or pass -m to run a module")
    resolved = resolve_settings(flag_values(args), os.environ, args.config_file)
    plan = plan_launch(resolved, current_host())
    settings = resolved.settings
    env = child_environment(plan, settings, os.environ)
    port = 0
    if uses_elastic_launch(settings):
        port = settings.main_process_port or (MULTI_NODE_DEFAULT_PORT if settings.num_machines > 1 else free_port())
    command = build_command(settings, plan, args.script, args.script_args, module=args.module, port=port)
    if args.dry_run:
        added = {k: v for k, v in env.items() if os.environ.get(k) != v}
        print(" ".join(command))
        for name, value in sorted(added.items()):
            print(f"  {name}={value}")
        return 0
    return run_child(command, env)


# -- the plan ---------------------------------------------------------------------------------------

def run_options(settings: LaunchSettings, env_device: str | None) -> RunOptions:
    ids = settings.gpu_ids
    return RunOptions(cpu=settings.cpu, env_device=env_device, mixed_precision=settings.mixed_precision,
                      devices="auto" if ids == "all" else len(ids.split(",")),
                      num_processes=settings.num_processes, strategy=settings.strategy, compile=settings.compile,
                      mps_fallback=settings.mps_fallback, mps_high_watermark_ratio=settings.mps_high_watermark_ratio,
                      mps_low_watermark_ratio=settings.mps_low_watermark_ratio)


def _device_request(resolved: ResolvedSettings, env: Mapping[str, str]) -> str | None:
    """BRAEBURN_DEVICE other than cpu asks for a device, unless a flag or the file decided `cpu` first."""
    source = resolved.sources.get("cpu")
    value = env.get(DEVICE_VAR, "").strip()
    return value if source is not None and source.kind == "environment" and value.lower() != "cpu" else None


def plan_launch(resolved: ResolvedSettings, host: HostFacts, env: Mapping[str, str] | None = None) -> Plan:
    """The plan for these settings on this host; raise ConfigError listing every problem at once."""
    env = os.environ if env is None else env
    extra: list[OptionError] = []
    plan = None
    try:
        plan = make_plan(run_options(resolved.settings, _device_request(resolved, env)), host)
    except PlanError as error:
        extra = list(error.errors)
    if plan is not None:
        extra += _check_gpu_ids(resolved.settings, plan, host)
    if resolved.problems or extra:
        raise ConfigError(resolved.problems, [str(e) for e in extra])
    return plan


def _check_gpu_ids(settings: LaunchSettings, plan: Plan, host: HostFacts) -> list[OptionError]:
    if settings.gpu_ids == "all":
        return []
    kind = plan.device
    if kind.visible_devices_var is None:
        return [OptionError("gpu_ids", settings.gpu_ids, f"{kind.name} has no per-device selection; remove "
                            "--gpu-ids (or gpu_ids from the config file) to use it")]
    count = kind.device_count(host)
    wrong = [i for i in map(int, settings.gpu_ids.split(",")) if i >= count]
    if wrong:
        return [OptionError("gpu_ids", settings.gpu_ids, f"this machine has {count} {kind.name} device(s), "
                            f"numbered 0 to {count - 1}; drop {', '.join(map(str, wrong))}")]
    return []


# -- the child's environment ------------------------------------------------------------------------

def child_environment(plan: Plan, settings: LaunchSettings, parent: Mapping[str, str]) -> dict[str, str]:
    """The parent's environment, plus the plan's pre-torch variables where the user set none, plus
    the launcher's choices for Accelerator/Trainer, plus the visible devices with --gpu-ids."""
    env = dict(parent)
    for name, value in plan.env.items():
        env.setdefault(name, value)  # a value the user exported wins
    env[DEVICE_VAR] = plan.device.name
    # What the user asked, not what "auto" resolved to here: the child resolves "auto" to the same
    # plan, keeps the per-model rules of "auto" (CNNs stay eager), and says "auto" in its messages.
    env[MIXED_PRECISION_VAR] = str(settings.mixed_precision)
    env[STRATEGY_VAR] = plan.strategy if plan.strategy in ("ddp", "fsdp") else "auto"
    env[COMPILE_VAR] = settings.compile if isinstance(settings.compile, str) else str(settings.compile).lower()
    var = plan.device.visible_devices_var
    if settings.gpu_ids != "all" and var is not None:
        env[var] = _visible_devices(settings.gpu_ids, parent.get(var))
    return env


def _visible_devices(ids: str, already: str | None) -> str:
    """Indices count within what the user already made visible: ids 1 of visible "2,3" is device 3."""
    if not already or not already.strip():
        return ids
    visible = [part.strip() for part in already.split(",")]
    return ",".join(visible[int(i)] for i in ids.split(",") if int(i) < len(visible))


# -- the command ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOCALHOST, 0))
        return probe.getsockname()[1]


def uses_elastic_launch(settings: LaunchSettings) -> bool:
    return settings.num_processes > 1 or settings.num_machines > 1 or settings.max_restarts > 0


def build_command(settings: LaunchSettings, plan: Plan, target: str, target_args: list[str], *, module: bool,
                  port: int) -> list[str]:
    run_target = (["-m"] if module else []) + [target, *target_args]
    if not uses_elastic_launch(settings):
        return [sys.executable, *run_target]
    address = settings.main_process_ip or LOCALHOST  # one machine: nothing outside it need reach us
    return [sys.executable, "-m", "torch.distributed.run",
            "--nnodes", str(settings.num_machines),
            "--nproc-per-node", str(settings.num_processes // settings.num_machines),
            "--node-rank", str(settings.machine_rank),
            "--rdzv-backend", "static", "--master-addr", address, "--master-port", str(port),
            "--max-restarts", str(settings.max_restarts),
            *run_target]


# -- running it -------------------------------------------------------------------------------------

@dataclass
class _Forwarder:
    """Passes SIGINT and SIGTERM on to the child, so Ctrl-C or a scheduler's SIGTERM stops every process."""

    child: subprocess.Popen

    def __call__(self, signum: int, frame) -> None:
        if signum == signal.SIGINT and _terminal_already_signals_child():
            return  # Ctrl-C in a terminal reaches the whole foreground group, the child included
        if self.child.poll() is None:
            self.child.send_signal(signum)


def _terminal_already_signals_child() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (AttributeError, OSError, ValueError):
        return False


def run_child(command: list[str], env: Mapping[str, str]) -> int:
    """Run ``command``; its exit status is ours (128 + N when signal N ended it, as a shell reports)."""
    child = subprocess.Popen(command, env=dict(env))
    forward = _Forwarder(child)
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
