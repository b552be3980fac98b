"""Fast tests of score_difficulty's pieces: folds, cross-fitting bookkeeping, tiers, the table."""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from models.spec import resolve_spec
from pipeline import score_difficulty
from pipeline.cli import ConfigError
from pipeline.data.config import DataConfig
from pipeline.data.dataset import Data, Split
from pipeline.data.splits import load_data
from pipeline.data.tiers import apply_tiers, boundaries, fit_tiers, parse_fractions
from pipeline.difficulty import scores_table
from pipeline.difficulty.cross_fit import FoldPlan, cross_fit
from pipeline.difficulty.folds import CrossFitError, CrossFitLedger, check_folds, make_folds
from pipeline.difficulty.scorers import el2n_score, input_complexity, loss_score
from pipeline.difficulty.stability import mean_pairwise_spearman, spearman
from pipeline.tracking.errors import UpstreamError
from pipeline.tracking.runs import tracked_run
from pipeline.training.config import TrainConfig
from tests.conftest import REPO


def synthetic_data(n_train=60, n_val=30, n_test=30, classes=3, seed=0) -> Data:
    g = torch.Generator().manual_seed(seed)

    def split(n, offset):
        y = torch.arange(n) % classes
        x = torch.randn(n, 1, 8, 8, generator=g) + y[:, None, None, None].float()  # (N, 1, 8, 8)
        return Split(x, y, torch.arange(offset, offset + n))

    return Data(
        "synthetic",
        [f"c{i}" for i in range(classes)],
        split(n_train, 0),
        split(n_val, n_train),
        split(n_test, 0),
        "src",
        f"digest{seed}",
    )


# --- tiers -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    classes=st.integers(1, 4),
    weights=st.tuples(*[st.integers(1, 10)] * 3),
    per_class=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_train_tiers_partition_each_group_with_the_requested_fractions(n, classes, weights, per_class, seed):
    fractions = tuple(w / sum(weights) for w in weights)
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    values = torch.randint(0, 5, (n,), generator=g).float()  # many ties
    index = torch.randperm(10 * n, generator=g)[:n]
    tiers, cuts = fit_tiers(values, labels, index, "loss", fractions, per_class)
    assert set(tiers.tolist()) <= {0, 1, 2}
    groups = torch.unique(labels).tolist() if per_class else [-1]
    for group in groups:
        members = labels == group if per_class else torch.ones(n, dtype=torch.bool)
        m = int(members.sum())
        starts = boundaries(m, fractions)
        expected = [starts[0], starts[1] - starts[0], m - starts[1]]
        assert torch.bincount(tiers[members], minlength=3).tolist() == expected
        # A harder tier never holds a lower score than an easier one within the group.
        for t in (0, 1):
            lower, upper = values[members & (tiers == t)], values[members & (tiers > t)]
            if len(lower) and len(upper):
                assert lower.max() <= upper.min()
    assert set(cuts.cuts) == set(groups)


def test_ties_are_broken_by_stable_index_whatever_the_input_order():
    values = torch.zeros(9)
    labels = torch.zeros(9, dtype=torch.long)
    index = torch.tensor([40, 10, 80, 30, 70, 20, 60, 0, 50])
    tiers, _ = fit_tiers(values, labels, index, "loss", (1 / 3, 1 / 3, 1 / 3), True)
    by_index = dict(zip(index.tolist(), tiers.tolist()))
    assert [by_index[i] for i in sorted(by_index)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(3))
    again, _ = fit_tiers(values[perm], labels[perm], index[perm], "loss", (1 / 3,) * 3, True)
    assert dict(zip(index[perm].tolist(), again.tolist())) == by_index


