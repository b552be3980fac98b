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

# 10: a quarter of it (2.5 epochs of static) buys the growing run three epochs, so that it grows
# and then prunes, one epoch after the growth, as the other dynamic runs do (at 4 or 6 epochs it
# bought too few to prune at all and was another variant, without +prune0.3).
SMALL = ("subset=300", "epochs=10", "seeds=0")
RECIPE = ("augment=flip+erase", "label_smoothing=0.1")  # a recipe every training step shares
# quick preset, one seed: score_difficulty, the preset's study, evaluate; the study's cells: static,
# the growing network, its random-order control, the growing network given the static run's
# seconds, static and the growing network both given a quarter of the static run's FLOPs
STEPS, CELLS = 3, 6


def _main(tracking: str, experiment_id: str) -> subprocess.CompletedProcess:
    return mlflow_run(
        tracking, "main", *SMALL, *RECIPE, options=("--experiment-id", experiment_id), timeout=900
    )


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
    # The preset is a study: one study step under main, every training run one of its cells.
    (study,) = _runs(experiment_id, "study")
    assert study.info.status == "FINISHED" and study.info.run_name == "study-main-quick-default"
    assert study.data.tags["mlflow.parentRunId"] == main_run.info.run_id
    assert study.data.tags["study_phase"] == "screen"  # main's seeds are tuning seeds
    assert study.data.params["arms"] == "static,dynamic,dynamic-random@epochs"
    report_files = {a.path for a in mlflow.MlflowClient().list_artifacts(study.info.run_id, "study")}
    assert {"study/report.md", "study/cells.csv", "study/frontier.png"} <= report_files
    training = _runs(experiment_id, "train_static") + _runs(experiment_id, "train_dynamic")
    assert len(training) == CELLS
    assert sorted(run.data.tags["study_cell"] for run in training) == [
        "dynamic-random@epochs#0",
        "dynamic@epochs#0",
        "dynamic@flops:0.25#0",
        "dynamic@seconds#0",
        "static@epochs#0",
        "static@flops:0.25#0",
    ]
    for run in training:  # evaluate logged the test results on each training run
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == study.info.run_id
        assert run.data.tags["study_name"] == study.data.tags["study_name"]
        assert 0.1 < run.data.metrics["test/acc"] <= 1
        assert {"test/acc_easy", "test/acc_medium", "test/acc_hard"} <= set(run.data.metrics)
    # The matched baseline trains exactly what the dynamic runs grew into (their logged models).
    specs = {run.data.tags["entry_point"]: set() for run in training}
    for run in training:
        spec = _logged_spec(run.info.run_id, tmp_path)
        specs[run.data.tags["entry_point"]].add(json.dumps([spec.input_shape, spec.layers], sort_keys=True))
    assert len(specs["train_dynamic"]) == 1 and specs["train_static"] == specs["train_dynamic"]
    # main's recipe reaches every training step, static and dynamic alike, and only those
    assert {(r.data.params["augment"], r.data.params["label_smoothing"]) for r in training} == {
        ("flip+erase", "0.1")
    }
    assert "augment" not in _runs(experiment_id, "score_difficulty")[0].data.params
    variants = {run.data.tags["variant"] for run in training}
    assert len(variants) == 3  # static, and dynamic with and against the curriculum
    # The equal-cost run: its budget is the static run's training seconds, and the Conclusion
    # compares the two at equal cost. The quarter-budget pair: both given the same FLOPs, a
    # quarter of what the static run used, and compared at that equal budget.
    static, quarter = sorted(
        _runs(experiment_id, "train_static"), key=lambda r: bool(r.data.params.get("budget"))
    )
    budgets = [run.data.params.get("budget", "") for run in _runs(experiment_id, "train_dynamic")]
    assert sorted(budgets) == ["", "", quarter.data.params["budget"], f"run:{static.info.run_id}:s"]
    quarter_flops = float(quarter.data.params["budget"].removesuffix("flops"))
    assert quarter_flops == pytest.approx(static.data.metrics["train/flops_cumulative"] / 4, rel=1e-6)
    given_flops = [r for r in training if r.data.params.get("budget", "").endswith("flops")]
    assert len(given_flops) == 2
    for run in given_flops:  # neither spent more than the quarter, and both trained
        assert 0 < run.data.metrics["train/flops_cumulative"] <= quarter_flops * (1 + 1e-9)
    answer = first.stdout.split("### ")[0]
    assert "at equal cost" in answer and "at an equal budget (both given the same training FLOPs)" in answer
    # Each run is named by what it is, and every name is unique.
    everything = mlflow.search_runs([experiment_id], output_format="list")
    steps = ("main", "score_difficulty", "evaluate")
    names = {
        r.data.tags["entry_point"]: r.info.run_name for r in everything if r.data.tags["entry_point"] in steps
    }
    assert len({run.info.run_name for run in everything}) == len(everything) == STEPS + CELLS + 1
    for run in training:  # the study's name and the cell's
        assert run.info.run_name == f"{study.data.tags['study_name']}-{run.data.tags['study_cell']}"
    assert names == {
        "main": "main-quick",
        "score_difficulty": "score-difficulty-quick",
        "evaluate": "evaluate-quick",
    }
    # Parameters as plain values: no shell quoting, long ones a digest beside their full text.
    assert static.data.params["data_dir"] == "" and static.data.params["seed"] == "0"
    assert (
        static.data.params["spec"].startswith("sha256:") and "params/spec.txt" in static.data.params["spec"]
    )
    spec_text = mlflow.artifacts.load_text(f"runs:/{static.info.run_id}/params/spec.txt")
    assert json.loads(spec_text)["layers"]
    # (main's own run is made by `mlflow run .`, which logs an empty option as '': not ours to change)
    made_by_main = [run for run in everything if run.data.tags["entry_point"] != "main"]
    assert not [v for run in made_by_main for v in run.data.params.values() if v.startswith("'")]
    # The best run by validation accuracy is registered, alias champion, and loads.
    # (300 validation examples: two runs may tie, and either is the best)
    best = max(run.data.metrics["final/val_acc"] for run in training)
    champion = mlflow.MlflowClient().get_model_version_by_alias("growing-cnn-fashion-mnist", "champion")
    (chosen,) = [run for run in training if run.info.run_id == champion.run_id]
    assert chosen.data.metrics["final/val_acc"] == best
    assert main_run.data.tags["champion"] == "models:/growing-cnn-fashion-mnist@champion"
    (evaluation,) = _runs(experiment_id, "evaluate")
    assert main_run.data.tags["evaluate_run_id"] == evaluation.info.run_id
    report = {a.path for a in mlflow.MlflowClient().list_artifacts(evaluation.info.run_id, "report")}
    assert {"report/report.html", "report/comparison.csv", "report/paired.csv"} <= report
    assert "## Conclusion" in first.stdout and "full report: runs:/" in first.stdout
    # A run this small says it cannot tell the full study's direction, under its Conclusion
    assert "Too small to tell: " in first.stdout and main_run.data.tags["caveat"].startswith("Too small")
    assert "Downloading artifacts" not in first.stdout + first.stderr  # one line per run

    second = _main(tracking, experiment_id)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"main: {STEPS} of {STEPS} steps reused" in second.stderr, second.stderr[-3000:]
    mains = _runs(experiment_id, "main")
    assert len(mains) == 2
    again = next(run for run in mains if run.info.run_id != main_run.info.run_id)
    assert again.data.metrics["steps/reused"] == STEPS
    assert set(again.data.tags["reused_runs"].split(",")) == {
        study.info.run_id,
        evaluation.info.run_id,
        main_run.data.tags["scores_run_id"],
    }
    # nothing new was trained, scored or evaluated
    assert len(_runs(experiment_id, "train_static") + _runs(experiment_id, "train_dynamic")) == CELLS
    assert len(_runs(experiment_id, "evaluate")) == len(_runs(experiment_id, "score_difficulty")) == 1
