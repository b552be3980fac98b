"""The test split is evaluate's: every step that trains, tunes or selects runs to the end with
the data loader refusing the test split (``GCNN_REFUSE_TEST_SPLIT=1``), so none of them can have
loaded it. score_difficulty scores it before the guard is set (see its README section)."""

from __future__ import annotations

import mlflow
import pytest
from click.testing import CliRunner

from pipeline import score_difficulty, train_dynamic, train_static, tune
from pipeline.data.config import DataConfig, DataError
from pipeline.data.splits import REFUSE_TEST_ENV, load_data

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")]

DATA = ["--subset", "300"]
TRAIN = [*DATA, "--epochs", "2", "--progress", "false"]


def _ok(command, args: list[str]) -> None:
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, (command.name, result.output[-3000:])


def test_training_and_tuning_never_load_the_test_split(tracking, monkeypatch):
    _ok(score_difficulty.main, [*DATA, "--folds", "2", "--epochs", "1", "--scorers", "loss"])
    monkeypatch.setenv(REFUSE_TEST_ENV, "1")
    with pytest.raises(DataError, match="test split is refused"):  # the guard bites
        load_data(DataConfig(subset=300), include_test=True)
    _ok(train_static.main, [*TRAIN, "--spec", "tiny", "--pacing", "tiers"])
    _ok(train_dynamic.main, TRAIN)
    _ok(tune.main, [*DATA, "--epochs", "2", "--n-trials", "2", "--pruner", "none", "--max-events", "1"])
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    kinds = {r.data.tags.get("entry_point") for r in runs if r.info.status == "FINISHED"}
    assert {"score_difficulty", "train_static", "train_dynamic", "tune"} <= kinds
    tune_run = next(r for r in runs if r.data.tags.get("tune_role") == "study")
    assert tune_run.data.params["pacings_searched"] != "none"  # tune read the scores table too
