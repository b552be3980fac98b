"""Early exits end to end: train_dynamic carries the minimal network's head into an exit through
`mlflow run`, calibrates its threshold on the validation split (entropy as the confidence) and
saves both with the weights;
evaluate reports adaptive inference per tier on the test split and the report gains its section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import torch

from models.io import load_model
from tests.conftest import mlflow_run, subprocess_env

pytestmark = pytest.mark.slow


def _runs(entry_point: str):
    return mlflow.search_runs(
        search_all_experiments=True, output_format="list", filter_string=f"tags.entry_point = '{entry_point}'"
    )


def test_stage_exits_train_calibrate_save_and_evaluate_per_tier(tracking, tmp_path):
    scored = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.score_difficulty",
            "--subset",
            "2000",
            "--folds",
            "2",
            "--epochs",
            "1",
        ],
        env=subprocess_env(tracking),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    result = mlflow_run(
        tracking,
        "train_dynamic",
        "subset=2000",
        "epochs=4",
        "progress=false",
        "exits=stages",
        "exit_confidence=entropy",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = _runs("train_dynamic")
    assert run.data.tags["variant"].endswith("+exits")
    final = json.loads(run.data.tags["final_spec"])
    assert [(e["id"], e["after"]) for e in final["exits"]] == [("exit1", "pool1")]
    metrics = run.data.metrics
    # calibrated on validation within the allowed 0.2 points, and logged with the exit's own accuracy
    assert metrics["val/acc_adaptive"] >= metrics["val/acc"] - 0.002 - 1e-9
    # by the default rule, the loss's upper bound is what stays within them, on the whole split
    # and on each tier (or nothing leaves)
    assert run.data.tags["exit_calibration"] == "tiers"
    thresholds = json.loads(run.data.tags["exit_thresholds"])
    for key in ("", "_easy", "_medium", "_hard"):
        assert metrics[f"val/exit_acc_loss_bound{key}"] <= 0.2 + 1e-9 or thresholds == [1.0]
    assert metrics["val/exit_acc_loss_bound"] > metrics["val/exit_acc_loss"]
    assert {"val/acc_exit1", "val/exit_share_exit1_easy", "val/flops_adaptive"} <= set(metrics)
    client = mlflow.MlflowClient()
    path = client.download_artifacts(run.info.run_id, "model/model.safetensors", str(tmp_path))
    model = load_model(path)
    assert model.exit_thresholds == tuple(json.loads(run.data.tags["exit_thresholds"]))
    assert model.exit_confidence == run.data.tags["exit_confidence"] == "entropy"
    assert model.spec.exit_ids() == ["exit1"]

    evaluated = mlflow_run(tracking, "evaluate", f"runs={run.info.run_id}")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    metrics = mlflow.get_run(run.info.run_id).data.metrics
    for tier in ("", "_easy", "_medium", "_hard"):
        shares = metrics[f"test/exit_share_exit1{tier}"] + metrics[f"test/exit_share_head{tier}"]
        assert shares == pytest.approx(1.0)
        assert metrics[f"test/infer_ms_b1{tier}"] > 0 and metrics[f"test/infer_ms_b1_adaptive{tier}"] > 0
    assert metrics["test/flops_adaptive"] < metrics["test/flops_full"] * 1.03  # the exit's head is small
    local = Path(client.download_artifacts(run.info.run_id, "evaluation", str(tmp_path / "eval")))
    curve = json.loads((local / "exit_curve.json").read_text())
    assert curve["exits"] == ["exit1"] and len(curve["curve"]) > 10
    assert curve["confidence"] == "entropy"  # evaluate read the measure saved with the model
    assert mlflow.get_run(run.info.run_id).data.tags["test_exit_confidence"] == "entropy"
    assert (local / "exit_examples.png").stat().st_size > 0
    (evaluate_run,) = _runs("evaluate")
    report = client.download_artifacts(evaluate_run.info.run_id, "report", str(tmp_path / "report"))
    assert "Early exits" in (Path(report) / "report.md").read_text()
    assert (Path(report) / "exit_curves.png").is_file()
    # the saved model alone runs adaptive inference the way evaluate counted it
    with torch.no_grad():
        _, taken = model.eval().adaptive(torch.randn(8, 1, 28, 28))
    assert taken.shape == (8,)
