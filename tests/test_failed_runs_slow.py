"""Every FAILED run says why (issue #17, item 8), also when click rejects a value before the
step's code runs: through a real `mlflow run` into a temporary store."""

from __future__ import annotations

import importlib

import mlflow
import pytest

from pipeline.tracking.errors import FAILURE_TAG
from pipeline.tracking.guard import GuardedCommand
from tests.conftest import mlflow_run

ENTRY_POINTS = ("main", "score_difficulty", "train_static", "train_dynamic", "evaluate", "tune")


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_every_entry_point_fails_its_run_on_a_rejected_command_line(entry_point):
    assert isinstance(importlib.import_module(f"pipeline.{entry_point}").main, GuardedCommand)


@pytest.mark.slow
def test_a_value_click_rejects_under_mlflow_run_leaves_a_failed_run_with_the_reason(tracking):
    result = mlflow_run(tracking, "train_static", "epochs=2.5", timeout=300)

    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: Invalid value for '--epochs': '2.5' is not a valid integer. (see --help)"]
    (run,) = mlflow.MlflowClient().search_runs([mlflow.get_experiment_by_name("test").experiment_id])
    assert run.info.status == "FAILED"
    assert "'2.5' is not a valid integer" in run.data.tags[FAILURE_TAG]