def test_cut_points_reproduce_train_tiers_and_split_val_near_the_fractions():
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(3000) % 3
    train = torch.rand(3000, generator=g) + labels  # distinct scores, class-shifted
    tiers, cuts = fit_tiers(train, labels, torch.arange(3000), "loss", (0.2, 0.5, 0.3), True)
    assert torch.equal(apply_tiers(train, labels, cuts), tiers)
    val_labels = torch.arange(3000) % 3
    val = torch.rand(3000, generator=g) + val_labels
    val_tiers = apply_tiers(val, val_labels, cuts)
    for c in range(3):
        shares = torch.bincount(val_tiers[val_labels == c], minlength=3).float() / 1000
        assert torch.allclose(shares, torch.tensor([0.2, 0.5, 0.3]), atol=0.05)
    assert cuts.to_dict(["a", "b", "c"])["cuts"]["b"] == list(cuts.cuts[1])


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("0.3,0.3,0.3", "sums to 0.9"),
        ("0.5,0.5", "needs 3"),
        ("0.5,0.6,-0.1", "positive"),
        ("a,b,c", "comma-separated"),
    ],
)
def test_tier_fractions_that_do_not_make_three_shares_of_one_are_refused(text, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_fractions(text)


def test_bad_tier_fractions_exit_with_one_line(tracking):
    result = CliRunner().invoke(score_difficulty.main, ["--tier-fractions", "0.5,0.5,0.5", "--subset", "200"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --tier-fractions '0.5,0.5,0.5' sums to 1.5; the fractions must sum to 1"
    ]


@pytest.mark.parametrize(
    "cfg, fragment",
    [
        (score_difficulty.ScoreConfig(scorers="loss,bogus"), "unknown scorer 'bogus'"),
        (score_difficulty.ScoreConfig(scorers="el2n,input"), "--tier-scorer 'loss' is not among"),
        (score_difficulty.ScoreConfig(folds=1), "--folds must be at least 2"),
        (score_difficulty.ScoreConfig(epochs=0), "--epochs must be positive"),
    ],
)
def test_bad_score_options_are_refused(cfg, fragment):
    with pytest.raises(ConfigError, match=fragment):
        cfg.validate()


# --- cross-fitting -----------------------------------------------------------------------


def test_folds_are_stratified_disjoint_and_partition_the_training_split():
    labels = torch.arange(100) % 4
    folds = make_folds(labels, 3, repeat=0, seed=0)
    held = torch.cat([f.held_out for f in folds]).sort().values
    assert torch.equal(held, torch.arange(100))
    for fold in folds:
        assert not set(fold.trained_on.tolist()) & set(fold.held_out.tolist())
        counts = torch.bincount(labels[fold.held_out], minlength=4)
        assert int(counts.max() - counts.min()) <= 1
    other = make_folds(labels, 3, repeat=1, seed=0)
    assert not torch.equal(other[0].held_out, folds[0].held_out)
    assert len({f.seed for f in folds + other}) == 6


def test_broken_fold_bookkeeping_is_caught():
    folds = make_folds(torch.arange(30) % 3, 3, repeat=0, seed=0)
    leaky = dataclasses.replace(folds[0], held_out=torch.cat([folds[0].held_out, folds[0].trained_on[:1]]))
    with pytest.raises(CrossFitError, match="also trains on"):
        check_folds([leaky, *folds[1:]], 30)
    ledger = CrossFitLedger(folds, {"train": 30, "val": 5}, ("loss",))
    with pytest.raises(CrossFitError, match="trained on training position"):
        ledger.record(0, "train", folds[0].trained_on[:2], "loss", torch.zeros(2))
    ledger.record(0, "train", folds[0].held_out, "loss", torch.zeros(len(folds[0].held_out)))
    with pytest.raises(CrossFitError, match="twice"):
        ledger.record(0, "train", folds[0].held_out[:1], "loss", torch.zeros(1))
    with pytest.raises(CrossFitError):
        ledger.check_complete()


def test_cross_fit_scores_each_training_example_only_with_models_that_never_trained_on_it():
    data = synthetic_data()
    spec = resolve_spec("tiny", data.input_shape, data.num_classes)
    cfg = TrainConfig(epochs=2, batch_size=16, device="cpu")
    seen = []
    result = cross_fit(
        data,
        spec,
        cfg,
        torch.device("cpu"),
        folds=3,
        repeats=2,
        seed=0,
        scorers=("loss", "el2n", "input"),
        on_model=lambda i, rec: seen.append(i),
    )
    ledger = result.ledger
    assert seen == list(range(6)) and ledger.scorers == ("loss", "el2n")
    for scorer in ledger.scorers:
        scored = ledger.scored["train"][scorer]  # (models, N)
        for m, fold in enumerate(ledger.folds):
            assert not scored[m, fold.trained_on].any()
            assert torch.equal(torch.nonzero(scored[m]).flatten(), fold.held_out)
        for r in (0, 1):
            assert torch.equal(scored[3 * r : 3 * r + 3].sum(0), torch.ones(60, dtype=torch.long))
        assert ledger.scored["val"][scorer].all() and ledger.scored["test"][scorer].all()
        for split in ("train", "val", "test"):
            assert torch.isfinite(ledger.combined(split, scorer)).all()
    assert all(isinstance(FoldPlan(f).positions(0, None, data), torch.Tensor) for f in ledger.folds)
    assert torch.equal(FoldPlan(ledger.folds[0]).positions(0, None, data), ledger.folds[0].trained_on)


def test_scorers_read_higher_as_harder():
    y = torch.tensor([0, 1])
    confident = torch.tensor([[9.0, -9.0], [-9.0, 9.0]])
    assert loss_score(confident, y).max() < 1e-3
    assert el2n_score(confident, y).max() < 1e-3
    assert torch.allclose(el2n_score(-confident, y), torch.full((2,), math.sqrt(2)), atol=1e-3)
    blank = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    noise = torch.randint(
        0, 256, (1, 1, 28, 28), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    assert input_complexity(blank) < input_complexity(noise)


def test_spearman_of_identical_and_reversed_rankings():
    a = torch.arange(10.0)
    assert spearman(a, a * 2) == pytest.approx(1.0)
    assert mean_pairwise_spearman(torch.stack([a, -a])) == pytest.approx(-1.0)
    assert math.isnan(mean_pairwise_spearman(a[None]))


# --- the scores table ----------------------------------------------------------------------


def log_table(data: Data, entry_point: str = scores_table.PRODUCER, corrupt: bool = False) -> str:
    """A scores run for ``data`` written with the real table code; returns its run id."""
    splits = {name: data.split(name) for name in scores_table.SPLITS}
    values = {
        name: {"loss": torch.rand(len(s), generator=torch.Generator().manual_seed(1))}
        for name, s in splits.items()
    }
    if corrupt:
        values["val"]["loss"][3] = math.nan
    tiers = {name: torch.arange(len(s)) % 3 for name, s in splits.items()}
    frame = scores_table.make_table(splits, values, tiers)
    with tracked_run(entry_point, {"scorers": "loss"}) as run:
        mlflow.log_params({"data_digest": data.digest})
        path = scores_table.save_table(
            frame,
            Path.cwd() / "scores.parquet",
            {"data_digest": data.digest, "scorers": ["loss"], "tier_scorer": "loss"},
        )
        mlflow.log_artifact(str(path), "scores")
    return run.info.run_id


def test_load_scores_matches_rows_by_stable_index(tracking):
    data = synthetic_data()
    run_id = log_table(data)
    for ref in (run_id, f"runs:/{run_id}/scores/scores.parquet", f"runs:/{run_id}"):
        table = scores_table.load_scores(ref, data)
        assert torch.equal(table.tiers_for(data.val, "val"), torch.arange(30) % 3)
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    shuffled = Split(data.val.x[perm], data.val.y[perm], data.val.index[perm])
    assert torch.equal(table.tiers_for(shuffled, "val"), (torch.arange(30) % 3)[perm])
    assert torch.equal(
        table.scores_for(shuffled, "val", "loss"), table.scores_for(data.val, "val", "loss")[perm]
    )
    assert table.scores_for(data.train, "train", "loss").dtype == torch.float32
    with pytest.raises(UpstreamError, match="no 'el2n' scores"):
        table.scores_for(data.val, "val", "el2n")


def test_a_table_is_downloaded_once_per_process_and_checked_every_time(tracking):
    data = synthetic_data()
    run_id = log_table(data)
    first = scores_table.load_scores(run_id, data)
    artifacts = Path(mlflow.get_run(run_id).info.artifact_uri.removeprefix("file://"))
    shutil.rmtree(artifacts)  # a second download would fail now
    again = scores_table.load_scores(run_id, data)
    assert again.frame is first.frame
    fewer = dataclasses.replace(data, val=Split(data.val.x, data.val.y, data.val.index + 1000))
    with pytest.raises(UpstreamError, match="no val row for index 1060"):
        scores_table.load_scores(run_id, fewer)


def test_load_scores_refuses_other_data_other_runs_and_holes(tracking):
    data = synthetic_data()
    run_id = log_table(data)
    other = dataclasses.replace(data, digest="0123456789abcdef")
    with pytest.raises(
        UpstreamError,
        match=f"scores run {run_id} is for data digest {data.digest}, this run loaded 0123456789abcdef",
    ):
        scores_table.load_scores(run_id, other)
    with pytest.raises(UpstreamError, match="no such run"):
        scores_table.load_scores("0" * 32, data)
    static_id = log_table(data, entry_point="train_static")
    with pytest.raises(UpstreamError, match="is a train_static run, not score_difficulty"):
        scores_table.load_scores(static_id, data)
    holed_id = log_table(data, corrupt=True)
    with pytest.raises(UpstreamError, match="NaN scores or no tier for val index 63"):
        scores_table.load_scores(holed_id, data)
    fewer = dataclasses.replace(data, val=Split(data.val.x, data.val.y, data.val.index + 1000))
    with pytest.raises(UpstreamError, match="no val row for index 1060"):
        scores_table.load_scores(run_id, fewer)


def test_entry_point_names_agree():
    # The table names its producer; that name is the entry point's, MLproject's and the module's.
    entry_points = yaml.safe_load((REPO / "MLproject").read_text())["entry_points"]
    assert scores_table.PRODUCER in entry_points
    assert f"pipeline.{scores_table.PRODUCER}" in entry_points[scores_table.PRODUCER]["command"]
    assert score_difficulty.ENTRY_POINT == scores_table.PRODUCER
    assert (DataConfig, score_difficulty.ScoreConfig) == score_difficulty.CONFIGS


def test_run_on_a_small_real_subset_writes_a_table_the_next_step_can_load(tracking):
    cfg = score_difficulty.ScoreConfig(epochs=1, folds=2)
    data_cfg = DataConfig(subset=200)
    run_id = score_difficulty.run(data_cfg, cfg)
    run = mlflow.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["entry_point"] == "score_difficulty"
    assert run.data.params["data_size_test"] == "200"
    assert "stability/spearman_loss_vs_el2n" in run.data.metrics
    assert "stability/spearman_loss_folds" in run.data.metrics
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run_id, "scores")}
    assert {
        "scores/scores.parquet",
        "scores/tier_cuts.json",
        "scores/tier_counts.csv",
        "scores/tier_counts.png",
        "scores/histogram.png",
        "scores/extremes.png",
        "scores/folds.parquet",
    } <= artifacts
    data = load_data(data_cfg)  # as train_dynamic loads it: no test split
    table = scores_table.load_scores(run_id, data)
    assert list(table.frame.columns) == [
        "split",
        "index",
        "label",
        "score_loss",
        "score_el2n",
        "score_input",
        "tier",
        "tier_id",
    ]
    tiers = table.tiers_for(data.train, "train")
    for c in range(10):
        assert torch.bincount(tiers[data.train.y == c], minlength=3).tolist() == [7, 6, 7]
    assert np.isfinite(table.frame["score_loss"]).all()


def test_the_model_free_scorer_alone_trains_nothing(tracking):
    cfg = score_difficulty.ScoreConfig(scorers="input", tier_scorer="input")
    run_id = score_difficulty.run(DataConfig(subset=100), cfg)
    run = mlflow.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert "time/models_s" not in run.data.metrics
    assert "stability/spearman_input_folds" not in run.data.metrics
    table = scores_table.load_scores(run_id, load_data(DataConfig(subset=100), include_test=True))
    assert table.scorers == ("input",) and table.tier_scorer == "input"
