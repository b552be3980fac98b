"""main end to end through `mlflow run` on a small real subset, twice: the second time every
step is reused and nothing is trained again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import mlflow
import pytest

from models.spec import ArchSpec
from tests.conftest import mlflow_run

pytestmark = pytest.mark.slow

SMALL = ("subset=300", "epochs=2", "seeds=0")
# quick preset, one seed: score_difficulty, the static control, the dynamic variant, its
# random-order control, the dynamic variant given the static run's seconds, evaluate
STEPS = 6


def _main(tracking: str, experiment_id: str) -> subprocess.CompletedProcess:
    return mlflow_run(tracking, "main", *SMALL, options=("--experiment-id", experiment_id), timeout=900)


def _runs(experiment_id: str, entry_point: str) -> list:
    return mlflow.search_runs([experiment_id], f"tags.entry_point = '{entry_point}'", output_format="list")


def _logged_spec(run_id: str, tmp_path: Path) -> ArchSpec:
    path = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="model/spec.json", dst_path=str(tmp_path / run_id)
    )
    return ArchSpec.from_dict(json.loads(Path(path).read_text()))


def test_main_runs_the_study_and_a_second_run_reuses_every_step(tracking, tmp_path):
    experiment_id = mlflow.get_experiment_by_name("test").experiment_id
    first = _main(tracking, experiment_id)
    assert first.returncode == 0, first.stderr[-3000:]

    (main_run,) = _runs(experiment_id, "main")
    assert main_run.info.status == "FINISHED"
    assert main_run.data.metrics["steps/total"] == STEPS
    assert main_run.data.metrics["steps/reused"] == 0
    training = _runs(experiment_id, "train_static") + _runs(experiment_id, "train_dynamic")
    assert len(training) == STEPS - 2
    for run in training:  # evaluate logged the test results on each training run
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == main_run.info.run_id
        assert 0.1 < run.data.metrics["test/acc"] <= 1
        assert {"test/acc_easy", "test/acc_medium", "test/acc_hard"} <= set(run.data.metrics)
    # The matched baseline trains exactly what the dynamic runs grew into (their logged models).
    specs = {run.data.tags["entry_point"]: set() for run in training}
    for run in training:
        spec = _logged_spec(run.info.run_id, tmp_path)
        specs[run.data.tags["entry_point"]].add(json.dumps([spec.input_shape, spec.layers], sort_keys=True))
    assert len(specs["train_dynamic"]) == 1 and specs["train_static"] == specs["train_dynamic"]
    variants = {run.data.tags["variant"] for run in training}
    assert len(variants) == 3  # static, and dynamic with and against the curriculum
    # The equal-cost run: its budget is the static run's training seconds, and the Conclusion
    # compares the two at equal cost.
    (static,) = _runs(experiment_id, "train_static")
    budgets = [run.data.params.get("budget", "").strip("'") for run in _runs(experiment_id, "train_dynamic")]
    assert sorted(budgets) == ["", "", f"run:{static.info.run_id}:s"]
    assert "at equal cost" in first.stdout.split("### ")[0]
    (evaluation,) = _runs(experiment_id, "evaluate")
    assert main_run.data.tags["evaluate_run_id"] == evaluation.info.run_id
    report = {a.path for a in mlflow.MlflowClient().list_artifacts(evaluation.info.run_id, "report")}
    assert {"report/report.html", "report/comparison.csv", "report/paired.csv"} <= report
    assert "## Conclusion" in first.stdout and "full report: runs:/" in first.stdout

    second = _main(tracking, experiment_id)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"main: {STEPS} of {STEPS} steps reused" in second.stderr
    mains = _runs(experiment_id, "main")
    assert len(mains) == 2
    again = next(run for run in mains if run.info.run_id != main_run.info.run_id)
    assert again.data.metrics["steps/reused"] == STEPS
    assert set(again.data.tags["reused_runs"].split(",")) == {
        *(run.info.run_id for run in training),
        evaluation.info.run_id,
        main_run.data.tags["scores_run_id"],
    }
    # nothing new was trained, scored or evaluated
    assert len(_runs(experiment_id, "train_static") + _runs(experiment_id, "train_dynamic")) == STEPS - 2
    assert len(_runs(experiment_id, "evaluate")) == len(_runs(experiment_id, "score_difficulty")) == 1
