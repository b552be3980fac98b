"""The label-noise path end to end on a small real subset: score the noisy data, train static,
dynamic with the tiers curriculum and its random-order control over two seeds, at equal epochs
and at static's FLOPs, evaluate; the mask, the scorers' AUC, the memorisation curves, the clean
test split and a report that pairs growth and ordering are all there. Then main's noise preset
through `mlflow run`, one seed and one noise level: it runs and says what it found."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pandas as pd
import pytest

from models.builder import build_model
from models.flops import flops_per_example
from models.spec import resolve_spec
from pipeline import evaluate, score_difficulty, train_dynamic, train_static
from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.growth.config import GrowthConfig
from pipeline.run.session import RunConfig
from pipeline.tracking.artifacts import NOISE_ARTIFACT
from pipeline.training.config import TrainConfig
from tests.conftest import mlflow_run

pytestmark = pytest.mark.slow

DATA = DataConfig(subset=600, val_size=600, label_noise=0.4)
EPOCHS = 4
QUIET = RunConfig(progress=False)


def test_noisy_study_end_to_end(tracking, tmp_path):
    client = mlflow.MlflowClient()
    scores = score_difficulty.run(DATA, score_difficulty.ScoreConfig(epochs=2, folds=2))
    metrics = client.get_run(scores).data.metrics
    # The loss of a held-out model finds wrong labels far better than chance; image size does not.
    assert metrics["noise/auc_loss_train"] > 0.7 and abs(metrics["noise/auc_input_train"] - 0.5) < 0.1
    assert metrics["noise/train_flipped_in_hard"] > metrics["noise/train_flipped_in_easy"]
    assert metrics["noise/flipped_share_train"] == pytest.approx(0.4)
    noise_md = Path(mlflow.artifacts.download_artifacts(run_id=scores, artifact_path="scores/label_noise.md"))
    assert "| loss |" in noise_md.read_text()

    data = load_data(DATA)
    final = resolve_spec("default", data.input_shape, data.num_classes)
    static_flops = flops_per_example(build_model(final), data.input_shape)["train"] * len(data.train) * EPOCHS
    for seed in (100, 101):
        for budget in ("", f"{static_flops:.17g}flops"):
            train = TrainConfig(epochs=EPOCHS, seed=seed, budget=budget)
            static = train_static.StaticConfig(spec=final.to_json())
            train_static.run(DATA, train, static, CurriculumConfig(scores_run=scores), QUIET)
            for order in ("curriculum", "random"):
                diet = DynamicCurriculumConfig(scores_run=scores, order=order)
                train_dynamic.run(DATA, train, GrowthConfig(), diet, QUIET)
    trained = "tags.entry_point != 'score_difficulty'"
    training = mlflow.search_runs(filter_string=trained, search_all_experiments=True, output_format="list")
    assert len(training) == 12
    for run in training:
        mask = client.download_artifacts(run.info.run_id, NOISE_ARTIFACT, str(tmp_path / run.info.run_id))
        table = pd.read_parquet(mask)
        assert table.loc[table["split"] == "train", "flipped"].mean() == pytest.approx(0.4)
        history = client.get_metric_history(run.info.run_id, "noise/train_acc_flipped_noisy")
        assert len(history) >= 1 and all(0 <= m.value <= 1 for m in history)
        assert run.data.params["data_noise_digest"] == data.noise_digest

    evaluation = evaluate.run(evaluate.EvaluateConfig(runs=",".join(r.info.run_id for r in training)))
    for run in training:  # the test split is clean: accuracy against its true labels, per tier
        tested = client.get_run(run.info.run_id).data.metrics
        assert 0.1 < tested["test/acc"] <= 1 and "test/acc_hard" in tested
    report_path = mlflow.artifacts.download_artifacts(run_id=evaluation, artifact_path="report/report.md")
    report = Path(report_path).read_text()
    conclusion = report.split("## Conclusion")[1].split("\n## ")[0]
    assert "vs its random-order control" in conclusion
    assert conclusion.count("vs its random-order control") == 2  # at equal epochs and at equal FLOPs
    assert "flipped training labels: memorised" in report
    figures = {a.path for a in client.list_artifacts(evaluation, "report")}
    assert "report/noise_curves.png" in figures


def test_main_noise_preset_runs_through_mlflow(tracking):
    experiment_id = mlflow.get_experiment_by_name("test").experiment_id
    result = mlflow_run(
        tracking,
        "main",
        "preset=noise",
        "subset=300",
        "epochs=2",
        "seeds=0",
        "label_noise=0.4",
        options=("--experiment-id", experiment_id),
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (main_run,) = mlflow.search_runs([experiment_id], "tags.entry_point = 'main'", output_format="list")
    # score; the preset's study; evaluate. The study's cells: static (at static's FLOPs it is
    # that run), and static holding back the hardest third, the dynamic curriculum and its
    # random-order control, each at equal epochs and at static's FLOPs
    assert main_run.data.metrics["steps/total"] == 1 + 1 + 1
    training = mlflow.search_runs(
        [experiment_id], "tags.entry_point LIKE 'train_%'", output_format="list"
    )  # fmt: skip
    assert sorted(r.data.tags["study_cell"] for r in training) == sorted(
        ["static@epochs#0"]
        + [f"{arm}@{b}#0" for arm in ("static-hold-back", "dynamic-hold-back", "dynamic-hold-back-random")
           for b in ("epochs", "flops:1")]
    )  # fmt: skip
    assert {r.data.params.get("label_noise") for r in training} == {"0.4"}
    assert "vs its random-order control" in result.stdout
