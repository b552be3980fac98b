"""Two `--resume` of one run at once (issue #17, item 5): real processes; one trains, the other
is refused in one line, and the run's metrics come from one process only."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import mlflow
import pytest

from pipeline.tracking.resume_lock import CLAIM_PREFIX, HEARTBEAT_PREFIX
from tests.conftest import subprocess_env

pytestmark = pytest.mark.slow

ARGS = ["--subset", "4000", "--val-size", "500", "--spec", "tiny",
        "--scores-run", "none", "--progress", "false"]  # fmt: skip
EPOCHS = 8


def _killed_run_with_a_checkpoint(client: mlflow.MlflowClient, command: list[str], env: dict) -> str:
    """A real run of EPOCHS epochs, stopped by SIGTERM once its first checkpoint is logged."""
    first = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
        if runs and client.list_artifacts(runs[0].info.run_id, "checkpoints"):
            break
        time.sleep(0.1)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=120) != 0
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.info.status == "KILLED"
    return run.info.run_id


def test_a_second_resume_of_the_same_run_is_refused(tracking, tmp_path):
    client = mlflow.MlflowClient()
    command = [sys.executable, "-m", "pipeline.train_static", *ARGS, "--epochs", str(EPOCHS)]
    env = {**subprocess_env(tracking), "OMP_NUM_THREADS": "1"}
    run_id = _killed_run_with_a_checkpoint(client, command, env)
    command += ["--resume", run_id]
    both = [subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outcomes = sorted((p.wait(timeout=600), p.stderr.read()) for p in both)

    (ok, _), (refused, why) = outcomes
    assert (ok, refused) == (0, 2), outcomes
    # Refused in one line either way: by the resume lock, or, when the other process has already
    # claimed the run and started it, by the run's RUNNING status (which comes first is a race).
    by_lock = f"error: --resume {run_id}: process" in why and "is already resuming this run" in why
    by_status = f"error: --resume {run_id} is RUNNING in process" in why
    assert (by_lock or by_status) and why.count("\n") == 1, why
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run_id, "val/acc")]
    assert steps == list(range(EPOCHS))  # each epoch once: one process trained those after the kill
    assert not [t for t in run.data.tags if t.startswith((CLAIM_PREFIX, HEARTBEAT_PREFIX))]
