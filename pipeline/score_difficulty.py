"""score_difficulty: a difficulty score and tier (easy, medium, hard) for every train,
validation and test example, for curricula (train_dynamic) and per-tier evaluation.

    python -m pipeline.score_difficulty --folds 3 --scorers loss,el2n,input
    mlflow run . -e score_difficulty --env-manager local -P subset=2000

Scores are cross-fitted: in each repeat the training split is cut into --folds stratified
folds and one small, briefly trained model per fold learns from the others and scores its
own; validation and test examples get the mean over all fold models. So no score comes from
a model that trained on the example, and no model trains on validation or test data. Tiers are
quantiles of the --tier-scorer on the training split, per class by default; the cut points
are applied to validation and test. See pipeline/difficulty/scorers.py for the scorers.

Logs ``scores/scores.parquet`` (read it with ``pipeline.difficulty.scores_table.load_scores``),
the cut points, the fold assignment, tier-by-class counts, histograms and the easiest and
hardest examples, and ``stability/spearman_*`` metrics.

Evidence (full Fashion-MNIST, 2 shared CPU cores, defaults): 58-285 s in-run depending on the
machine's other load, against 257-276 s per epoch (~53 min for 12 epochs) of a default
train_static under such load: under 0.1x of it, against a budget of 1.5x. Fold models reach
0.898 held-out accuracy. Loss scores of seeds 0 and 1 (disjoint folds and weights) rank the
training split with Spearman 0.953 (val 0.984, test 0.983); with --repeats 2 the repeats agree
at 0.955 (stability/spearman_loss_repeats). Validation and test tier shares only approach the
fractions (val 31/34/34 %, test 30/33/36 % for easy/medium/hard): their scores average all
fold models, which spreads less than the single held-out model that scores a training example.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import click
import mlflow
import numpy as np
import pandas as pd
import torch

from models.spec import ArchSpec, resolve_spec
from pipeline.cli import ConfigError, build_config, config_options, help_text, opt
from pipeline.codec import flat_params
from pipeline.data.config import DataConfig
from pipeline.data.dataset import Data
from pipeline.data.sources import RawData, load_raw
from pipeline.data.splits import load_data
from pipeline.data.tiers import TIER_NAMES, TierCuts, apply_tiers, fit_tiers, parse_fractions
from pipeline.device import pick_device
from pipeline.difficulty import scores_table
from pipeline.difficulty.cross_fit import cross_fit
from pipeline.difficulty.figures import extremes_figure, histogram_figure, tier_count_figure
from pipeline.difficulty.folds import CrossFitLedger, fold_table
from pipeline.difficulty.scorers import INPUT_SCORERS, MODEL_SCORERS, SCORERS, parse_scorers
from pipeline.difficulty.scores_table import PRODUCER, tier_counts, tier_metrics
from pipeline.difficulty.stability import stability_metrics
from pipeline.report.stats import roc_auc
from pipeline.tracking.artifacts import log_dataset, log_json, scratch_dir
from pipeline.tracking.guard import GuardedCommand, main_guard
from pipeline.tracking.runs import current_run_name, tracked_run
from pipeline.training.config import TrainConfig

ENTRY_POINT = PRODUCER  # the step the scores table names as its producer


@dataclass(frozen=True)
class ScoreConfig:
    scorers: str = opt("loss,el2n,input", f"comma-separated scorers ({', '.join(SCORERS)})")
    tier_scorer: str = opt("loss", "the scorer whose quantiles make the tiers")
    tier_fractions: str = opt("0.333,0.333,0.334", "shares of the easy, medium and hard tiers; sum to 1")
    per_class: bool = opt(True, "cut tiers within each class, so every tier holds every class in proportion")
    folds: int = opt(3, "cross-fitting folds: each fold model trains on the other folds")
    repeats: int = opt(1, "repeats of the k-fold split with fresh folds and seeds; scores are averaged")
    seed: int = opt(0, "seed of the fold assignment and of the fold models")
    # Scoring models only rank examples, so they are small and short: 3 folds x 3 epochs of
    # "tiny" cost a few percent of one default train_static run (see the evidence above).
    spec: str = opt("tiny", "architecture of the fold models: a registered name, JSON file or string")
    epochs: int = opt(3, "training epochs of each fold model")
    batch_size: int = opt(128, "training batch size of the fold models")
    lr: float = opt(0.05, "peak learning rate of the fold models")
    device: str = opt("auto", "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    precision: str = opt("auto", "autocast precision of the fold models' training: auto, fp32, bf16 or fp16")
    run_name: str = opt("", "MLflow run name; empty: score-difficulty")
    experiment_name: str = opt("", "MLflow experiment of the run; empty: growing-cnn")
    progress: bool = opt(False, "show a progress bar per epoch of each fold model")

    def scorer_names(self) -> tuple[str, ...]:
        return parse_scorers(self.scorers)

    def fractions(self) -> tuple[float, float, float]:
        return parse_fractions(self.tier_fractions)

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            seed=self.seed,
            device=self.device,
            precision=self.precision,
        ).validate()

    def validate(self) -> ScoreConfig:
        names = self.scorer_names()
        if self.tier_scorer not in names:
            raise ConfigError(f"--tier-scorer {self.tier_scorer!r} is not among --scorers {self.scorers!r}")
        self.fractions()
        if self.folds < 2:
            raise ConfigError(f"--folds must be at least 2, got {self.folds}")
        if self.repeats < 1:
            raise ConfigError(f"--repeats must be at least 1, got {self.repeats}")
        self.train_config()
        return self


CONFIGS = (DataConfig, ScoreConfig)


def prepare(data_cfg: DataConfig, score_cfg: ScoreConfig) -> tuple[Data, ArchSpec]:
    """Validate every input before any training: options, data (with test), spec."""
    score_cfg.validate()
    pick_device(score_cfg.device)  # an unavailable device fails before the run opens
    data = load_data(data_cfg, include_test=True)
    smallest = int(torch.bincount(data.train.y).min())
    if score_cfg.folds > smallest:
        raise ConfigError(
            f"--folds {score_cfg.folds} is more than the {smallest} training examples of the "
            "smallest class; lower --folds or raise --subset"
        )
    spec = resolve_spec(score_cfg.spec, data.input_shape, data.num_classes)
    return data, spec


def raw_images(raw: RawData, split_name: str, index: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) uint8 pixels of examples by stable index: test indexes the source's test
    file, train and val its training file."""
    source = raw.test_x if split_name == "test" else raw.train_x
    return source[index.cpu()]


