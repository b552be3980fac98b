"""Only `mlflow run` and --resume reopen a run (issue #17, item 6): a stray MLFLOW_RUN_ID left in
the environment is refused with one line, and the run it names is left as it was."""

from __future__ import annotations

import subprocess
import sys

import mlflow
import pytest
from click.testing import CliRunner

from pipeline import train_static
from pipeline.tracking.errors import FAILURE_TAG
from pipeline.tracking.processes import owner_tags

ARGS = ["--subset", "300", "--val-size", "100", "--spec", "tiny", "--epochs", "1", "--scores-run", "none"]


def _step(monkeypatch, run_id: str):
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    return CliRunner().invoke(train_static.main, [*ARGS, "--progress", "false"])


def _runs() -> list:
    return mlflow.search_runs(search_all_experiments=True, output_format="list")


@pytest.fixture
def client(tracking):
    return mlflow.MlflowClient()


def _run(client, status: str | None, **tags: str) -> str:
    run = client.create_run(mlflow.get_experiment_by_name("test").experiment_id, tags=tags)
    if status:
        client.set_terminated(run.info.run_id, status)
    return run.info.run_id


@pytest.mark.parametrize("status", ["FINISHED", "FAILED", "KILLED"])
def test_a_closed_run_is_not_reopened(client, monkeypatch, status):
    closed = _run(client, status, entry_point="train_static")
    result = _step(monkeypatch, closed)
    assert result.exit_code == 2, result.output
    assert f"error: MLFLOW_RUN_ID {closed} names a {status} run" in result.stderr
    after = client.get_run(closed)
    assert after.info.status == status and not after.data.metrics and FAILURE_TAG not in after.data.tags
    assert [r.info.run_id for r in _runs()] == [closed]  # nothing trained anywhere


def test_an_unknown_run_id_is_one_line_not_a_traceback(client, monkeypatch):
    result = _step(monkeypatch, "0" * 32)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "names no run in this tracking store" in result.stderr


def test_a_live_run_of_another_process_is_neither_reopened_nor_failed(client, monkeypatch):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = _run(client, None, entry_point="train_static", **owner_tags(other.pid))
        result = _step(monkeypatch, live)
        assert result.exit_code == 2
        assert f"names a run of process {other.pid}" in result.stderr
        assert client.get_run(live).info.status == "RUNNING"  # its own process will close it
    finally:
        other.kill()
        other.wait()


def test_a_run_of_another_entry_point_is_refused(client, monkeypatch):
    theirs = _run(client, None, **{"mlflow.project.entryPoint": "score_difficulty"})
    result = _step(monkeypatch, theirs)
    assert result.exit_code == 2 and "names a run of score_difficulty, not train_static" in result.stderr


def test_the_run_mlflow_run_made_for_the_step_is_used(client, monkeypatch):
    fresh = _run(client, None, **{"mlflow.project.entryPoint": "train_static"})
    result = _step(monkeypatch, fresh)
    assert result.exit_code == 0, result.output
    assert client.get_run(fresh).info.status == "FINISHED"
    assert [r.info.run_id for r in _runs()] == [fresh]
