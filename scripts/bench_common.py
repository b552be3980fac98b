"""What the benchmarks share: the seeds that chose the defaults and those reported by default,
the reference run length, a record of the machine, a warm-up before timed arms, score_difficulty
with its cost, and writing result files whole."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import mlflow
import torch

from models.builder import build_model
from models.flops import flops_per_example
from models.spec import ArchSpec, resolve_spec
from pipeline import score_difficulty
from pipeline.data.config import DataConfig
from pipeline.data.dataset import Data
from pipeline.device import seed_everything
from pipeline.difficulty.scorers import MODEL_SCORERS, parse_scorers
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import TrainingPlan, fit
from pipeline.training.state import new_state

TUNING_SEEDS = (0, 1, 2)  # the seeds the defaults were chosen on (validation split)
REPORT_SEEDS = "100,101,102,103,104"
REFERENCE_EPOCHS = 12  # static-12: the run every budget is a fraction of


def points(test: dict) -> dict:
    """A paired test of accuracies (``pipeline.report.stats.paired_test`` on fractions) with its
    difference and interval in percentage points; its other fields as they are."""
    return {**test, **{k: 100 * test[k] for k in ("mean_diff", "ci_low", "ci_high")}}


def parse_seeds(text: str) -> list[int]:
    """``600-609`` or ``600,601,605``."""
    if "-" in text:
        first, last = (int(v) for v in text.split("-"))
        return list(range(first, last + 1))
    return [int(v) for v in text.split(",")]


def write_json(path: Path, content: dict) -> None:
    """Write ``content`` whole or not at all: a stop mid-write leaves the previous file intact."""
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(content, indent=2))
    partial.replace(path)


def machine() -> dict:
    return {
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", ""),
        "cpu_count": os.cpu_count(),
        "loadavg_1_5_15": list(os.getloadavg()),
    }


class _FirstBatches(TrainingPlan):
    def positions(self, epoch, model, data):
        return torch.arange(min(len(data.train), 1024))


def warm_up(data: Data, specs: list[ArchSpec]) -> float:
    """A few untimed batches of every spec the arms train, so no arm pays for first calls."""
    start = time.perf_counter()
    cfg = TrainConfig(epochs=1)
    for spec in specs:
        seed_everything(0, False)
        fit(new_state(spec, cfg, torch.device("cpu")), data, cfg, _FirstBatches())
    return time.perf_counter() - start


def scoring_cost(scores_run: str, data: Data, measured_s: float | None) -> dict:
    """score_difficulty's time and FLOPs, from its run's parameters and metrics."""
    run = mlflow.get_run(scores_run)
    params, metrics = run.data.params, run.data.metrics
    folds, repeats, epochs = int(params["folds"]), int(params["repeats"]), int(params["epochs"])
    spec = resolve_spec(params["spec"], data.input_shape, data.num_classes)
    flops = flops_per_example(build_model(spec), data.input_shape)
    n_train, n_val = len(data.train), len(data.val)
    n_test = int(params.get("data_size_test", 0))
    models = folds * repeats
    names = parse_scorers(params["scorers"])
    snapshots = {
        None if (a := MODEL_SCORERS[s].after_epochs) is None or a >= epochs else a
        for s in names
        if s in MODEL_SCORERS
    }
    train_flops = flops["train"] * epochs * repeats * (folds - 1) * n_train
    forward_examples = models * epochs * n_val + repeats * len(snapshots) * (
        n_train + folds * (n_val + n_test)
    )
    return {
        "run": scores_run,
        "seconds": measured_s if measured_s is not None else metrics["time/total_s"],
        "clock": "timed here around the whole step"
        if measured_s is not None
        else "its own logged time/total_s (another time, maybe another load)",
        "fold_models_s": metrics.get("time/models_s"),
        "flops": train_flops + flops["forward"] * forward_examples,
        "flops_fold_training": train_flops,
        "fold_models": models,
    }


def scores_with_cost(data_cfg: DataConfig, data: Data, scores_run: str = "") -> tuple[str, dict]:
    """The score_difficulty run the curriculum arms use (run here and timed, unless given) and
    its cost (``scoring_cost``)."""
    measured = None
    if not scores_run:
        start = time.perf_counter()
        scores_run = score_difficulty.run(data_cfg, score_difficulty.ScoreConfig())
        measured = time.perf_counter() - start
    return scores_run, scoring_cost(scores_run, data, measured)