@dataclass
class Scored:
    """Every split's scores and tiers, and how they were made."""

    values: dict[str, dict[str, torch.Tensor]]  # split -> scorer -> (N,)
    tiers: dict[str, torch.Tensor]  # split -> (N,) tier ids
    cuts: TierCuts
    ledger: CrossFitLedger | None  # None when no scorer needs a model
    metrics: dict[str, float]


def score_and_tier(data: Data, raw: RawData, spec: ArchSpec, cfg: ScoreConfig, on_model=None) -> Scored:
    """Cross-fit the model scorers, compute the input scorers, cut tiers on train, apply them."""
    names = cfg.scorer_names()
    splits = {name: data.split(name) for name in scores_table.SPLITS}
    values: dict[str, dict[str, torch.Tensor]] = {name: {} for name in splits}
    metrics: dict[str, float] = {}
    ledger = None
    if any(s in MODEL_SCORERS for s in names):
        result = cross_fit(
            data,
            spec,
            cfg.train_config(),
            pick_device(cfg.device),
            folds=cfg.folds,
            repeats=cfg.repeats,
            seed=cfg.seed,
            scorers=names,
            on_model=on_model,
            progress_bar=cfg.progress,
        )
        ledger = result.ledger
        metrics["time/models_s"] = result.seconds
        for key in result.models[0].metrics:
            values_of_key = [m.metrics[key] for m in result.models]
            metrics[f"cv/{key.split('/', 1)[1]}_mean"] = float(np.mean(values_of_key))
    for name, split in splits.items():
        for scorer in names:
            if scorer in MODEL_SCORERS:
                values[name][scorer] = ledger.combined(name, scorer)
            else:
                values[name][scorer] = INPUT_SCORERS[scorer](raw_images(raw, name, split.index))
    by = cfg.tier_scorer
    train_tiers, cuts = fit_tiers(
        values["train"][by], data.train.y, data.train.index, by, cfg.fractions(), cfg.per_class
    )
    tiers = {"train": train_tiers}
    for name in ("val", "test"):
        tiers[name] = apply_tiers(values[name][by], splits[name].y, cuts)
    metrics.update(stability_metrics(values["train"], ledger, cfg.repeats))
    return Scored(values, tiers, cuts, ledger, metrics)


