"""torch.distributed.run (torchrun's agent) as `braeburn launch` starts it for several processes.

    python -m braeburn.cli.job_agent TORCHRUN-ARGUMENTS...

(`braeburn launch` starts it through ``-c`` code that first takes the working folder off ``sys.path``: see
braeburn.cli.launch.python_running.)

The same agent, with three things its own entry point lacks:

- It ends the job when `braeburn launch` dies, even by SIGKILL (a scheduler's grace-period kill, the
  OOM killer): it holds the read end of a pipe whose write end only the launcher holds, and the
  kernel closes that end when the launcher dies, however it dies. End of file sends this process
  SIGTERM, and torchrun's own handler stops every worker. A pipe works on Linux and macOS alike.
- Stopped by SIGINT, SIGTERM or SIGHUP it exits 128+N, as a shell reports a process a signal ended, with
  the workers stopped and no traceback of its own (torchrun raises its SignalException to the top).
- It exits at once when the job is over, skipping the seconds the interpreter takes to tear down
  torch's modules (longer on a loaded machine), so Ctrl-C returns the prompt as soon as the workers
  have stopped.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import traceback

LAUNCHER_PIPE_VAR = "BRAEBURN_LAUNCHER_PIPE"  # the descriptor number of the pipe's read end


def watch_launcher(fd: int) -> None:
    """SIGTERM to this process when the launcher's end of the pipe closes (the launcher died)."""

    def watch() -> None:
        try:
            while os.read(fd, 1):  # the launcher never writes: this returns only at end of file
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="braeburn-launcher-watch", daemon=True).start()


def _exit_status(done: SystemExit) -> int:
    if done.code is None or isinstance(done.code, int):
        return done.code or 0
    print(done.code, file=sys.stderr)  # what the interpreter does with a message
    return 1


def run_agent(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing import SignalException

    sys.argv = ["torchrun", *argv]
    try:
        runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
    except SignalException as stop:  # the workers are stopped already: torchrun did it before raising
        print(f"braeburn launch: stopped by {stop.sigval.name}; every worker has ended", file=sys.stderr)
        return 128 + int(stop.sigval)
    except KeyboardInterrupt:  # SIGINT before torchrun put its handler in place: no worker has started yet
        print("braeburn launch: stopped by SIGINT before any worker started", file=sys.stderr)
        return 128 + int(signal.SIGINT)
    except SystemExit as done:
        return _exit_status(done)
    except BaseException:  # a failed worker's summary (ChildFailedError), or a real error: as Python shows it
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    fd = os.environ.pop(LAUNCHER_PIPE_VAR, None)
    if fd is not None:
        watch_launcher(int(fd))
    code = run_agent(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # nothing left to clean up: the workers have ended and the rendezvous store is closed


if __name__ == "__main__":
    main()
