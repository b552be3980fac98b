"""Benchmark: the default dynamic variant with the default curriculum against train_static.

    .venv/bin/python scripts/bench_dynamic.py --seeds 0,1,2

Side by side in one process, per seed: train_static on the dynamic run's final architecture
for the same epochs; train_dynamic (default schedule, tiers curriculum); and train_static again
with its epochs cut so that it gets the dynamic run's wall-clock (its cosine schedule fitted to
those epochs: a fair "same budget" control). All use the same split, batch size and
optimizer. Prints, per seed and as mean ± 95% CI, wall-clock ratio dynamic/static and the
validation-accuracy differences. The test split is not touched: that is evaluate's job.

Needs a finished score_difficulty run for the data in the tracking store given by
MLFLOW_TRACKING_URI (default sqlite:///mlflow.db); it runs one if none is there.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import click
import mlflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.growth import named_schedule, validate_schedule
from models.spec import resolve_spec
from pipeline import score_difficulty, train_dynamic, train_static
from pipeline.data import DataConfig, load_data
from pipeline.plan import CurriculumConfig, DynamicCurriculumConfig, GrowthConfig
from pipeline.session import RunConfig, find_scores_run
from pipeline.stats import paired_test, summary
from pipeline.training import TrainConfig


def _final(outcome) -> tuple[float, float]:
    return outcome.state.history[-1]["val/acc"], outcome.state.cumulative_s


@click.command()
@click.option("--seeds", default="0,1,2", show_default=True)
@click.option("--epochs", default=TrainConfig().epochs, show_default=True)
@click.option("--subset", default=0, show_default=True, help="0: full Fashion-MNIST")
@click.option("--schedule", default="default", show_default=True)
@click.option("--output", default="reports/bench_dynamic.json", show_default=True)
def main(seeds: str, epochs: int, subset: int, schedule: str, output: str) -> None:
    os.environ.pop("MLFLOW_RUN_ID", None)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    mlflow.set_experiment("bench_dynamic")
    data_cfg = DataConfig(subset=subset)
    data = load_data(data_cfg)
    scores = find_scores_run(data)
    if not scores:
        start = time.perf_counter()
        scores = score_difficulty.run(data_cfg, score_difficulty.ScoreConfig())
        print(f"score_difficulty took {time.perf_counter() - start:.0f}s", flush=True)
    start_spec = resolve_spec("minimal", data.input_shape, data.num_classes)
    final = validate_schedule(start_spec, named_schedule(schedule, epochs), epochs)
    rows = []
    for seed in (int(s) for s in seeds.split(",")):
        train = TrainConfig(epochs=epochs, seed=seed)
        quiet = RunConfig(progress=False)
        static = train_static.run(
            data_cfg,
            train,
            train_static.StaticConfig(spec=final.to_json()),
            CurriculumConfig(scores_run=scores),
            quiet,
        )
        dynamic = train_dynamic.run(
            data_cfg,
            train,
            GrowthConfig(schedule=schedule),
            DynamicCurriculumConfig(scores_run=scores),
            quiet,
        )
        s_acc, s_time = _final(static)
        d_acc, d_time = _final(dynamic)
        budget_epochs = max(1, round(epochs * d_time / s_time))
        same_time = train_static.run(
            data_cfg,
            TrainConfig(epochs=budget_epochs, seed=seed),
            train_static.StaticConfig(spec=final.to_json()),
            CurriculumConfig(scores_run=scores),
            quiet,
        )
        b_acc, b_time = _final(same_time)
        rows.append(
            {
                "seed": seed,
                "static_val_acc": s_acc,
                "static_s": s_time,
                "dynamic_val_acc": d_acc,
                "dynamic_s": d_time,
                "time_ratio": d_time / s_time,
                "same_time_static_epochs": budget_epochs,
                "same_time_static_val_acc": b_acc,
                "same_time_static_s": b_time,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    ratio = summary([r["time_ratio"] for r in rows])
    vs_static = paired_test([r["dynamic_val_acc"] for r in rows], [r["static_val_acc"] for r in rows])
    vs_budget = paired_test(
        [r["dynamic_val_acc"] for r in rows], [r["same_time_static_val_acc"] for r in rows]
    )
    result = {
        "epochs": epochs,
        "subset": subset,
        "schedule": schedule,
        "scores_run": scores,
        "runs": rows,
        "time_ratio": ratio,
        "val_acc_dynamic_minus_static": vs_static,
        "val_acc_dynamic_minus_same_time_static": vs_budget,
        "median_time_ratio": statistics.median(r["time_ratio"] for r in rows),
    }
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
