"""Benchmark: does reduced precision keep the accuracy of fp32 runs, and what does it save?

    .venv/bin/python scripts/bench_precision.py --precisions fp32,bf16 --seeds 100,101,102

Per seed, side by side (arms in a random order per seed): train_static on the default spec and
train_dynamic with the default schedule and curriculum, each at every precision of
``--precisions``, full data and 12 epochs by default. Every run is evaluated on the test split
through ``evaluate``. Prints and writes, per arm, each precision's paired test-accuracy
difference to fp32 in points (mean and 95% CI over seeds) and its wall-clock ratio to fp32
(``time/cumulative_s``: the epoch loop with validation). Seeds 0-2 chose the defaults; these
are others.
"""

from __future__ import annotations

import json
import os
import platform
import random
import sys
from pathlib import Path

import click
import mlflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from pipeline import evaluate, score_difficulty, train_dynamic, train_static
from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
from pipeline.data.config import DataConfig
from pipeline.device import pick_device
from pipeline.report.stats import paired_test, summary
from pipeline.run.plan import GrowthConfig
from pipeline.run.session import RunConfig
from pipeline.training.config import TrainConfig
from scripts.bench_common import machine


@click.command()
@click.option("--seeds", default="100,101,102", show_default=True)
@click.option("--precisions", default="fp32,bf16", show_default=True, help="the first is the reference")
@click.option("--epochs", default=12, show_default=True)
@click.option("--subset", default=0, show_default=True, help="0: full Fashion-MNIST")
@click.option("--data-dir", default="", help="where the dataset files are")
@click.option("--device", default="auto", show_default=True)
@click.option("--output", default="reports/bench_precision.json", show_default=True)
def main(
    seeds: str, precisions: str, epochs: int, subset: int, data_dir: str, device: str, output: str
) -> None:
    os.environ.pop("MLFLOW_RUN_ID", None)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    mlflow.set_experiment("bench_precision")
    data_cfg = DataConfig(subset=subset, data_dir=data_dir)
    scores_run = score_difficulty.run(data_cfg, score_difficulty.ScoreConfig(device=device))
    quiet = RunConfig(progress=False)
    precs = precisions.split(",")
    rows = []
    for seed in (int(s) for s in seeds.split(",")):
        arms = [(arm, p) for arm in ("static", "dynamic") for p in precs]
        random.Random(seed).shuffle(arms)
        for arm, precision in arms:
            train = TrainConfig(epochs=epochs, seed=seed, precision=precision, device=device)
            if arm == "static":
                outcome = train_static.run(
                    data_cfg,
                    train,
                    train_static.StaticConfig(),
                    CurriculumConfig(scores_run=scores_run),
                    quiet,
                )
            else:
                outcome = train_dynamic.run(
                    data_cfg, train, GrowthConfig(), DynamicCurriculumConfig(scores_run=scores_run), quiet
                )
            row = {
                "seed": seed,
                "arm": arm,
                "precision": outcome.state.precision,
                "run_id": mlflow.last_active_run().info.run_id,
                "val_acc": outcome.state.history[-1]["val/acc"],
                "train_s": outcome.state.cumulative_s,
                "epoch_s_median": sorted(h["time/epoch_s"] for h in outcome.state.history)[epochs // 2],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    evaluate_run = evaluate.run(
        evaluate.EvaluateConfig(runs=",".join(r["run_id"] for r in rows), device=str(pick_device(device)))
    )
    client = mlflow.MlflowClient()
    for row in rows:
        row["test_acc"] = client.get_run(row["run_id"]).data.metrics["test/acc"]
    pick = lambda arm, p, key: [
        r[key] for r in sorted(rows, key=lambda r: r["seed"]) if r["arm"] == arm and r["precision"] == p
    ]
    compared = {}
    for arm in ("static", "dynamic"):
        reference = precs[0]
        for p in precs[1:]:
            test = paired_test(pick(arm, p, "test_acc"), pick(arm, reference, "test_acc"))
            ratios = [a / b for a, b in zip(pick(arm, p, "train_s"), pick(arm, reference, "train_s"))]
            compared[f"{arm}:{p}-{reference}"] = {
                "test_points": {k: 100 * test[k] for k in ("mean_diff", "ci_low", "ci_high")},
                "p_value": test.get("p_t"),
                "time_ratio": summary(ratios),
                "test_acc": {q: summary(pick(arm, q, "test_acc")) for q in (reference, p)},
            }
    result = {
        "device": str(pick_device(device)),
        "platform": platform.platform(),
        "machine": machine(),
        "epochs": epochs,
        "subset": subset,
        "evaluate_run": evaluate_run,
        "compared": compared,
        "runs": rows,
    }
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(result, indent=2))
    print(json.dumps(compared, indent=2))


if __name__ == "__main__":
    main()
