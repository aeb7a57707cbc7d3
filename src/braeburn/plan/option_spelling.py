"""How a message names an option and the fix it offers: as the caller spells options.

braeburn's messages name an option as the command line does (``--resume_from_checkpoint PATH``): that is how
its scripts, the ``braeburn`` CLI and Transformers' argument parser take one, and a Python caller of
``TrainingConfig`` knows the field by that name. A front end that takes options another way
(``braeburn.lightning``: ``fit(ckpt_path=PATH)``, ``Trainer(gradient_clip_val=1.0)``) hands the core its own
:class:`Spelling` for the length of a call (:func:`spelled`); a message built meanwhile, in that thread, names
what that caller has, and leaves out advice for which it has no option. The core never imports a front end.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from .config_files import excerpt


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # no value: the option's name alone ("--max_steps")

# Where the command line's fix is not "--name value".
_COMMAND_LINE = {"cpu": "--cpu (accelerator='cpu')", "save_model": "trainer.save_model(<another folder>)",
                 "save_state": "trainer.accelerator.save_state(<another folder>)",
                 "compute_metrics": "compute_metrics"}


class Spelling:
    """The command line's spelling (braeburn's default). A front end subclasses it and overrides its methods."""

    def option(self, name: str, value: Any = UNSET) -> str | None:
        """How the user sets option ``name`` (to ``value``, given as the core holds it): ``--name value``.
        None where this caller has no way to set it: the message then leaves that advice out."""
        if name in _COMMAND_LINE:
            return _COMMAND_LINE[name]
        return f"--{name}" if value is UNSET else f"--{name} {value}"

    def given(self, name: str, value: Any) -> str:
        """Option ``name`` as the user gave it (``value`` as the core holds it), for "what was passed"."""
        return f"{name}={excerpt(value)}"

    def chosen(self, name: str, value: Any) -> str:
        """Why option ``name`` is ``value``, where the caller's options decided it: "as asked (name=value)"."""
        return f"as asked ({self.given(name, value)})"

    def shown(self, name: str, value: Any) -> str:
        """``value`` of option ``name`` as the caller names it, for a label ("precision no")."""
        return str(value)


_current: ContextVar[Spelling] = ContextVar("braeburn_option_spelling", default=Spelling())


def option(name: str, value: Any = UNSET) -> str | None:
    """How the current caller sets option ``name`` (to ``value``); None where it cannot."""
    return _current.get().option(name, value)


def given(name: str, value: Any) -> str:
    """Option ``name`` as the current caller gave it."""
    return _current.get().given(name, value)


def chosen(name: str, value: Any) -> str:
    """Why option ``name`` is ``value``, as the current caller says it ("as asked (...)")."""
    return _current.get().chosen(name, value)


def shown(name: str, value: Any) -> str:
    """``value`` of option ``name`` as the current caller names it."""
    return _current.get().shown(name, value)


def advice(template: str, name: str, value: Any = UNSET) -> str:
    """``template`` with ``{}`` filled by :func:`option`; "" where the caller has no such option (the sentence
    is left out)."""
    spelled_option = option(name, value)
    return template.format(spelled_option) if spelled_option is not None else ""


@contextmanager
def spelled(spelling: Spelling) -> Iterator[None]:
    """Messages built inside the block (in this thread) use ``spelling``."""
    token = _current.set(spelling)
    try:
        yield
    finally:
        _current.reset(token)


__all__ = ["UNSET", "Spelling", "advice", "chosen", "given", "option", "shown", "spelled"]
