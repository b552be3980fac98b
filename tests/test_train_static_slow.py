"""train_static end to end through `mlflow run` on a small real subset, and its failure modes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import mlflow
import pytest

from models.io import load_model
from models.spec import NAMED_SPECS
from tests.conftest import mlflow_run

pytestmark = pytest.mark.slow


def _mlflow_run(tracking, *params: str, entry: str = "train_static") -> subprocess.CompletedProcess:
    return mlflow_run(tracking, entry, *params)


def test_train_static_through_mlflow_run_logs_everything(tracking, tmp_path):
    result = _mlflow_run(tracking, "subset=2000", "epochs=2", "spec=tiny", "progress=false", "run_name=smoke")
    assert result.returncode == 0, result.stderr[-3000:]
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["entry_point"] == "train_static"
    assert run.data.params["epochs"] == "2" and run.data.params["spec"] == "tiny"
    assert run.data.params["data_size_train"] == "2000"
    client = mlflow.MlflowClient()
    history = client.get_metric_history(run.info.run_id, "val/acc")
    assert [m.step for m in history] == [0, 1]
    assert history[0].value > 0.5  # chance is 0.1: the model learns from 2,000 real examples
    for key in (
        "train/loss",
        "train/acc",
        "val/loss",
        "time/epoch_s",
        "time/cumulative_s",
        "throughput/samples_per_s",
        "model/params",
        "model/flops_per_example",
        "time/total_s",
    ):
        assert key in run.data.metrics, key
    assert run.data.metrics["model/flops_per_example"] > 0
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {
        "architecture_trace.json",
        "learning_curves.png",
        "history.csv",
        "model",
        "checkpoints",
    } <= artifacts
    local = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(tmp_path))
    trace = json.loads(Path(local, "architecture_trace.json").read_text())
    assert len(trace["specs"]) == 1 and len(trace["epochs"]) == 2 and trace["events"] == []
    model = load_model(f"{local}/model/model.safetensors")
    assert model.spec.name == "tiny"
    inputs = client.get_run(run.info.run_id).inputs.dataset_inputs
    assert inputs and inputs[0].dataset.digest == run.data.params["data_digest"]


def test_bad_input_is_one_line_and_a_failed_run(tracking):
    result = _mlflow_run(tracking, "subset=2000", "epochs=1", "spec=nonexistent", "progress=false")
    assert result.returncode != 0
    # The list is the registry's, so a newly registered spec does not break this test;
    # that the message lists every name, sorted, is what it checks.
    known = ", ".join(sorted(NAMED_SPECS))
    assert {"default", "short-convs-maxhead", "tiny"} <= set(NAMED_SPECS)
    assert f"error: --spec 'nonexistent' is neither a known spec ({known})" in result.stderr
    assert "Traceback" not in result.stderr.split("error:")[0][-2000:]
    run = mlflow.search_runs(search_all_experiments=True, output_format="list")[0]
    assert run.info.status == "FAILED"
    assert "is neither a known spec" in run.data.tags["failure_reason"]
