"""A tracking store that cannot be reached or written gets one line naming it and what to do,
exit status 2, and no traceback (issue #17, item 10); a run that could be opened ends FAILED."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
from click.testing import CliRunner

from pipeline import evaluate, train_static
from pipeline.tracking.errors import FAILURE_TAG
from tests.conftest import subprocess_env

ARGS = ["--subset", "300", "--val-size", "100", "--spec", "tiny", "--epochs", "1", "--scores-run", "none"]


@contextlib.contextmanager
def read_only(path: Path):
    """``path`` unwritable even for root (immutable), restored afterwards."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(path)]).returncode != 0:
        pytest.skip("cannot make a file read-only for root here (no chattr or no ext4)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_an_unreachable_server_fails_fast_in_one_line(monkeypatch):
    uri = "http://127.0.0.1:9/"  # the discard port: nothing listens
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_RUN_ID", "a" * 32)  # as under `mlflow run`: not retried either
    mlflow.set_tracking_uri(uri)
    start = time.monotonic()
    result = CliRunner().invoke(evaluate.main, [])
    assert time.monotonic() - start < 30  # MLflow's retries took 253 s
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith(f"error: tracking server {uri} is unreachable")
    assert "MLFLOW_TRACKING_URI" in result.stderr


def test_a_read_only_tracking_store_is_one_line(tracking, tmp_path):
    # A process of its own: this one's database engine opened the store while it was writable.
    with read_only(tmp_path / "mlflow.db"):
        result = subprocess.run(
            [sys.executable, "-m", "pipeline.train_static", *ARGS],
            env=subprocess_env(tracking),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"error: tracking store {tracking} cannot be written ((sqlite3.OperationalError) attempt to "
        "write a readonly database): make it writable, or point MLFLOW_TRACKING_URI at a writable store"
    ]


def test_a_read_only_artifact_store_fails_the_run_before_training(tracking, tmp_path):
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir(exist_ok=True)
    with read_only(artifacts):
        result = CliRunner().invoke(train_static.main, ARGS)
    assert result.exit_code == 2, result.output
    assert f"error: artifact store {artifacts}" in result.stderr and "cannot be written" in result.stderr
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.info.status == "FAILED" and "cannot be written" in run.data.tags[FAILURE_TAG]
    assert not run.data.metrics  # refused before the first epoch
