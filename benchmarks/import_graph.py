"""braeburn's import graph: the import circles, and which modules of the core import a peer's compatibility layer.

    python benchmarks/import_graph.py          # counts; exit status 1 if a circle or a core -> compat import exists

Every import counts, at module level or inside a function; imports under ``if TYPE_CHECKING:`` (type-only) do not.
So do the imports that hide from a plain reading: ``importlib.import_module("braeburn.x")`` and ``__import__`` with
a literal name, and a name taken from a package that loads it lazily (a ``_WHERE = {name: module}`` map in its
``__init__.py``, as ``braeburn``, ``braeburn.trainer`` and others have): ``from braeburn import Trainer`` is an
import of the module that defines ``braeburn.Trainer``; so is a name a core package gives for the top package
(its ``PUBLIC_NAMES``: ``braeburn.trainer.loop.Trainer`` is ``braeburn.Trainer``).
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

def _relative(package: str, name: str) -> str:
    """An absolute module name for ``name`` (``.x``, ``..x`` or absolute) seen from ``package``."""
    level = len(name) - len(name.lstrip("."))
    if not level:
        return name
    base = package.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name[level:]] if name[level:] else []))


def lazy_names(root: Path, files: dict[str, Path]) -> dict[str, str]:
    """``package.name`` -> the module that defines it, from each package's ``_WHERE`` (and ``_ALIASES``) map, and
    from its ``PUBLIC_NAMES`` map (``path below the package`` -> a name of the top package, whose lookup the top
    package hands it at import: ``braeburn.trainer.loop.Trainer`` is ``braeburn.Trainer``, defined in compat/)."""
    found, public = {}, {}
    for package, path in files.items():
        if path.name != "__init__.py":
            continue
        maps = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in ("_WHERE", "_ALIASES", "PUBLIC_NAMES"):
                        try:
                            maps[target.id] = ast.literal_eval(node.value)
                        except ValueError:
                            pass
        where = maps.get("_WHERE", {})
        for name, module in where.items():
            found[f"{package}.{name}"] = _relative(package, module if module.startswith(".") else "." + module)
        for alias, name in maps.get("_ALIASES", {}).items():
            if name in where:
                found[f"{package}.{alias}"] = found[f"{package}.{name}"]
        public.update({f"{package}.{path}": name for path, name in maps.get("PUBLIC_NAMES", {}).items()})
    for path, name in public.items():
        if f"{root.name}.{name}" in found:
            found[path] = found[f"{root.name}.{name}"]
    return found


def _string_import(node: ast.Call, package: str) -> str | None:
    """The literal module name of ``importlib.import_module("...")`` or ``__import__("...")``, else None."""
    func = node.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if called not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    return _relative(package, first.value)


def imports(root: Path, path: Path, known: set[str], lazy: dict[str, str] | None = None) -> set[str]:
    name = module_name(root, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _type_checking(node) for b in node.body for n in ast.walk(b)}
    lazy = lazy or {}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _relative(package, "." * node.level + (node.module or "")) if node.level else node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names]
            targets = [lazy.get(t, t) for t in subs if t in known or t in lazy]
            targets += [mod] if any(t not in known and t not in lazy for t in subs) else []
        elif isinstance(node, ast.Call) and (literal := _string_import(node, package)):
            targets = [literal]
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
    known, lazy = set(files), lazy_names(root, files)
    return {m: imports(root, p, known, lazy) - {m} for m, p in files.items()}

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
