"""Modules, classes and functions past their size limits, read from the source (nothing is
imported).

    .venv/bin/python scripts/module_sizes.py                  # pipeline/, models/, scripts/; exit 1 past one
    .venv/bin/python scripts/module_sizes.py --root DIR pkg   # other folders under another root

A module stays under MAX_MODULE_LINES lines and a class (its decorators included) under
MAX_CLASS_LINES: past them a file or a class has grown more than one topic, and the layout no
longer tells a reader where a behaviour lives. A function of pipeline/ (from its ``def`` to its
last line) is at most MAX_FUNCTION_LINES long: one that does more is several steps that want
names of their own. Benchmarks' ``main`` functions in scripts/ are scripts, not library code.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("pipeline", "models", "scripts")
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 200
MAX_FUNCTION_LINES = 80
FUNCTION_FOLDERS = ("pipeline",)


def _python_files(root: Path, folders: tuple[str, ...]) -> list[Path]:
    return [path for folder in folders for path in sorted((root / folder).rglob("*.py"))]


def oversized(
    root: Path = REPO,
    folders: tuple[str, ...] = FOLDERS,
    function_folders: tuple[str, ...] = FUNCTION_FOLDERS,
) -> list[str]:
    """One line per module, class or function past its limit, naming it and its length."""
    out = []
    with_functions = set(_python_files(root, function_folders))
    for path in _python_files(root, folders):
        text = path.read_text()
        where = path.relative_to(root)
        if len(text.splitlines()) >= MAX_MODULE_LINES:
            out.append(f"{where}: {len(text.splitlines())} lines (limit: under {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - first + 1 >= MAX_CLASS_LINES:
                    out.append(
                        f"{where}: class {node.name} is {node.end_lineno - first + 1} lines "
                        f"(limit: under {MAX_CLASS_LINES})"
                    )
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and path in with_functions:
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(
                        f"{where}: function {node.name} is {length} lines (limit: {MAX_FUNCTION_LINES})"
                    )
    return out


def main(argv: list[str]) -> int:
    root, folders, function_folders = REPO, FOLDERS, FUNCTION_FOLDERS
    if argv[:1] == ["--root"]:
        root, folders = Path(argv[1]), tuple(argv[2:])
        function_folders = folders
    found = oversized(root, folders, function_folders)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
