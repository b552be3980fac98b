"""Benchmark: the default dynamic variant with the default curriculum against train_static.

    .venv/bin/python scripts/bench_dynamic.py --seeds 0,1,2

Side by side in one process, per seed:

- ``static``: train_static on the dynamic run's final architecture for the same epochs, on all
  the data every epoch (the matched baseline the targets are measured against);
- ``dynamic``: train_dynamic (``--schedule``, tiers curriculum with its growth-tied boundaries);
- ``curriculum``: train_static with the dynamic run's curriculum, tier boundaries and pruning:
  the data side alone, without growth, so the two halves of the idea can be told apart;
- ``same_time``: train_static with its epochs cut so that it gets the dynamic run's wall-clock
  (its cosine schedule fitted to those epochs: a fair "same budget" control).

All use the same split, batch size and optimizer. Prints per seed and as mean with 95% CI the
wall-clock ratio dynamic/static and the validation-accuracy differences, then checks the
targets (wall-clock at most ``--max-time-ratio`` of static, val/acc at most ``--max-acc-drop``
points below it; means over seeds). The test split is not touched: that is evaluate's job.

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
from pipeline.plan import CurriculumConfig, DynamicCurriculumConfig, GrowthConfig, growth_boundaries
from pipeline.session import RunConfig, find_scores_run
from pipeline.stats import paired_test, summary
from pipeline.training import TrainConfig


def _final(outcome) -> tuple[float, float]:
    return outcome.state.history[-1]["val/acc"], outcome.state.cumulative_s


def _points(test: dict) -> dict:
    """A paired test of accuracies (fractions) in percentage points, rounded for reading."""
    keys = ("mean_diff", "ci_low", "ci_high")
    return {**test, **{k: round(100 * test[k], 3) for k in keys}}


@click.command()
@click.option("--seeds", default="0,1,2", show_default=True)
@click.option("--epochs", default=TrainConfig().epochs, show_default=True)
@click.option("--subset", default=0, show_default=True, help="0: full Fashion-MNIST")
@click.option("--schedule", default="default", show_default=True)
@click.option("--max-time-ratio", default=0.6, show_default=True, help="target: dynamic/static wall-clock")
@click.option("--max-acc-drop", default=0.2, show_default=True, help="target: points below static")
@click.option("--output", default="reports/bench_dynamic.json", show_default=True)
def main(
    seeds: str,
    epochs: int,
    subset: int,
    schedule: str,
    max_time_ratio: float,
    max_acc_drop: float,
    output: str,
) -> None:
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
    events = named_schedule(schedule, epochs)
    final = validate_schedule(start_spec, events, epochs)
    final_static = train_static.StaticConfig(spec=final.to_json())
    # The curriculum control uses exactly the boundaries the dynamic run derives from its growth.
    boundaries = ",".join(str(e) for e in growth_boundaries(events) or [])
    quiet = RunConfig(progress=False)
    rows = []
    for seed in (int(s) for s in seeds.split(",")):
        train = TrainConfig(epochs=epochs, seed=seed)
        static = train_static.run(data_cfg, train, final_static, CurriculumConfig(scores_run=scores), quiet)
        growth, tiers = GrowthConfig(schedule=schedule), DynamicCurriculumConfig(scores_run=scores)
        dynamic = train_dynamic.run(data_cfg, train, growth, tiers, quiet)
        curriculum = train_static.run(
            data_cfg,
            train,
            final_static,
            CurriculumConfig(
                scores_run=scores, pacing="tiers", tier_boundaries=boundaries, prune=tiers.prune
            ),
            quiet,
        )
        s_acc, s_time = _final(static)
        d_acc, d_time = _final(dynamic)
        c_acc, c_time = _final(curriculum)
        budget_epochs = max(1, round(epochs * d_time / s_time))
        same_time = train_static.run(
            data_cfg,
            TrainConfig(epochs=budget_epochs, seed=seed),
            final_static,
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
                "flops_ratio": dynamic.state.cumulative_train_flops / static.state.cumulative_train_flops,
                "curriculum_static_val_acc": c_acc,
                "curriculum_static_s": c_time,
                "same_time_static_epochs": budget_epochs,
                "same_time_static_val_acc": b_acc,
                "same_time_static_s": b_time,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    column = lambda key: [r[key] for r in rows]
    vs_static = _points(paired_test(column("dynamic_val_acc"), column("static_val_acc")))
    ratio = summary(column("time_ratio"))
    result = {
        "epochs": epochs,
        "subset": subset,
        "schedule": schedule,
        "tier_boundaries": boundaries,
        "prune": DynamicCurriculumConfig().prune,
        "scores_run": scores,
        "runs": rows,
        "time_ratio": ratio,
        "median_time_ratio": statistics.median(column("time_ratio")),
        "flops_ratio": summary(column("flops_ratio")),
        "val_acc_points": {
            "static": summary(100 * a for a in column("static_val_acc")),
            "dynamic": summary(100 * a for a in column("dynamic_val_acc")),
            "curriculum_static": summary(100 * a for a in column("curriculum_static_val_acc")),
            "same_time_static": summary(100 * a for a in column("same_time_static_val_acc")),
        },
        "dynamic_minus_static": vs_static,
        "dynamic_minus_curriculum_static": _points(
            paired_test(column("dynamic_val_acc"), column("curriculum_static_val_acc"))
        ),
        "curriculum_static_minus_static": _points(
            paired_test(column("curriculum_static_val_acc"), column("static_val_acc"))
        ),
        "dynamic_minus_same_time_static": _points(
            paired_test(column("dynamic_val_acc"), column("same_time_static_val_acc"))
        ),
        "targets": {
            f"time_ratio <= {max_time_ratio}": ratio["mean"] <= max_time_ratio,
            f"val_acc >= static - {max_acc_drop} points": vs_static["mean_diff"] >= -max_acc_drop,
        },
    }
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
