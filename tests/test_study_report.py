"""The study report, built from finished in-memory studies whose trials carry what tune records."""

from __future__ import annotations

import json
import re

import optuna
import pandas as pd
import pytest

from pipeline.tune import report as sr

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _record(trial: optuna.Trial, epochs: int, schedule: str) -> None:
    trial.set_user_attr(sr.ATTR_SCHEDULE, schedule)
    trial.set_user_attr(sr.ATTR_ARCH, "conv1(32) pool1 fc1(128)")
    trial.set_user_attr(sr.ATTR_RUN_ID, f"run{trial.number}")
    trial.set_user_attr(sr.ATTR_EPOCHS, epochs)
    trial.set_user_attr(sr.ATTR_TRAIN_S, 1.5 * epochs)
    trial.set_user_attr(sr.ATTR_TRAIN_OPTIONS, {"schedule": schedule or "none", "lr": "0.05"})


def _objective(trial: optuna.Trial, report: bool = True) -> float:
    """A cheap stand-in for a training trial: accuracy rises with lr and the number of events."""
    n = trial.suggest_int("n_growth", 0, 2)
    for k in range(1, n + 1):
        trial.suggest_categorical(f"growth{k}_layer", ["conv", "pool"])
    lr = trial.suggest_float("lr", 0.01, 0.2, log=True)
    if trial.number == 3:  # what tune does with a schedule that cannot be built
        _record(trial, 0, "1:pool;1:pool;1:pool;1:pool")
        trial.set_user_attr(sr.ATTR_INVALID, "growth event 1:pool: pool of size 2 would shrink the 1x1 map")
        raise optuna.TrialPruned("invalid")
    schedule = ";".join(f"{k}:conv" for k in range(1, n + 1))
    for epoch in range(1, 4):
        acc = 0.5 + lr + 0.05 * n + 0.05 * epoch
        _record(trial, epoch, schedule)
        if not report:  # Optuna takes no intermediate values with two objectives
            continue
        trial.report(acc, epoch)
        if trial.should_prune():
            trial.set_user_attr(sr.ATTR_PRUNED_AT, epoch)
            raise optuna.TrialPruned()
    return acc


@pytest.fixture(scope="module")
def single():
    study = optuna.create_study(
        study_name="single",
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1),
    )
    study.set_metric_names(["val/acc"])
    study.optimize(_objective, n_trials=12)
    return study


@pytest.fixture(scope="module")
def pareto():
    study = optuna.create_study(
        study_name="pareto",
        directions=["maximize", "minimize"],
        sampler=optuna.samplers.RandomSampler(seed=1),
    )
    study.set_metric_names(["val/acc", "time/cumulative_s"])

    def objective(trial):
        acc = _objective(trial, report=False)
        return acc, 10 * trial.params["n_growth"] + 50 * trial.params["lr"]

    study.optimize(objective, n_trials=12)
    return study


def _html_is_self_contained(page: str) -> None:
    assert "<script" not in page.lower()
    # Nothing fetched from anywhere: every src is inline data.
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]*)"', page))
    assert "http://" not in page and "https://" not in page


def test_report_on_a_single_objective_study(single, tmp_path):
    written = sr.build_report(single, tmp_path)
    assert {
        "trials.csv",
        "best_trials.json",
        "report.html",
        "optimization_history.png",
        "intermediate_values.png",
        "param_importances.png",
        "parallel_coordinate.png",
    } <= set(written)
    table = pd.read_csv(written["trials.csv"])
    assert list(table["number"]) == list(range(12))
    assert table.loc[3, "state"] == "PRUNED" and "would shrink" in table.loc[3, "reason"]
    assert table[sr.ATTR_EPOCHS].sum() == sum(t.user_attrs[sr.ATTR_EPOCHS] for t in single.trials)
    assert {"val/acc", "param:lr", "param:n_growth", sr.ATTR_SCHEDULE, sr.ATTR_RUN_ID} <= set(table.columns)
    best = json.loads(written["best_trials.json"].read_text())
    assert [b["number"] for b in best] == [single.best_trial.number]
    assert best[0]["schedule"] == single.best_trial.user_attrs[sr.ATTR_SCHEDULE]
    assert best[0]["values"] == {"val/acc": pytest.approx(single.best_value)}
    page = written["report.html"].read_text()
    _html_is_self_contained(page)
    assert page.count("data:image/png;base64,") == 4
    assert f"<td>{single.best_trial.number}</td>" in page


def test_report_on_a_two_objective_study_shows_its_pareto_front(pareto, tmp_path):
    written = sr.build_report(pareto, tmp_path)
    assert "pareto_front.png" in written and "intermediate_values.png" not in written
    best = json.loads(written["best_trials.json"].read_text())
    front = {t.number for t in pareto.best_trials}
    assert {b["number"] for b in best} == front and len(front) >= 2
    accs = [b["values"]["val/acc"] for b in best]
    assert accs == sorted(accs, reverse=True)
    _html_is_self_contained(written["report.html"].read_text())
    assert "Pareto front" in written["report.html"].read_text()


def test_summary_counts_states_and_compute(single):
    summary = sr.summary(single)
    states = [t.state for t in single.trials]
    assert summary["study/trials"] == 12
    assert summary["study/pruned"] == states.count(optuna.trial.TrialState.PRUNED) >= 1
    assert summary["study/invalid"] == 1
    assert summary["study/epochs_trained"] == sum(t.user_attrs[sr.ATTR_EPOCHS] for t in single.trials)
    assert summary["best/val_acc"] == pytest.approx(single.best_value)


def test_report_before_any_trial_completes_says_so(tmp_path):
    study = optuna.create_study(direction="maximize")

    def pruned(trial):
        trial.suggest_float("lr", 0.01, 0.1)
        raise optuna.TrialPruned()

    study.optimize(pruned, n_trials=2)
    written = sr.build_report(study, tmp_path)
    page = written["report.html"].read_text()
    assert "No trial has completed yet" in page
    assert "Not drawn: needs" in page
    assert json.loads(written["best_trials.json"].read_text()) == []
    assert "best/val_acc" not in sr.summary(study)


def test_the_report_reads_as_a_study_with_whole_integers_and_a_full_retrain_command(single, tmp_path):
    page = sr.build_report(single, tmp_path / "study")["report.html"].read_text()
    assert "<title>Optuna study single:" in page and "tune study" not in page
    assert "mlflow run . -e train_dynamic --env-manager local -P schedule=" in page
    trials = page.split("<h2>All trials</h2>")[1]
    assert "<th>n_growth</th>" in trials and not re.search(r"<td>\d+\.0</td>", trials)  # 1, never 1.0
    assert "mlflow_run_id" not in trials  # in trials.csv; the page stays narrow
    complete = sum(t.state.name == "COMPLETE" for t in single.trials)
    if complete < sr.FEW_TRIALS_FOR_IMPORTANCE:
        assert f"computed from {complete} complete trial(s)" in page
    assert sr.retrain_command({"lr": 0.05, "epochs": 12.0}) == (
        "mlflow run . -e train_dynamic --env-manager local -P lr=0.05 -P epochs=12"
    )
