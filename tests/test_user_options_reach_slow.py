"""A user's curriculum option observed at the far end (issue 34, item 4): --tier-boundaries given
to train_dynamic must be the stages the run trained with (not the growth-tied default), and an
invalid one is refused; checked in the run's logged curriculum metrics, not in a building block."""

from __future__ import annotations

import mlflow
import pytest
from click.testing import CliRunner

from pipeline import score_difficulty, train_dynamic

pytestmark = pytest.mark.slow

DATA = ["--subset", "300", "--val-size", "100"]


def _stages(run_id: str) -> list[int]:
    history = mlflow.MlflowClient().get_metric_history(run_id, "curriculum/stage")
    return [int(m.value) for m in sorted(history, key=lambda m: m.step)]


def test_tier_boundaries_reach_the_curriculum(tracking):
    scored = CliRunner().invoke(
        score_difficulty.main, [*DATA, "--folds", "2", "--epochs", "1", "--scorers", "loss"]
    )
    assert scored.exit_code == 0, scored.output
    common = [*DATA, "--epochs", "5", "--progress", "false", "--pacing", "tiers", "--prune", "0"]
    runs = {}
    for name, extra in (("default", []), ("given", ["--tier-boundaries", "3,4"])):
        result = CliRunner().invoke(train_dynamic.main, [*common, *extra, "--run-name", name])
        assert result.exit_code == 0, result.output
        (run,) = mlflow.search_runs(filter_string=f"attributes.run_name = '{name}'", output_format="list")
        runs[name] = run.info.run_id
    assert _stages(runs["given"]) == [0, 0, 0, 1, 2]  # medium joins at epoch 3, hard at 4
    assert _stages(runs["default"]) != _stages(runs["given"])  # the growth-tied default differs
    bad = CliRunner().invoke(train_dynamic.main, [*common, "--tier-boundaries", "3,x"])
    assert bad.exit_code == 2 and "--tier-boundaries '3,x' must be two or three epochs" in bad.output
