"""Entry point of the `braeburn` command. Each verb lives in its own module under cli/.

A verb module provides ``add_parser(parser)``, which adds the verb's flags to its own parser and sets ``func``
to a callable taking the parsed arguments and returning the exit status. Verbs are imported only when named on the
command line, so `braeburn doctor` does not pay for the imports of `braeburn bench`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .. import __version__
from ..errors import debug_requested

# verb -> (module under braeburn.cli, one-line help). One line per verb.
VERBS: dict[str, tuple[str, str]] = {
    "doctor": ("doctor", "report what this machine can train on, and why"),
    "launch": ("launch", "run a training script with the configured device, precision and processes"),
    "config": ("config", "set up `braeburn launch` once (questionnaire, --default, show)"),
    "check": ("check", "compare a few training steps of a script on the accelerator against the CPU"),
    "bench": ("bench", "compare the devices here on built-in workloads or a script: speed, peak, MFU"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="braeburn", description="Train PyTorch models fast on MPS, CUDA or CPU.")
    parser.add_argument("--version", action="version", version=f"braeburn {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, (module_name, help_text) in VERBS.items():
        if only is not None and verb != only:
            subparsers.add_parser(verb, help=help_text, add_help=False)
            continue
        module = importlib.import_module(f"braeburn.cli.{module_name}")
        module.add_parser(subparsers.add_parser(verb, help=help_text, description=help_text))
    return parser


def _verb_named(argv: list[str]) -> str | None:
    return next((arg for arg in argv if arg in VERBS), None)


def main(argv: list[str] | None = None) -> int:
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = _verb_named(argv)
    parser = build_parser(only=verb)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("braeburn: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # the user sees one clear line, the traceback with --debug
        if args.debug or debug_requested([]):  # --debug, or BRAEBURN_DEBUG=1
            raise
        print(f"braeburn {args.verb}: error: {error}\n(run with --debug for the full traceback)", file=sys.stderr)
        return 1
    if from_command_line and getattr(args, "exit_at_once", False):
        # `braeburn launch` after its job: nothing to clean up, so skip the seconds the interpreter takes to
        # tear down torch's modules (it loaded torch for the host facts); Ctrl-C gives the prompt back at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
