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
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .._early import put_option
from ..devices.host import HostFacts, current_host
from ..devices.registry import GPU_ALIAS, accelerator_kinds
from ..plan.envvars import COMPILE_VAR, DEVICE_REASON_VAR, DEVICE_VAR, MIXED_PRECISION_VAR, STRATEGY_VAR
from .launch_accelerate_flags import add_accelerate_flags, dynamo_as_compile, threads_environment
from .launch_config import (ConfigError, LaunchSettings, ResolvedSettings, SettingProblem, Source,
                             add_settings_arguments, flag_values, resolve_settings)
from ..plan.rules import OptionError, Plan, PlanError, RunOptions, make_plan

LOCALHOST = "127.0.0.1"
MULTI_NODE_DEFAULT_PORT = 29500  # torchrun's default: every machine must agree on it without talking


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.usage = "braeburn launch [options] (script.py | -m module) [script args...]"
    add_settings_arguments(parser)
    parser.add_argument("--nproc-per-node", "--nproc_per_node", "--nproc", dest="nproc_per_node", default=None,
                        metavar="N", help="torchrun's spelling: processes on each machine (num_processes = N x "
                        "num_machines); give it or --num-processes, not both")
    add_accelerate_flags(parser)
    parser.add_argument("-m", "--module", action="store_true",
                        help="run the target as a module, like `python -m module`")
    parser.add_argument("--every-process-prints", action="store_true",
                        help="show every process's standard output here; by default only the first process of each "
                             "machine speaks, and the others' output goes to files (the launcher names the folder). "
                             "Standard error (warnings, errors, tracebacks) always comes from every process")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the command and the environment it would set, and run nothing")
    parser.add_argument("script", help="the training script (or, with -m, the module)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    parser.set_defaults(func=run, exit_at_once=True)


def run(args: argparse.Namespace) -> int:
    if not args.module and not os.path.isfile(args.script):
        raise FileNotFoundError(f"script {args.script!r} was not found (working directory {os.getcwd()}); "
                                "check the path, or pass -m to run a module")
    resolved = resolve_multi_gpu(resolve_settings(launch_flags(args), os.environ, args.config_file), current_host())
    plan = plan_launch(resolved, current_host())
    settings = resolved.settings
    for line in [*(f"note: {note}" for note in resolved.notes), *ignored_option_lines(plan, resolved)]:
        print(f"braeburn launch: {line}", file=sys.stderr, flush=True)
    env = child_environment(plan, settings, os.environ, device_reason=launch_device_reason(resolved, os.environ))
    env.update(threads_environment(args))
    problems = plan.device.env_problems(env, current_host().system)  # the pair the child's torch will read
    if problems:
        raise ConfigError([], problems)
    _say_outer_job_ignored(os.environ, settings)
    elastic, port, log_dir = uses_elastic_launch(settings), 0, None
    if elastic:
        port = settings.main_process_port or (MULTI_NODE_DEFAULT_PORT if settings.num_machines > 1 else free_port())
        if settings.machine_rank == 0 and not args.dry_run:
            check_port_free(settings.main_process_ip or LOCALHOST, port)
    if elastic:  # ours, so that torchrun makes no torchelastic_* folder it never removes
        log_dir = NEW_FOLDER if args.dry_run else tempfile.mkdtemp(prefix="braeburn-launch-")
    quiet = log_dir is not None and not args.every_process_prints and settings.num_processes > settings.num_machines
    command = build_command(settings, plan, args.script, args.script_args, module=args.module, port=port,
                            quiet_output_dir=log_dir if quiet else None, log_dir=log_dir)
    if args.dry_run:
        print_dry_run(command, env, os.environ, quiet=quiet, elastic=elastic)
        return 0
    if quiet:
        env.update(quiet_output_environment(log_dir))
        print(f"braeburn launch: {settings.num_processes} processes; the standard output of all but the first on "
              f"each machine goes to {log_dir} (removed after a clean job; kept when a rank fails or the job is "
              "stopped; --every-process-prints shows it here instead)", file=sys.stderr, flush=True)
    code = 1
    try:
        code = run_child(command, env, own_session=elastic)
    finally:
        if log_dir is not None:
            end_log_folder(log_dir, code)
    return code


NEW_FOLDER = "<a new folder>"  # what --dry-run shows for the log folder a launch would make


def print_dry_run(command: list[str], env: Mapping[str, str], parent: Mapping[str, str], *, quiet: bool,
                  elastic: bool) -> None:
    """The command (quoted for a shell), then every variable the launch would add or change, and unset."""
    from .job_agent import LAUNCHER_PIPE_VAR
    from .rank_output import OUTPUT_DIR_VAR, SAY_ONCE_VAR

    added = {name: value for name, value in env.items() if parent.get(name) != value}
    if quiet:  # made with the folder, at the start
        added[OUTPUT_DIR_VAR], added[SAY_ONCE_VAR] = NEW_FOLDER, f"{NEW_FOLDER}/{SAY_ONCE_FILE}"
    if elastic:
        added[LAUNCHER_PIPE_VAR] = "<the descriptor of a pipe only the launcher writes to>"
    print(shlex.join(command))
    for name, value in sorted(added.items()):
        print(f"  {name}={value}")
    for name in sorted(set(parent) - set(env)):
        print(f"  unset {name}")


def launch_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags; torchrun's --nproc-per-node N becomes num_processes = N x num_machines;
    Accelerate's --dynamo_backend (and --dynamo_use_regional_compilation) becomes --compile."""
    flags = flag_values(args)
    try:
        dynamo_as_compile(args, flags, lambda: resolve_settings({}, os.environ, args.config_file).settings.compile)
    except ConfigError as error:  # said with every other problem of the flags, the environment and the file
        others = resolve_settings(flags, os.environ, args.config_file).problems
        raise ConfigError(others, error.extra) from None
    per_node = getattr(args, "nproc_per_node", None)
    if per_node is None:
        return flags
    if "num_processes" in flags:
        raise ConfigError([], [f"--nproc-per-node={per_node} and --num-processes={flags['num_processes']} were both "
                               "given: they say the same thing (torchrun's per-machine count, braeburn's and "
                               "Accelerate's total). Pass one of them"])
    text = str(per_node).strip()
    if not text.isdigit() or int(text) < 1:
        raise ConfigError([], [f"--nproc-per-node={per_node!r}: must be a whole number of processes, 1 or more "
                               "(one per device). Fix: --nproc-per-node 2, or --num-processes for the total"])
    machines = resolve_settings(flags, os.environ, args.config_file).settings.num_machines
    flags["num_processes"] = str(int(text) * machines)
    return flags


# -- the plan ---------------------------------------------------------------------------------------

def resolve_multi_gpu(resolved: ResolvedSettings, host: HostFacts) -> ResolvedSettings:
    """Accelerate's --multi_gpu (or distributed_type: MULTI_GPU): DDP on the GPUs; without a process count,
    one process per GPU of every machine. Where no GPU here can run DDP, a problem naming the flag and the fix."""
    settings = resolved.settings
    if not settings.multi_gpu:
        return resolved
    kinds = [kind for kind in accelerator_kinds() if kind.availability(host).usable and kind.process_group_backend]
    problem = _multi_gpu_problem(settings, kinds, host, resolved.sources.get("multi_gpu", Source("default", "")))
    if problem is not None:  # said once: the plan goes on without it
        return replace(resolved, settings=replace(settings, multi_gpu=False), problems=[*resolved.problems, problem])
    if resolved.sources.get("num_processes", Source("default", "")).kind != "default":
        return resolved
    ids = settings.gpu_ids
    per_machine = kinds[0].device_count(host) if ids == "all" else len(ids.split(","))
    sources = {**resolved.sources, "num_processes": Source("default", "multi_gpu: one process per GPU")}
    return replace(resolved, settings=replace(settings, num_processes=per_machine * settings.num_machines),
                   sources=sources)


def _multi_gpu_problem(settings: LaunchSettings, kinds: list, host: HostFacts, source: Source) -> SettingProblem | None:
    if kinds and not settings.cpu:
        return None
    from ..compat.accelerate.config_file import is_accelerate_file

    if source.kind == "file" and is_accelerate_file(Path(source.detail)):  # Accelerate's distributed_type: MULTI_GPU
        where, key, value = source.detail, "distributed_type", "MULTI_GPU"
        cpu_fix = "write distributed_type: MULTI_CPU and use_cpu: true to run num_processes CPU processes with gloo"
    else:
        where = {"flag": "flag --multi-gpu", "environment": f"environment variable {source.detail}"}.get(
            source.kind, source.detail)
        key, value, cpu_fix = "multi_gpu", True, "drop --multi_gpu and pass --cpu --num-processes N to run N CPU " \
            "processes with gloo"
    if settings.cpu:
        return SettingProblem(where, key, value, "asks for DDP on the GPUs, while cpu asks for the CPU",
                              f"keep one of them: {cpu_fix}")
    reasons = "; ".join(f"{kind.name}: {kind.availability(host).reason}" if not kind.availability(host).usable
                        else f"{kind.name}: no process-group backend handles {kind.name} tensors"
                        for kind in accelerator_kinds())
    usable = " or ".join(kind.hardware for kind in accelerator_kinds() if kind.process_group_backend)
    return SettingProblem(where, key, value, f"asks for DDP on several GPUs, but this machine has no GPU that DDP "
                          f"can use ({reasons})", f"{cpu_fix}, or run on a machine with {usable}")


def run_options(settings: LaunchSettings, env_device: str | None) -> RunOptions:
    ids = settings.gpu_ids
    return RunOptions(accelerator=GPU_ALIAS if settings.multi_gpu else "auto", cpu=settings.cpu,
                      env_device=env_device, mixed_precision=settings.mixed_precision,
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


def _given(name: str, value: Any, source: Source) -> str:
    """A setting as the user gave it: the flag, the variable or the file's key."""
    if source.kind == "flag":
        if isinstance(value, bool):
            return source.detail if value else "--no-" + source.detail[2:]
        return f"{source.detail} {value}"
    if source.kind == "environment":
        return f"{source.detail}={value}"
    return f"{name} = {value} in {source.detail}" if source.kind == "file" else f"{name}={value}"


def ignored_option_lines(plan: Plan, resolved: ResolvedSettings) -> list[str]:
    """One line for each setting given that does nothing on the device this job trains on (the plan asks
    every device kind which settings its environment uses)."""
    return [f"{_given(name, getattr(resolved.settings, name), resolved.sources.get(name, Source('default', '')))} "
            f"applies only to {hardware} and has no effect here, where this job trains on {plan.device.name}"
            for name, hardware in plan.ignored_options]


def launch_device_reason(resolved: ResolvedSettings, env: Mapping[str, str]) -> str | None:
    """Why the child's device is the launcher's choice, in the words of what the user asked (--cpu, or nothing:
    auto), for the child to say instead of the BRAEBURN_DEVICE the launcher set; None where the user's own
    BRAEBURN_DEVICE decided, which then names itself."""
    for name in ("cpu", "multi_gpu"):
        source = resolved.sources.get(name, Source("default", ""))
        if not getattr(resolved.settings, name) or source.kind == "default":
            continue
        if source.kind == "environment":
            return None if name == "cpu" else f"{source.detail} set for braeburn launch"
        return f"{source.detail} passed to braeburn launch" if source.kind == "flag" else \
            f"{name} = true in {source.detail}, read by braeburn launch"
    if _device_request(resolved, env) is not None:
        return None
    return "auto: braeburn launch chose the best usable device here"


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

# What torchrun (or another launcher) sets for the processes of ITS job. `braeburn launch` starts a job of
# its own: inherited from an outer job (a shell inside an allocation, a script started by torchrun), they
# would make a single process wait forever for an outer world's other ranks, or resume as a restarted worker.
OUTER_JOB_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                  "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
                  "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                  "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE")


def child_environment(plan: Plan, settings: LaunchSettings, parent: Mapping[str, str],
                      device_reason: str | None = None) -> dict[str, str]:
    """The parent's environment without an outer job's world (OUTER_JOB_VARS), plus the plan's pre-torch
    variables where the user set none (braeburn's own import default gives way: --no-mps-fallback wins over
    the fallback `import braeburn` turned on), plus the launcher's choices for Accelerator/Trainer (with
    ``device_reason``, why the device: see :func:`launch_device_reason`), plus the visible devices with
    --gpu-ids. The world of the job started is set by torch.distributed.run (several processes), or is a
    single process (none of those variables)."""
    env = {name: value for name, value in parent.items() if name not in OUTER_JOB_VARS}
    for name, value in plan.env.items():
        put_option(env, name, value)  # over braeburn's import default; a value the user exported wins
    env[DEVICE_VAR] = plan.device.name
    env.pop(DEVICE_REASON_VAR, None)  # an outer launch's reason is not this one's
    if device_reason:
        env[DEVICE_REASON_VAR] = f"{plan.device.name}: {device_reason}"
    # What the user asked, not what "auto" resolved to here: the child resolves "auto" to the same
    # plan, keeps the per-model rules of "auto" (CNNs stay eager), and says "auto" in its messages.
    env[MIXED_PRECISION_VAR] = str(settings.mixed_precision)
    env[STRATEGY_VAR] = plan.strategy if plan.strategy in ("ddp", "fsdp") else "auto"
    env[COMPILE_VAR] = settings.compile if isinstance(settings.compile, str) else str(settings.compile).lower()
    if uses_elastic_launch(settings) and "OMP_NUM_THREADS" not in parent:
        env["OMP_NUM_THREADS"] = str(_threads_per_process(settings))
    var = plan.device.visible_devices_var
    if settings.gpu_ids != "all" and var is not None:
        env[var] = _visible_devices(settings.gpu_ids, parent.get(var))
    return env


def _threads_per_process(settings: LaunchSettings) -> int:
    """The machine's cores shared out between its processes (torchrun would set 1, and print a banner saying so)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, settings.num_processes // settings.num_machines))


def _say_outer_job_ignored(parent: Mapping[str, str], settings: LaunchSettings) -> None:
    inherited = [f"{name}={parent[name]}" for name in OUTER_JOB_VARS if name in parent]
    if inherited:
        print(f"braeburn launch: not passing on {', '.join(inherited)} (inherited from an outer job): this launch "
              f"starts a job of its own, of {settings.num_processes} process(es). Unset them to silence this note.",
              file=sys.stderr, flush=True)


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


class PortInUseError(RuntimeError):
    """The rendezvous port of the job is taken on this machine (checked before starting anything)."""


def check_port_free(address: str, port: int) -> None:
    """Rank 0's machine opens the job's rendezvous on ``port``: say now, in one line, when it cannot
    (torch would end in a traceback from its agent). Another program may still take it in between."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's store: TIME_WAIT is no conflict
        try:
            probe.bind(("" if address != LOCALHOST else LOCALHOST, port))
        except OSError as error:
            raise PortInUseError(
                f"--main-process-port={port}: the job's rendezvous port cannot be opened on this machine "
                f"({error.strerror or error}: another job, or a process still holding it; `ss -ltnp | grep :{port}` "
                "shows which). Pass another --main-process-port, or leave it out on one machine (a free port is "
                "picked).") from None


def uses_elastic_launch(settings: LaunchSettings) -> bool:
    return settings.num_processes > 1 or settings.num_machines > 1 or settings.max_restarts > 0


def build_command(settings: LaunchSettings, plan: Plan, target: str, target_args: list[str], *, module: bool,
                  port: int, quiet_output_dir: str | None = None, log_dir: str | None = None) -> list[str]:
    """The child's command. ``quiet_output_dir``: the standard output of every local rank but 0 goes to files
    there (torchrun's --redirects), so that the job speaks once per machine; standard error is left alone.
    Each process then starts in braeburn.cli.rank_output, which keeps a rank whose file cannot be written
    (a full disk) alive. ``log_dir``: torchrun's folder for its error files (else it makes one in the temp
    folder, and never removes it); ``quiet_output_dir`` is used for both. Braeburn's own modules start through
    :func:`python_running`."""
    run_target = (["-m"] if module else []) + [target, *target_args]
    if not uses_elastic_launch(settings):
        return [sys.executable, *run_target]
    address = settings.main_process_ip or LOCALHOST  # one machine: nothing outside it need reach us
    per_node = settings.num_processes // settings.num_machines
    log_dir = quiet_output_dir or log_dir
    logs = ["--log-dir", log_dir] if log_dir else []
    if quiet_output_dir and per_node > 1:
        logs += ["--redirects", ",".join(f"{rank}:1" for rank in range(1, per_node))]
        run_target = ["--no-python", *python_running("braeburn.cli.rank_output", "-u"), *run_target]
    return [*python_running("braeburn.cli.job_agent"),  # torch.distributed.run, ended with the launcher
            "--nnodes", str(settings.num_machines),
            "--nproc-per-node", str(per_node),
            "--node-rank", str(settings.machine_rank),
            "--rdzv-backend", "static", "--master-addr", address, "--master-port", str(port),
            "--max-restarts", str(settings.max_restarts), *logs,
            *run_target]


def python_running(module: str, *options: str) -> list[str]:
    """``python -m module``, but with the working folder taken off ``sys.path`` before anything is imported:
    `python -m` puts it first, and a ``token.py`` or ``platform.py`` of the user's there would be imported in
    place of the standard library's by braeburn or torch, and break the launch. (PYTHONSAFEPATH, where set,
    kept it off already.) The same code on every Python braeburn runs on: ``-P`` exists only from 3.11, and
    would also show in the script's ``sys.flags`` and in its children's command lines. One word, ``-c...``:
    torchrun names a failed job after the first word not starting with "-", which stays the user's script."""
    code = f"import sys; getattr(sys.flags, 'safe_path', False) or sys.path.pop(0); from {module} import main; main()"
    return [sys.executable, *options, "-c" + code]


SAY_ONCE_FILE = ".say-once"


def quiet_output_environment(folder: str) -> dict[str, str]:
    """What braeburn.cli.rank_output reads in each process: the folder, and a file whose deletion elects the
    one rank that says a full disk (the deletion needs no free space, and exactly one rank succeeds)."""
    from .rank_output import OUTPUT_DIR_VAR, SAY_ONCE_VAR

    env = {OUTPUT_DIR_VAR: folder}
    token = os.path.join(folder, SAY_ONCE_FILE)
    try:
        with open(token, "x"):
            pass
        env[SAY_ONCE_VAR] = token
    except OSError:
        pass  # no file: every rank that cannot write says so itself
    return env


def end_log_folder(folder: str, code: int) -> None:
    """Remove the job's log folder when the job ended well, or when it holds nothing to read; else keep it,
    and say where."""
    try:
        Path(folder, SAY_ONCE_FILE).unlink(missing_ok=True)
        written = [path for path in Path(folder).rglob("*") if path.is_file() and path.stat().st_size > 0]
    except OSError:  # unreadable: keep it, and say so below (the job's own exit status stands either way)
        written = [Path(folder)]
    if code == 0 or not written:
        shutil.rmtree(folder, ignore_errors=True)
        return
    print(f"braeburn launch: the job ended with exit status {code}; its processes' standard output and torchrun's "
          f"error files are kept in {folder} ({len(written)} file(s); remove the folder when done)",
          file=sys.stderr, flush=True)


# -- running it -------------------------------------------------------------------------------------

# SIGHUP: the terminal or the ssh session closed; without a handler the launcher died, its log folder left unnamed
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))
# After a stop signal the job has this long to end by itself (a Trainer saves a checkpoint first;
# torchrun gives its workers the same 30 s); then, or at a second signal, every process is killed.
STOP_GRACE_S = 30.0