def run(data_cfg: DataConfig, score_cfg: ScoreConfig) -> str:
    """Score, tier and log; returns the run id."""
    data, spec = prepare(data_cfg, score_cfg)
    raw = load_raw(data_cfg.dataset, data_cfg.data_dir)
    names = score_cfg.scorer_names()
    tags = {"spec_name": spec.name, "tier_scorer": score_cfg.tier_scorer, "scorers": ",".join(names)}
    with tracked_run(
        ENTRY_POINT,
        flat_params(data_cfg, score_cfg),
        run_name=score_cfg.run_name or "score-difficulty",
        tags=tags,
        experiment_name=score_cfg.experiment_name,
    ) as active:
        start = time.perf_counter()
        log_dataset(data, context="scoring")
        mlflow.set_tag("device", str(pick_device(score_cfg.device)))
        scored = score_and_tier(
            data, raw, spec, score_cfg, on_model=lambda i, record: mlflow.log_metrics(record.metrics, step=i)
        )
        splits = {name: data.split(name) for name in scores_table.SPLITS}
        table = scores_table.make_table(splits, scored.values, scored.tiers)
        meta = {
            "data_digest": data.digest,
            "scorers": list(names),
            "tier_scorer": score_cfg.tier_scorer,
            "seed": score_cfg.seed,
            "folds": score_cfg.folds,
            "repeats": score_cfg.repeats,
        }
        log_outputs(table, meta, scored, data, raw)
        noise = noise_metrics(scored, data) if data.noisy else {}
        if noise:
            mlflow.log_text(noise_report(noise, names, data), NOISE_REPORT)
        metrics = {
            **scored.metrics,
            **tier_metrics(table, score_cfg.tier_scorer),
            **noise,
            "time/total_s": time.perf_counter() - start,
        }
        mlflow.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
        return active.info.run_id


def log_outputs(table: pd.DataFrame, meta: dict, scored: Scored, data: Data, raw: RawData) -> None:
    """The table, cut points, fold assignment, tier counts and figures, under ``scores/``."""
    with scratch_dir() as tmp:
        path = scores_table.save_table(table, tmp / Path(scores_table.SCORES_ARTIFACT).name, meta)
        mlflow.log_artifact(str(path), "scores")
        log_json(scored.cuts.to_dict(data.classes), "scores/tier_cuts.json")
        if scored.ledger is not None:
            mlflow.log_artifact(str(fold_table(scored.ledger, data, tmp / "folds.parquet")), "scores")
        counts = tier_counts(table, data.classes)
        counts.to_csv(tmp / "tier_counts.csv")
        files = [
            tmp / "tier_counts.csv",
            histogram_figure(
                table,
                tuple(meta["scorers"]),
                scored.cuts,
                data.classes,
                tmp / "histogram.png",
                title=f"{current_run_name()}: difficulty scores of {data.name} (seed {meta['seed']})",
            ),
            extremes_figure(table, scored.cuts.scorer, raw, data.classes, tmp / "extremes.png"),
            tier_count_figure(counts, tmp / "tier_counts.png"),
        ]
        for file in files:
            mlflow.log_artifact(str(file), "scores")


