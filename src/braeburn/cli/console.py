"""The rich console the CLI verbs print their tables to (bench, check)."""

from __future__ import annotations


def make_console():
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:  # logs and pipes: wide enough that the tables do not wrap
        console.width = 120
    return console
