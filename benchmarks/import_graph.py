"""braeburn's import graph: the import circles, and which modules of the core import a peer's compatibility layer.

    python benchmarks/import_graph.py          # counts; exit status 1 if a circle or a core -> compat import exists

Every import counts, at module level or inside a function; imports under ``if TYPE_CHECKING:`` (type-only) do not.
The core is every module except ``braeburn/__init__.py`` and ``braeburn/lightning.py`` (the public API, which wires
the peers' names in), ``compat/`` (the peers' layer) and ``cli/`` (the command line, which reads peers' files).
"""
from __future__ import annotations
import ast, sys
from pathlib import Path

def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)

def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")

def imports(root: Path, path: Path, known: set[str]) -> set[str]:
    name = module_name(root, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _type_checking(node) for b in node.body for n in ast.walk(b)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names]
            targets = [t for t in subs if t in known] + ([mod] if any(t not in known for t in subs) else [])
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found

def graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(root, p): p for p in root.rglob("*.py")}
    known = set(files)
    return {m: imports(root, p, known) - {m} for m, p in files.items()}

def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in g:
        if v not in index:
            visit(v)
    return out

EDGE = ("braeburn", "braeburn.lightning")
OUTSIDE_CORE = ("braeburn.compat", "braeburn.cli")


def in_core(module: str) -> bool:
    return module not in EDGE and not any(module == p or module.startswith(p + ".") for p in OUTSIDE_CORE)


def core_to_compat(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(core module, compat module) for every import of the peers' layer by the core."""
    return sorted((m, t) for m, targets in g.items() if in_core(m) for t in targets
                  if t == "braeburn.compat" or t.startswith("braeburn.compat."))


DEFAULT_ROOT = Path(__file__).resolve().parents[1] / "src" / "braeburn"

if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ROOT
    g = graph(root)
    cs, up = cycles(g), core_to_compat(g)
    print(f"{len(g)} modules, {sum(len(v) for v in g.values())} import edges; {len(cs)} import circles "
          f"({sum(len(c) for c in cs)} modules in them); {len(up)} imports of compat/ by the core")
    for c in cs:
        print(f"  circle of {len(c)}: " + ", ".join(c))
    for m, t in up:
        print(f"  core -> compat: {m} imports {t}")
    sys.exit(1 if cs or up else 0)
