"""The idiom catalogue: every idiom of a peer that braeburn claims, with its outcome, run under the peer and
under braeburn in the same test, and the tables of docs/migrating.md made from it.

Each peer's catalogue lives in ``tests/compat/<peer>/test_catalogue*.py``: a ``Catalogue`` whose idioms are
functions registered with ``@catalogue.idiom(name, outcome, how)``. An idiom's function is the test body: it runs
the idiom the way the peer's docs write it, under the real peer and under braeburn, and checks the outcome with
``assert_identical``, ``assert_on_purpose`` or ``assert_refused`` below. A crash, or a difference without a
message, fails the test, so a catalogue that passes has no third outcome.

The outcomes:

- ``identical``: same losses per step, logged names and values, callback calls and their order, files written and
  exit status; bitwise on the CPU unless ``how`` states the tolerance and why the arithmetic differs.
- ``on purpose``: braeburn differs and says so at run time in one line that names the option (``how`` is that line's
  gist).
- ``refused``: braeburn refuses before training, in one error that names the idiom and the way to get what the
  user wanted (``how`` is the way out).

``python -m tests.compat.catalogue`` writes each catalogue's table into docs/migrating.md between
``<!-- catalogue: <peer> -->`` and ``<!-- /catalogue: <peer> -->``; ``tests/compat/test_catalogue_docs.py`` fails
when the page and the catalogues disagree.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest

OUTCOMES = ("identical", "on purpose", "refused")
PEERS = ("transformers", "accelerate", "lightning")
ROOT = Path(__file__).resolve().parents[2]
MIGRATING = ROOT / "docs" / "migrating.md"


@dataclass(frozen=True)
class Idiom:
    """One idiom: ``name`` as a user writes it, its ``outcome``, ``how`` (see the module's docstring)."""

    name: str
    outcome: str
    how: str
    run: Callable[..., Any]


@dataclass
class Catalogue:
    """One peer's idioms, in the order they were registered (the order of the docs' table)."""

    peer: str
    idioms: list[Idiom] = field(default_factory=list)

    def idiom(self, name: str, outcome: str, how: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome {outcome!r} of idiom {name!r}: one of {OUTCOMES}")
        if any(known.name == name for known in self.idioms):
            raise ValueError(f"idiom {name!r} is in the {self.peer} catalogue twice")

        def register(run: Callable[..., Any]) -> Callable[..., Any]:
            self.idioms.append(Idiom(name, outcome, how, run))
            return run

        return register

    def params(self) -> list[Any]:
        """For ``@pytest.mark.parametrize("idiom", catalogue.params())``: one test per idiom, named by it."""
        return [pytest.param(idiom, id=_test_id(idiom.name)) for idiom in self.idioms]

    def counts(self) -> dict[str, int]:
        return {outcome: sum(idiom.outcome == outcome for idiom in self.idioms) for outcome in OUTCOMES}


def _test_id(name: str) -> str:
    return re.sub(r"[^\w.=-]+", "_", name).strip("_")[:80]


# ---------------------------------------------------------------------------------------------- outcomes


@dataclass
class Observation:
    """What a user can see of a run: compared field by field between the peer and braeburn."""

    losses: list[float] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    exit: str | None = None  # the error's type and message when the run raised, else None
    extra: dict[str, Any] = field(default_factory=dict)


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            return False
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b if rtol == 0 and atol == 0 else math.isclose(a, b, rel_tol=rtol, abs_tol=atol)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y, rtol, atol) for x, y in zip(a, b))
    return a == b


def assert_identical(peer: Observation, ours: Observation, *, rtol: float = 0.0, atol: float = 0.0,
                     ignore: Iterable[str] = ()) -> None:
    """Every field of the two observations equal (floats within rtol/atol; 0 means bitwise), but those in ``ignore``."""
    skipped = set(ignore)
    for name in ("exit", "calls", "files", "losses", "metrics", "extra"):
        if name in skipped:
            continue
        theirs, mine = getattr(peer, name), getattr(ours, name)
        assert _close(theirs, mine, rtol, atol), f"{name} differ:\n  peer:     {theirs!r}\n  braeburn: {mine!r}"


