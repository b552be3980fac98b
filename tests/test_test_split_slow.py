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


def test_evaluate_scores_the_test_split_and_cuts_its_tiers_there(tracking, tmp_path):
    """Planted bug: evaluate scoring validation and reporting it as test (issue 34, item 4).
    Under 40% label noise the validation labels are noisy and the test labels are not, so the
    two accuracies part by far more than noise: test/acc must be the model's accuracy on the
    test split recomputed here, and each tier's the accuracy on that tier's test examples."""
    from models.io import load_model
    from pipeline import evaluate
    from pipeline.difficulty.scores_table import load_scores
    from pipeline.training.loop import evaluate_split

    noisy = [*DATA, "--label-noise", "0.4"]
    _ok(score_difficulty.main, [*noisy, "--folds", "2", "--epochs", "1", "--scorers", "loss"])
    _ok(train_static.main, [*noisy, "--epochs", "3", "--progress", "false", "--spec", "tiny"])
    (run,) = mlflow.search_runs(filter_string="tags.entry_point = 'train_static'", output_format="list")
    _ok(evaluate.main, ["--runs", run.info.run_id])
    logged = mlflow.get_run(run.info.run_id).data.metrics
    path = mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id, artifact_path="model/model.safetensors", dst_path=str(tmp_path)
    )
    model = load_model(path)
    data = load_data(DataConfig(subset=300, label_noise=0.4), include_test=True)
    test, val = evaluate_split(model, data.test), evaluate_split(model, data.val)
    assert logged["test/acc"] == pytest.approx(test.acc, abs=1e-6)
    assert abs(test.acc - val.acc) > 0.1  # what scoring validation would have reported instead
    tiers = load_scores(run.data.tags["scores_run_id"], data).tiers_for(data.test, "test")
    for t, name in enumerate(("easy", "medium", "hard")):
        assert logged[f"test/acc_{name}"] == pytest.approx(
            float(test.correct[tiers == t].float().mean()), abs=1e-6
        )
