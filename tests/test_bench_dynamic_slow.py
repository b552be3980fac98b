"""scripts/bench_dynamic.py end to end on a tiny real subset: it reports on seeds that chose
nothing, on the test split through evaluate, charges score_difficulty to the curriculum arms,
and every static arm trains exactly the grown final architecture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from models.spec import ArchSpec
from tests.conftest import REPO, subprocess_env

pytestmark = pytest.mark.slow

BENCH = [sys.executable, str(REPO / "scripts" / "bench_dynamic.py")]
ARMS = {"static", "dynamic", "curriculum", "same_time"}


def _spec(run_id: str, tmp_path: Path) -> ArchSpec:
    path = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="model/spec.json", dst_path=str(tmp_path / run_id)
    )
    return ArchSpec.from_dict(json.loads(Path(path).read_text()))


def test_the_benchmark_reports_fresh_seeds_on_test_and_counts_the_scoring(tracking, tmp_path):
    refused = subprocess.run(
        [*BENCH, "--seeds", "0,100"], env=subprocess_env(tracking), capture_output=True, text=True
    )
    assert refused.returncode == 2 and "seed(s) [0] chose the defaults" in refused.stderr

    out = tmp_path / "bench.json"
    args = ["--subset", "300", "--epochs", "4", "--seeds", "100", "--output", str(out)]
    result = subprocess.run(
        [*BENCH, *args], env=subprocess_env(tracking), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["seeds"] == [100] and report["seeds_disjoint_from_tuning"]
    assert report["machine_start"]["torch_threads"] >= 1 and len(report["machine_end"]["loadavg_1_5_15"]) == 3
    scoring = report["score_difficulty"]
    assert scoring["seconds"] > 0 and scoring["flops"] > scoring["flops_fold_training"] > 0
    (row,) = report["runs"]
    assert sorted(row["order"][:3]) == ["curriculum", "dynamic", "static"] and row["order"][3] == "same_time"
    for arm in ("dynamic", "curriculum"):  # two curriculum runs share the scoring
        numbers = row[arm]
        assert numbers["train_s_charged"] == pytest.approx(numbers["train_s"] + scoring["seconds"])
        assert numbers["train_s_amortised"] == pytest.approx(numbers["train_s"] + scoring["seconds"] / 2)
        assert numbers["flops_charged"] == pytest.approx(numbers["flops"] + scoring["flops"])
    assert row["time_ratio_charged"] > row["time_ratio_amortised"] > row["time_ratio"]

    client = mlflow.MlflowClient()
    grown = _spec(row["dynamic"]["run_id"], tmp_path)
    assert grown.layers == ArchSpec.from_dict(report["final_spec"]).layers
    for arm in ARMS:
        run = client.get_run(row[arm]["run_id"])
        assert row[arm]["test_acc"] == run.data.metrics["test/acc"]  # through evaluate
        assert run.data.tags["evaluated_by"] == report["evaluate_run"]
        spec = _spec(row[arm]["run_id"], tmp_path)
        assert (spec.layers, spec.input_shape) == (grown.layers, grown.input_shape), arm
