"""MLproject is generated from the config dataclasses; conda.yaml is the one list of pins."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.conftest import REPO


def test_mlproject_is_up_to_date_with_the_config_defaults():
    result = subprocess.run(
        [sys.executable, "scripts/gen_mlproject.py", "--check"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_mlproject_defaults_equal_config_defaults():
    import dataclasses
    import importlib

    project = yaml.safe_load((REPO / "MLproject").read_text())
    for name, entry in project["entry_points"].items():
        module = importlib.import_module(f"pipeline.{name}")
        for cls in module.CONFIGS:
            for f in dataclasses.fields(cls):
                default = entry["parameters"][f.name]["default"]
                expected = str(f.default).lower() if isinstance(f.default, bool) else f.default
                assert default == expected, (name, f.name)
