"""A main step whose process dies before it can close its own run (here: a `python` on PATH that
exits at once) ends that run FAILED with the reason, not RUNNING forever (issue 34, item 3); and
main refuses --epochs 1 before any step runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _main(tracking: str, *args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking, "PYTHONPATH": str(REPO)}
    if path is not None:
        env["PATH"] = path
    command = [sys.executable, "-m", "pipeline.main", "--subset", "300", "--seeds", "0", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)


@pytest.mark.parametrize(
    ("with_mlflow", "reason"),
    [(False, "could not be launched"), (True, "exited without closing its run")],
    ids=["mlflow command missing", "step process dies at once"],
)
def test_a_step_that_never_closes_its_run_is_failed_with_the_reason(tracking, tmp_path, with_mlflow, reason):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text("#!/bin/sh\nexit 3\n")  # what the step's command starts
    (fake / "python").chmod(0o755)
    if with_mlflow:
        (fake / "mlflow").symlink_to(Path(sys.executable).parent / "mlflow")
    result = _main(tracking, path=f"{fake}:/usr/bin:/bin")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert runs and not [r for r in runs if r.info.status == "RUNNING"]
    (step,) = [r for r in runs if r.data.tags.get("mlflow.project.entryPoint") == "score_difficulty"]
    assert step.info.status == "FAILED"
    assert reason in step.data.tags["failure_reason"]


def test_main_refuses_one_epoch_before_scoring(tracking):
    result = _main(tracking, "--epochs", "1")
    assert result.returncode == 2
    assert "a growth schedule needs --epochs >= 2" in result.stderr
    assert not mlflow.search_runs(search_all_experiments=True, output_format="list")
