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


def test_bootstrap_installs_exactly_the_conda_pip_pins():
    conda = yaml.safe_load((REPO / "conda.yaml").read_text())
    pip_section = next(d["pip"] for d in conda["dependencies"] if isinstance(d, dict) and "pip" in d)
    printed = subprocess.run(
        ["bash", "scripts/bootstrap.sh", "--pins"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert printed == pip_section
    # The test runner itself must come from the pins, or a fresh .venv cannot run this suite.
    assert any(pin.startswith("pytest==") for pin in printed)


def test_every_pin_is_exact():
    conda = yaml.safe_load((REPO / "conda.yaml").read_text())
    pip_section = next(d["pip"] for d in conda["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert all("==" in pin for pin in pip_section), pip_section
