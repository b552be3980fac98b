"""No import cycles in pipeline/ or models/ (scripts/import_cycles.py reads the source), and the
check finds a cycle where there is one: one built in tmp_path, a type-only one included."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "import_cycles.py"


def _cycles(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True)


def test_pipeline_and_models_have_no_import_cycles():
    result = _cycles()
    assert result.returncode == 0, result.stderr


def _package(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_finds_a_cycle_even_a_type_only_one(tmp_path):
    _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/command.py": "from pkg import study\nfrom .config import X\n",
            "pkg/config.py": "X = 1\n",
            # What pkg.tune had: a type-only import of the module that imports this one.
            "pkg/study.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.command import Config\n"
            ),
        },
    )
    result = _cycles("--root", str(tmp_path), "pkg")
    assert result.returncode == 1
    assert "import cycle: pkg.command -> pkg.study -> pkg.command" in result.stderr
    assert "config" not in result.stderr


def test_an_import_inside_a_function_is_no_cycle(tmp_path):
    _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import f\n",
            "pkg/a.py": "def f():\n    from pkg import b\n    return b\n",
            "pkg/b.py": "from pkg import a\n",
        },
    )
    result = _cycles("--root", str(tmp_path), "pkg")
    assert result.returncode == 0, result.stderr
