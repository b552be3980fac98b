"""Import cycles among the project's modules and among its packages, read from the source
(nothing is imported).

    .venv/bin/python scripts/import_cycles.py                  # pipeline/ and models/; exit 1 on a cycle
    .venv/bin/python scripts/import_cycles.py --root DIR pkg   # other packages under another root

Packages: each subpackage (``pipeline.training``, everything under it) and each top-level
module (``pipeline.cli``) is one unit, and the units' imports must point one way: a
package that imports another may not be imported back by it, through any path (an upward
import, e.g. ``pipeline.training`` reading tier names from ``pipeline.difficulty``, which
trains through ``pipeline.training``). Shared basics sit at the bottom as top-level modules
(``models.errors``, ``pipeline.cli``) or in a low package (``pipeline.data``).

An edge a -> b is an import of b at a's module level, including under ``if TYPE_CHECKING:``
(a type-only cycle still ties the two modules together). Imports inside functions are left
out: they run late on purpose. ``from p import x`` is an edge to ``p.x`` when that is a module,
else to ``p``; importing a submodule is not counted as importing its package's ``__init__``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "models")


def module_names(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted name -> file, for every module of ``packages`` under ``root``."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _top_level_imports(tree: ast.Module):
    """Import statements that run when the module is imported: not those inside a def or class."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def import_graph(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports at module level."""
    modules = module_names(root, packages)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _top_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1 more
                    anchor = name.split(".")[: len(name.split(".")) - node.level + is_package]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph with each module replaced by its unit: its package's first level
    below the root (``pipeline.training.config`` -> ``pipeline.training``), or itself."""

    def unit(name: str) -> str:
        return ".".join(name.split(".")[:2])

    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        out.setdefault(unit(a), set()).update(unit(b) for b in targets if unit(b) != unit(a))
    return out


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a list of modules, the first repeated at the end) per strongly connected
    group of modules that import each other; [] when there are none."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_one_cycle(graph, group) for group in groups]


def _one_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    following.append(w)
        frontier = following
    raise AssertionError("a strongly connected group always has a cycle")


def main(argv: list[str]) -> int:
    root, packages = REPO, PACKAGES
    if argv[:1] == ["--root"]:
        root, packages = Path(argv[1]), tuple(argv[2:])
    graph = import_graph(root, packages)
    cycles = find_cycles(graph)
    for cycle in cycles:
        print("import cycle: " + " -> ".join(cycle), file=sys.stderr)
    packages_cycles = find_cycles(package_graph(graph))
    for cycle in packages_cycles:
        print("package import cycle (an upward import): " + " -> ".join(cycle), file=sys.stderr)
    return 1 if cycles or packages_cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