# --- label noise: do the scores find the flipped labels? ----------------------------------

NOISE_REPORT = "scores/label_noise.md"
NOISE_SPLITS = ("train", "val")


def noise_metrics(scored: Scored, data: Data) -> dict[str, float]:
    """How well each scorer finds the flipped labels, per split with noise: ``noise/auc_<scorer>_
    <split>`` (ROC AUC of the score for flipped against clean examples; 0.5 is chance), and per
    tier ``noise/<split>_flipped_in_<tier>`` (of the flipped examples, the share in that tier;
    they sum to 1) and ``noise/<split>_<tier>_flipped`` (of the tier, the share that is flipped)."""
    out = {}
    for name in NOISE_SPLITS:
        flipped = data.split(name).flipped.cpu()
        if not flipped.any():
            continue
        for scorer, values in scored.values[name].items():
            out[f"noise/auc_{scorer}_{name}"] = roc_auc(values.double().numpy(), flipped.numpy())
        tiers = scored.tiers[name].cpu()
        for tier_id, tier in enumerate(TIER_NAMES):
            in_tier = tiers == tier_id
            out[f"noise/{name}_flipped_in_{tier}"] = float((flipped & in_tier).sum() / flipped.sum())
            if in_tier.any():
                out[f"noise/{name}_{tier}_flipped"] = float(flipped[in_tier].float().mean())
    return out


def noise_report(metrics: dict[str, float], scorers: tuple[str, ...], data: Data) -> str:
    """The noise metrics as a short Markdown report (artifact ``scores/label_noise.md``)."""
    splits = [s for s in NOISE_SPLITS if f"noise/{s}_flipped_in_easy" in metrics]
    rates = ", ".join(f"{s} {float(data.split(s).flipped.float().mean()):.1%}" for s in splits)
    lines = [
        "# Label noise: do the difficulty scores find the flipped labels?",
        "",
        f"Flipped labels: {rates} (noise digest {data.noise_digest}); the test split is clean.",
        "",
        "ROC AUC of each score for flipped against clean examples (0.5: chance, 1: every flipped "
        "example scores above every clean one):",
        "",
        "| scorer | " + " | ".join(splits) + " |",
        "|---|" + "---|" * len(splits),
    ]
    for scorer in scorers:
        aucs = [f"{metrics[f'noise/auc_{scorer}_{s}']:.3f}" for s in splits]
        lines.append(f"| {scorer} | " + " | ".join(aucs) + " |")
    lines += [
        "",
        "Per tier: the share of all flipped examples that falls in it, and the share of the tier "
        "that is flipped (the lower the easy tier's, the cleaner the labels of the tiers "
        "curriculum's easy-only epochs; the higher the hard tier's, the noisier its later ones):",
        "",
        "| tier | " + " | ".join(f"{s}: of flipped | {s}: of tier" for s in splits) + " |",
        "|---|" + "---|---|" * len(splits),
    ]
    for tier in TIER_NAMES:
        cells = []
        for s in splits:
            of_tier = metrics.get(f"noise/{s}_{tier}_flipped", float("nan"))
            cells += [f"{metrics[f'noise/{s}_flipped_in_{tier}']:.1%}", f"{of_tier:.1%}"]
        lines.append(f"| {tier} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@click.command(name=ENTRY_POINT, help=help_text(__doc__), cls=GuardedCommand)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    run_id = run(build_config(DataConfig, values), build_config(ScoreConfig, values))
    metrics = mlflow.get_run(run_id).data.metrics
    summary = " ".join(
        f"{k} {v:.3f}"
        for k, v in sorted(metrics.items())
        if k.startswith("stability/") or k.startswith("noise/auc_") or k == "time/total_s"
    )
    click.echo(f"scores run {run_id}: {summary}")


if __name__ == "__main__":
    main()
