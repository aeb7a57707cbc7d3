"""The fenced blocks of README.md and docs/*.md, and how each is checked: read by tests/test_docs_blocks.py.

A block runs as written, or an HTML comment on the line right above its fence says why not. The markers:

    <!-- fragment: continues the block above -->   Python run as one script with the block above
    <!-- not run: needs a GPU -->                    the whole block is not run; the reason is one of REASONS
    <!-- not run, line 4: needs a GPU -->            only the command on that line of the block is not run
    <!-- output: what it shows -->                   results or messages shown, nothing to run
    <!-- usage: braeburn check -->                   a synopsis: each --flag in it is one `braeburn check --help` has

How an unmarked block is checked:

- ```python: run as a script (one process for all of a file's blocks, each in a fresh folder).
- ```bash, ```sh, ```shell, ```console: each command runs (a line; a trailing backslash continues it).
- any other fence (```text, a bare ```): the lines that start with "$ " run as commands, and the rest is their
  output, which is not compared (it was taken on another machine); a block with no such line must be marked.

Other HTML comments above a fence (README.md's ``<!-- test-command -->``, read by .ci/run) are left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

REASONS = {
    "needs a GPU": "CUDA (the suite runs on a CPU machine; tests/devices/test_gpu_lane.py and "
                   "benchmarks/gpu_lane.sh run what the GPU machine checks)",
    "needs a Mac": "Apple silicon (MPS)",
    "needs several machines": "a job across machines",
    "needs the network": "downloads packages or models",
    "runs the test suite": "the suite itself (CI runs it: .ci/run)",
}
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,})\s*(?P<lang>[\w+-]*)\s*$")
COMMENT = re.compile(r"^\s*<!--(?P<body>.*?)-->\s*$")
MARKER = re.compile(r"^\s*(?P<kind>fragment|not run|output|usage)(?:,\s*lines?\s+(?P<lines>[\d,\s]+))?"
                    r"\s*(?::\s*(?P<text>.*?))?\s*$")


@dataclass
class Marker:
    kind: str  # fragment | not run | output | usage
    text: str  # the reason, or what the block shows
    lines: tuple[int, ...] = ()  # "not run, line N": the block's lines (1 = the first line inside the fence)


@dataclass
class Block:
    path: Path
    line: int  # the opening fence's line in the file, from 1
    lang: str
    text: str
    markers: list[Marker] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}:{self.line}"

    def marked(self, kind: str) -> Marker | None:
        return next((m for m in self.markers if m.kind == kind and not m.lines), None)

    @property
    def skipped_lines(self) -> set[int]:
        return {n for m in self.markers if m.kind == "not run" for n in m.lines}

    @property
    def runs(self) -> bool:
        return not any(self.marked(kind) for kind in ("not run", "output", "usage"))


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of a markdown file, with the markers in the comment lines right above its fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == opening["fence"]), None)
        if end is None:
            raise ValueError(f"{path}:{i + 1}: a fence that is never closed")
        indent = len(opening["indent"])
        body = "\n".join(_dedent(line, indent) for line in lines[i + 1:end])
        blocks.append(Block(path, i + 1, opening["lang"].lower(), body + "\n", _markers_above(lines, i)))
        i = end + 1
    return blocks


def _dedent(line: str, indent: int) -> str:
    """A line of a fence indented inside a list item, without the fence's indent."""
    return line[indent:] if line[:indent].isspace() else line.lstrip() if indent else line


def _markers_above(lines: list[str], fence: int) -> list[Marker]:
    markers, j = [], fence - 1
    while j >= 0 and (comment := COMMENT.match(lines[j])):
        parsed = MARKER.match(comment["body"])
        if parsed:
            lines_named = tuple(int(n) for n in re.findall(r"\d+", parsed["lines"] or ""))
            markers.append(Marker(parsed["kind"], parsed["text"] or "", lines_named))
        j -= 1
    return markers[::-1]


def marker_problems(blocks: list[Block]) -> list[str]:
    """What is wrong with the markers: an unknown reason, a fragment with no Python above it, a line that is no command,
    a block that neither runs nor says why."""
    problems = []
    for index, block in enumerate(blocks):
        above = blocks[index - 1] if index else None
        problems += [f"{block.where}: {problem}" for marker in block.markers
                     for problem in _marker_problems(block, marker, above)]
        if block.runs and block.lang != "python" and not commands_of(block):
            problems.append(f"{block.where}: a ```{block.lang} block that runs nothing (no '$ ' line, or every line "
                            "marked): mark it <!-- output: ... -->, <!-- usage: ... --> or <!-- not run: ... -->")
    return problems


def _marker_problems(block: Block, marker: Marker, above: Block | None) -> list[str]:
    problems = []
    if marker.kind == "not run" and not any(marker.text == r or marker.text.startswith(r + ": ") for r in REASONS):
        problems.append(f"'not run: {marker.text}' gives no known reason; the reasons are: {', '.join(REASONS)} "
                        "(a detail may follow, after ': ')")
    if marker.kind == "fragment" and (marker.text != "continues the block above" or block.lang != "python" or
                                      above is None or above.lang != "python" or not above.runs):
        problems.append("a fragment is 'fragment: continues the block above', a Python block right after a Python "
                        "block that runs")
    if marker.kind in ("output", "usage") and not marker.text:
        problems.append(f"say what the {marker.kind} block shows, after '{marker.kind}: '")
    if marker.kind == "usage" and not marker.text.startswith("braeburn "):
        problems.append("'usage: braeburn VERB' names the verb whose --help it quotes")
    commands = {line for line, _ in commands_of(block, keep_skipped=True)}
    if marker.lines and not set(marker.lines) <= commands:
        problems.append(f"'not run, line {marker.lines}': the commands begin on lines {sorted(commands)}")
    return problems


def commands_of(block: Block, keep_skipped: bool = False) -> list[tuple[int, str]]:
    """(line in the block, command) for each command an unmarked shell or console block runs."""
    if block.lang == "python":
        return []
    console = block.lang not in SHELL_LANGUAGES
    commands, pending, start = [], "", 0
    for number, line in enumerate(block.text.splitlines(), start=1):
        if not pending:
            if console:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append((start, pending + line))
        pending = ""
    if keep_skipped:
        return commands
    return [(n, command) for n, command in commands if n not in block.skipped_lines]


def python_scripts(blocks: list[Block]) -> list[tuple[Block, str]]:
    """(first block, source) for each Python script: a block that runs, with the fragments that continue it."""
    scripts: list[tuple[Block, str]] = []
    for block in blocks:
        if block.lang != "python" or not block.runs:
            continue
        if block.marked("fragment") and scripts:
            first, source = scripts[-1]
            scripts[-1] = (first, source + f"\n# --- {block.where}\n" + block.text)
        else:
            scripts.append((block, f"# --- {block.where}\n" + block.text))
    return scripts
