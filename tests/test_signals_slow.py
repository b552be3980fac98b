"""SIGTERM to `mlflow run`, or to main, reaches the step it started (issue #17, item 7): real
processes and real signals; the step's run ends KILLED with its checkpoint, none stays RUNNING."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import mlflow
import pytest

from pipeline.tracking.errors import FAILURE_TAG
from pipeline.tracking.processes import PID_TAG
from tests.conftest import REPO, subprocess_env

pytestmark = pytest.mark.slow

STEP = {"subset": "4000", "val_size": "500", "spec": "tiny", "epochs": "40",
        "scores_run": "none", "progress": "false"}  # fmt: skip


def _until(predicate, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def _training_with_a_checkpoint():
    client = mlflow.MlflowClient()
    for run in mlflow.search_runs(search_all_experiments=True, output_format="list"):
        training = run.data.tags.get("entry_point", "").startswith("train_")
        if (
            training
            and run.info.status == "RUNNING"
            and client.list_artifacts(run.info.run_id, "checkpoints")
        ):
            return run
    return None


def _closed(run_id: str):
    run = mlflow.MlflowClient().get_run(run_id)
    return run if run.info.status != "RUNNING" else None


def _assert_killed_with_checkpoint(run):
    assert run.info.status == "KILLED" and run.data.tags[FAILURE_TAG] == "interrupted"
    assert mlflow.MlflowClient().list_artifacts(run.info.run_id, "checkpoints")
    pid = int(run.data.tags[PID_TAG])
    _until(lambda: not os.path.exists(f"/proc/{pid}"), 30)  # no orphan trains on


def test_sigterm_to_mlflow_run_reaches_the_step(tracking):
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "run",
        str(REPO),
        "-e",
        "train_static",
        "--env-manager",
        "local",
    ]
    for key, value in STEP.items():
        command += ["-P", f"{key}={value}"]
    launcher = subprocess.Popen(command, env=subprocess_env(tracking), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        step = _until(_training_with_a_checkpoint)
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=60)  # mlflow run dies at once; the step must notice
        _assert_killed_with_checkpoint(_until(lambda: _closed(step.info.run_id), 120))
    finally:
        launcher.kill()


def test_sigterm_to_main_ends_its_step_then_itself_killed(tracking):
    args = ["--subset", "2000", "--epochs", "30", "--seeds", "0"]
    main = subprocess.Popen([sys.executable, "-m", "pipeline.main", *args], env=subprocess_env(tracking),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        step = _until(_training_with_a_checkpoint, 600)
        main.send_signal(signal.SIGTERM)
        assert main.wait(timeout=120) == 130
        _assert_killed_with_checkpoint(mlflow.MlflowClient().get_run(step.info.run_id))
        runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
        (parent,) = [r for r in runs if r.data.tags.get("entry_point") == "main"]
        assert parent.info.status == "KILLED"
        assert parent.info.end_time >= mlflow.MlflowClient().get_run(step.info.run_id).info.end_time
        assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"]
    finally:
        main.kill()


def _three_epochs_logged():
    client = mlflow.MlflowClient()
    for run in mlflow.search_runs(search_all_experiments=True, output_format="list"):
        if run.info.status == "RUNNING" and len(client.get_metric_history(run.info.run_id, "val/acc")) >= 3:
            return run
    return None


def test_a_run_stopped_then_resumed_to_the_end_is_finished_with_one_point_a_step(tracking):
    # Checkpoints of these quick epochs are rarer than epochs (never over 2% of the run), so a
    # stop after three logged epochs falls after the last checkpoint: the resumed run trains
    # epochs again that the stopped one had logged.
    options = [arg for key, value in STEP.items() for arg in (f"--{key.replace('_', '-')}", value)]
    command = [sys.executable, "-m", "pipeline.train_static", *options]
    step = subprocess.Popen(command, env=subprocess_env(tracking), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        run = _until(_three_epochs_logged)
        step.send_signal(signal.SIGTERM)
        step.wait(timeout=60)
        _assert_killed_with_checkpoint(_until(lambda: _closed(run.info.run_id), 120))
    finally:
        step.kill()
    resumed = subprocess.run([*command, "--resume", run.info.run_id], env=subprocess_env(tracking),
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    client = mlflow.MlflowClient()
    done = client.get_run(run.info.run_id)
    assert done.info.status == "FINISHED"
    assert FAILURE_TAG not in done.data.tags and done.data.tags["resumed_after"] == "interrupted"
    for metric in ("val/acc", "train/loss", "time/epoch_s"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
        assert sorted(steps) == list(range(int(STEP["epochs"]))), (metric, steps)