def assert_on_purpose(lines: Iterable[str], option: str) -> str:
    """Exactly one line of what braeburn printed or warned names ``option``; returns it."""
    naming = [line for line in lines if option in line]
    assert len(naming) == 1, f"expected one line naming {option!r}, got {naming!r}"
    return naming[0]


def assert_refused(error: BaseException, idiom_words: Iterable[str], way_out_words: Iterable[str]) -> None:
    """One clear error, raised on purpose by braeburn's own code (not an AttributeError from inside a peer's or
    torch's code), naming the idiom and the way out."""
    import traceback

    import braeburn

    message = str(error)
    assert not isinstance(error, (AttributeError, KeyError, IndexError, NameError, AssertionError)), (
        f"a crash, not a refusal: {error!r}")
    frames = traceback.extract_tb(error.__traceback__)
    package = str(Path(braeburn.__file__).resolve().parent)
    assert frames and str(Path(frames[-1].filename).resolve()).startswith(package), (
        f"raised outside braeburn ({frames[-1].filename if frames else '?'}): {error!r}")
    for word in (*idiom_words, *way_out_words):
        assert word in message, f"the refusal does not name {word!r}: {message}"

# ---------------------------------------------------------------------------------------------- the docs


def _catalogue_modules() -> Iterable[Any]:
    here = Path(__file__).resolve().parent
    for peer in PEERS:
        for info in pkgutil.iter_modules([str(here / peer)]):
            if info.name.startswith("test_catalogue"):
                yield importlib.import_module(f"tests.compat.{peer}.{info.name}")


def catalogues() -> dict[str, Catalogue]:
    """Every peer's catalogue, its idioms gathered from all of its ``test_catalogue*`` modules."""
    found = {peer: Catalogue(peer) for peer in PEERS}
    for module in _catalogue_modules():
        for value in vars(module).values():
            if isinstance(value, Catalogue) and value.peer in found:
                found[value.peer].idioms.extend(value.idioms)
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(catalogue: Catalogue) -> str:
    counts = catalogue.counts()
    head = (f"{len(catalogue.idioms)} idioms, each run under {catalogue.peer} and braeburn by "
            f"`tests/compat/{catalogue.peer}/`: {counts['identical']} identical, {counts['on purpose']} "
            f"different on purpose (one line at run time says so), {counts['refused']} refused before training "
            f"with the way out; 0 crashes, 0 silent differences.")
    rows = ["| idiom | outcome | how |", "|---|---|---|"]
    rows += [f"| `{_cell(i.name)}` | {i.outcome} | {_cell(i.how)} |" for i in catalogue.idioms]
    return "\n".join([head, "", *rows])


def _markers(peer: str) -> tuple[str, str]:
    return f"<!-- catalogue: {peer} -->", f"<!-- /catalogue: {peer} -->"


def rendered(page: str, found: dict[str, Catalogue]) -> str:
    """``page`` with each catalogue's table between its markers (a peer without markers is left out)."""
    for peer, catalogue in found.items():
        start, end = _markers(peer)
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
        page = pattern.sub(lambda _: f"{start}\n{table(catalogue)}\n{end}", page)
    return page


def main(argv: list[str]) -> int:
    page = MIGRATING.read_text()
    new = rendered(page, catalogues())
    if "--check" in argv:
        return 0 if new == page else 1
    MIGRATING.write_text(new)
    return 0


if __name__ == "__main__":
    # run as `python -m`, this file is __main__, whose Catalogue class is not the one the catalogues were made of
    from tests.compat import catalogue as _shared

    sys.exit(_shared.main(sys.argv[1:]))