@dataclass
class _Job:
    """The running job, and the stop signal received. The first signal is passed on and starts the grace
    period; a second signal, or the end of the grace period, kills every process of the job."""

    forward_always: bool  # the job runs in its own session: no terminal signal reaches it but ours
    process: subprocess.Popen | None = None
    received: int | None = None
    _deadline: threading.Timer | None = None

    def __call__(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
            self.stop()
        elif self.process is not None and self.process.poll() is None:
            kill_tree(self.process.pid)  # a second Ctrl-C: stop now

    def stop(self) -> None:
        """Pass the first signal on, once, as soon as the job exists (run_child calls it after the start)."""
        if self.process is None or self._deadline is not None or self.process.poll() is not None:
            return
        self._deadline = threading.Timer(STOP_GRACE_S, kill_tree, [self.process.pid])
        self._deadline.daemon = True
        self._deadline.start()
        signum = self.received
        if self.forward_always or not (signum == signal.SIGINT and _terminal_already_signals_child()):
            self.process.send_signal(signum)  # else Ctrl-C in a terminal reached the child's group already

    def wait(self) -> int:
        try:
            return self.process.wait()
        finally:
            if self._deadline is not None:
                self._deadline.cancel()


def _terminal_already_signals_child() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (AttributeError, OSError, ValueError):
        return False


def process_tree(root: int) -> list[int]:
    """``root`` and every process descending from it, parents first (Linux /proc, else ps)."""
    parents: dict[int, int] = {}
    if os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    else:
        listing = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid="], capture_output=True, text=True)
        for line in listing.stdout.splitlines():
            pid, _, ppid = line.strip().partition(" ")
            parents[int(pid)] = int(ppid.strip())
    tree = [root]
    for pid in tree:  # grows while walked: breadth first
        tree.extend(child for child, parent in parents.items() if parent == pid)
    return tree


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and its descendants (torchrun's workers run in sessions of their own)."""
    for pid in reversed(process_tree(root)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_launcher():
    """What the child runs before its program: ask Linux for SIGTERM when the launcher dies; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the forked child only calls it
    except (OSError, AttributeError):
        return None
    launcher = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != launcher:  # the launcher died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def _start(command: list[str], env: Mapping[str, str], watch_read: int | None) -> subprocess.Popen:
    if watch_read is None:
        return subprocess.Popen(command, env=dict(env), preexec_fn=_die_with_launcher())
    from .job_agent import LAUNCHER_PIPE_VAR

    try:
        return subprocess.Popen(command, env={**env, LAUNCHER_PIPE_VAR: str(watch_read)}, start_new_session=True,
                                pass_fds=(watch_read,))
    finally:
        os.close(watch_read)  # the agent has its copy; the launcher keeps only the write end


def run_child(command: list[str], env: Mapping[str, str], *, own_session: bool = False) -> int:
    """Run ``command`` until it ends; its exit status is ours (128 + N when signal N ended it, as a shell
    reports). With ``own_session`` (torchrun's agent) the job gets a session of its own, every SIGINT,
    SIGTERM and SIGHUP is passed on, the job stops with 128 + N, and it ends when the launcher dies, even by SIGKILL
    (see job_agent.py). A single script stays in the terminal's group (it may read from it) and, on Linux,
    gets SIGTERM when the launcher dies."""
    job = _Job(forward_always=own_session)
    previous = {sig: signal.signal(sig, job) for sig in STOP_SIGNALS}  # before the start: no signal is lost
    watch_read, watch_write = os.pipe() if own_session else (None, None)
    try:
        if job.received is not None:
            return 128 + job.received  # stopped before anything started
        job.process = _start(command, env, watch_read)
        if job.received is not None:
            job.stop()  # it arrived while the job was starting: pass it on now
        code = job.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if watch_write is not None:
            os.close(watch_write)  # the agent sees end of file, if it is somehow still running
    if own_session and job.received is not None and code != 0:
        return 128 + job.received
    return 128 - code if code < 0 else code
