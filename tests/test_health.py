"""A run's health verdict (issue 34, item 1): a dead network is never reported as a result.

The verdict is a pure function of the history (unit tests on hand-written histories); a real
collapse is provoked cheaply (a warm-up to a rate of 0.5 kills the tiny network without a NaN)
and must stop the run, end FINISHED with stop_reason and health ``collapsed``, and say so.
"""

from __future__ import annotations

import dataclasses

import mlflow
import pytest
from click.testing import CliRunner

from pipeline import train_static
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.health import assess, should_stop
from pipeline.training.training_plan import TrainingPlan
from tests.conftest import fresh_state

CHANCE = 0.1


def _history(*accs: float, share: float = 0.2, **columns) -> list[dict]:
    rows = [{"epoch": e, "val/acc": acc, "val/top_class_share": share} for e, acc in enumerate(accs)]
    for key, values in columns.items():
        for row, value in zip(rows, values):
            row[key.replace("__", "/")] = value
    return rows


GROWTH_AT_3 = [{"epoch": 3, "layer_id": "conv2"}, {"epoch": 3, "layer_id": "res1"}]


def test_a_steady_run_is_ok_and_growth_dips_are_measured():
    health = assess(_history(0.4, 0.5, 0.55, 0.56, 0.6), GROWTH_AT_3, CHANCE, 0.05)
    assert health.verdict == "ok"
    assert health.growth_dips == {3: pytest.approx(0.01)}
    assert health.metrics()["growth/dip_median"] == pytest.approx(0.01)


def test_a_drop_at_growth_that_recovers_is_a_dip_naming_the_growth():
    health = assess(_history(0.4, 0.5, 0.63, 0.33, 0.6, 0.66), GROWTH_AT_3, CHANCE, 0.05)
    assert health.verdict == "dipped"
    assert health.worst.epoch == 3 and health.worst.size == pytest.approx(0.30)
    assert health.worst.recovered
    assert "in epoch 4 (after growth (conv2, res1)" in health.describe()
    assert health.growth_dips[3] == pytest.approx(-0.30)


def test_a_drop_at_the_easy_tiers_retirement_names_it():
    shares = (1.0, 0.6, 0.3, 0.0)
    stages = (0, 1, 2, 3)
    history = _history(0.5, 0.6, 0.7, 0.55, curriculum__stage=stages, curriculum__tier_easy_share=shares)
    health = assess(history, [], CHANCE, 0.05)
    assert "the easy tier's retirement" in health.describe() and "not recovered" in health.describe()


def test_back_at_chance_after_learning_is_a_collapse_once_it_lasts():
    dead_once = _history(0.4, 0.6, 0.1, 0.62)
    assert assess(dead_once, [], CHANCE, 0.05).verdict == "dipped"  # one bad epoch, repaired
    dead_twice = _history(0.4, 0.6, 0.1, 0.1)
    health = assess(dead_twice, GROWTH_AT_3, CHANCE, 0.05)
    assert health.verdict == "collapsed" and health.collapsed_at == 2
    assert should_stop(dead_twice, CHANCE) and not should_stop(dead_once, CHANCE)
    assert assess(_history(0.4, 0.6, 0.1), [], CHANCE, 0.05).verdict == "collapsed"  # ends dead


def test_a_constant_prediction_is_a_collapse_even_before_learning():
    never_learned = _history(0.1, 0.1, share=1.0)
    assert assess(never_learned, [], CHANCE, 0.05).verdict == "collapsed"
    slow_start = _history(0.12, 0.13, 0.4)  # low but not constant: a slow start, not a death
    assert assess(slow_start, [], CHANCE, 0.05).verdict == "ok"


# A rate warmed up to 0.5 over half the run kills the tiny network after one good epoch: every
# ReLU dies, the loss settles at ln 10 and nothing is NaN (measured: val/acc 0.68, then 0.10).
COLLAPSING = TrainConfig(epochs=5, batch_size=64, deterministic=True, seed=7, lr=0.5, warmup=0.5)


def test_a_collapsing_run_stops_early_and_says_why(small_data):
    state = fit(fresh_state(small_data, COLLAPSING), small_data, COLLAPSING, TrainingPlan())
    assert state.stop_reason == "collapsed"
    assert state.history[0]["val/acc"] > 0.5
    assert state.epoch == 3  # one good epoch, then two at chance; two epochs of budget saved
    whole_cfg = dataclasses.replace(COLLAPSING, stop_on_collapse=False)
    whole = fit(fresh_state(small_data, whole_cfg), small_data, whole_cfg, TrainingPlan())
    assert whole.epoch == 5 and whole.stop_reason == "epochs"
    assert whole.history[-1]["val/acc"] == pytest.approx(CHANCE, abs=0.02)


def test_a_collapsed_train_static_run_ends_finished_and_tagged(tracking):
    args = ["--subset", "2000", "--spec", "tiny", "--epochs", "5", "--batch-size", "64", "--lr", "0.5"]
    args += ["--warmup", "0.5", "--seed", "7", "--deterministic", "true", "--progress", "false"]
    result = CliRunner().invoke(train_static.main, [*args, "--scores-run", "none"])
    assert result.exit_code == 0, result.output
    assert "health: this run stopped early collapsed" in result.output
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.info.status == "FINISHED"
    assert run.data.tags["stop_reason"] == "collapsed"
    assert run.data.tags["health"] == "collapsed"
    assert "at chance from epoch 2" in run.data.tags["health_detail"]  # counted from 1
    assert run.data.metrics["health/collapsed"] == 1.0


def test_the_report_counts_collapsed_and_dipped_seeds_before_any_mean(tracking, tmp_path):
    from pipeline.report import build_report, collect_runs
    from tests.test_report import GROWN_SPEC, STATIC_SPEC, _record

    ids = [_record("static", seed, STATIC_SPEC, 0.80, 0.6, 0.80) for seed in (0, 1, 2)]
    ids += [
        _record("dynamic-default+tiers", seed, GROWN_SPEC, acc, 0.6, 0.8)
        for seed, acc in enumerate((0.79, 0.1, 0.8))
    ]
    client = mlflow.MlflowClient()
    client.set_tag(ids[4], "health", "collapsed")  # the seed-1 dynamic run, at chance
    client.set_tag(ids[5], "health", "dipped")
    for run_id in (*ids[:4],):
        client.set_tag(run_id, "health", "ok")
    runs_df, histories, events = collect_runs(ids)
    paths = build_report(runs_df, histories, events, tmp_path / "report")
    conclusion = paths.report_md.read_text().split("## Conclusion")[1].split("\n## ")[0]
    health = conclusion.index("**Health**")
    assert health < conclusion.index("%"), "the health line comes before any mean"
    assert (
        "dynamic-default+tiers: 1 of 3 seeds collapsed (seed 1), 1 of 3 seeds dipped (seed 2)" in conclusion
    )
    assert "⚠ dynamic-default+tiers's mean includes 1 collapsed seed(s): seed 1" in conclusion
    tiers = paths.report_md.read_text().split("## Test accuracy by tier")[1].split("\n## ")[0]
    assert "dynamic-default+tiers (⚠ includes 1 collapsed seed(s): seed 1)" in tiers
    assert "static (⚠" not in tiers
