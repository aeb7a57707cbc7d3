"""Every test the docs cite exists: a renamed or removed test leaves a citation that vouches for nothing.

A citation is ``tests/<file>.py::<name>``, or ``::<name>`` in backticks after a cited file on the same line (the
tables of docs/reliability.md cite several tests of one file that way); ``<name>*`` stands for every test whose name
starts so, and a ``[parameter]`` is left off. A cited file must exist, and each cited name must be a function or
class defined in it.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from tests.doc_blocks import ROOT, doc_files

CITATION = re.compile(r"(?P<file>tests/[\w/.-]+?\.py)(?P<names>(?:::[\w*]+(?:\[[^\]`]*\])?)*)"  # a file, its names
                      r"|`(?P<more>(?:::[\w*]+(?:\[[^\]`]*\])?)+)")  # more names of the file cited before


@functools.lru_cache(maxsize=None)
def defined_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(node.name for node in ast.walk(tree)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def citations(text: str) -> list[tuple[int, str, list[str]]]:
    """(line number, cited file, the names cited in it) for each citation of ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        current = None
        for match in CITATION.finditer(line):
            current = match["file"] or current
            names = re.findall(r"::([\w*]+)", match["names"] or match["more"] or "")
            if current is None:
                names, current = ["(a name with no file cited before it on its line)"], "?"
            found.append((number, current, names))
    return found


def problem(cited: str, name: str | None) -> str | None:
    path = ROOT / cited
    if not path.is_file():
        return f"{cited} does not exist"
    if name is None:
        return None
    defined = defined_names(path)
    if name.endswith("*"):
        return None if any(d.startswith(name[:-1]) for d in defined) else f"no test of {cited} starts with {name[:-1]}"
    return None if name in defined else f"{cited} defines no {name}"


def test_the_citation_reader_finds_each_form_of_citation():
    line = ("| probe | `tests/test_a.py::test_one`, `::test_two[x]`, `tests/test_b.py` (`::test_three_*`), "
            "`MPSHooks::isOnMacOSorNewer`, tests/test_c.py::test_four |")
    assert citations(line) == [(1, "tests/test_a.py", ["test_one"]), (1, "tests/test_a.py", ["test_two"]),
                               (1, "tests/test_b.py", []), (1, "tests/test_b.py", ["test_three_*"]),
                               (1, "tests/test_c.py", ["test_four"])]
    assert problem("tests/test_docs_citations.py", "test_the_citation_reader_*") is None
    assert problem("tests/test_docs_citations.py", "test_that_was_renamed") is not None
    assert problem("tests/test_no_such_file.py", None) is not None


def test_every_test_cited_in_the_docs_exists():
    missing = []
    for doc in doc_files():
        for number, cited, names in citations(doc.read_text(encoding="utf-8")):
            for name in names or [None]:
                why = problem(cited, name) if cited != "?" else f"{name}"
                if why:
                    missing.append(f"{doc.relative_to(ROOT)}:{number}: {why}")
    assert not missing, "\n".join(missing)
