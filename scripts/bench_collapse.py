"""Benchmark: how often the default dynamic run collapses, over many seeds (issue 35).

    .venv/bin/python scripts/bench_collapse.py --dataset folder:cifar10-jpeg.tar.xz \\
        --seeds 600-609 --precision bf16 --output docs/results/cifar10/collapse_bf16.jsonl

Trains ``train_dynamic`` (the pipeline's entry point, every default unless ``--lever`` names a
set of options from ``scripts/bench_levers.py``) once per seed and records its health verdict
(pipeline/training/health.py: ok, dipped, collapsed or diverged), the growth dip of each event,
the final validation accuracy and the run's cost. A rare failure needs many seeds to show, and
one full run per seed is the only honest way to count it: the dip screen
(``bench_growth_dip.py``) stops two epochs after growth and has no curriculum. A run that diverges
is counted, not fatal. Appends one JSON line per run; seeds already in ``--output`` are skipped,
so a stopped benchmark resumes. Validation only: choose nothing here that you then report.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import click
import mlflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from pipeline import train_dynamic
from pipeline.curriculum.config import DynamicCurriculumConfig
from pipeline.data.config import DataConfig
from pipeline.run.plan import GrowthConfig
from pipeline.run.session import RunConfig
from pipeline.training.config import TrainConfig
from pipeline.training.loop import DivergenceError
from scripts.bench_common import REFERENCE_EPOCHS, TUNING_SEEDS, parse_seeds
from scripts.bench_levers import DYNAMIC_BEFORE, LEVERS


def one_run(data_cfg: DataConfig, lever: str, seed: int, precision: str, scores_run: str) -> dict:
    """Train the dynamic run of ``lever`` on ``seed`` and read what its health says."""
    recipe, curriculum_options, growth_options, dynamic_only = LEVERS[lever]
    train = TrainConfig(epochs=REFERENCE_EPOCHS, seed=seed, precision=precision, **recipe, **dynamic_only)
    curriculum = DynamicCurriculumConfig(scores_run=scores_run, **curriculum_options)
    try:
        growth = GrowthConfig(**growth_options)
        train_dynamic.run(data_cfg, train, growth, curriculum, RunConfig(progress=False))
    except DivergenceError as error:  # the run is FAILED with its reason; here it is a count
        return {"seed": seed, "health": "diverged", "error": str(error)}
    run = mlflow.get_run(mlflow.last_active_run().info.run_id)  # with the tags logged at its end
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "val/acc")
    return {
        "seed": seed,
        "run_id": run.info.run_id,
        "health": run.data.tags.get("health", ""),
        "health_detail": run.data.tags.get("health_detail", ""),
        "growth_dips": [
            m.value for m in mlflow.MlflowClient().get_metric_history(run.info.run_id, "growth/dip")
        ],
        "val_acc": [m.value for m in sorted(history, key=lambda m: m.step)],
        "stop_reason": run.data.tags.get("stop_reason", ""),
        "precision": run.data.tags.get("precision_resolved", precision),
        "scores_run": run.data.tags.get("scores_run_id", ""),
        "train_s": run.data.metrics.get("time/cumulative_s"),
        "flops": run.data.metrics.get("train/flops_cumulative"),
    }


def summarise(rows: list[dict]) -> str:
    """The counts first, then the dips and accuracy of the runs that finished."""
    counts = {v: sum(r["health"] == v for r in rows) for v in ("collapsed", "diverged", "dipped", "ok")}
    lines = [f"{len(rows)} runs: " + ", ".join(f"{n} {v}" for v, n in counts.items())]
    dips = [d for r in rows for d in r.get("growth_dips", [])]
    if dips:
        lines.append(
            f"growth dip, points: median {100 * statistics.median(dips):+.1f}, worst {100 * min(dips):+.1f}"
        )
    finals = [r["val_acc"][-1] for r in rows if r.get("val_acc")]
    if finals:
        lines.append(f"final val/acc: mean {statistics.mean(finals):.4f}, min {min(finals):.4f}")
    return "\n".join(lines)


@click.command()
@click.option("--dataset", default="fashion-mnist", show_default=True, help="or folder:PATH")
@click.option("--seeds", default="600-609", show_default=True, help="a range a-b or a list; not 0-2")
@click.option("--precision", default="fp32", show_default=True, help="fp32, bf16 or fp16")
@click.option("--lever", default="base", show_default=True, help="options from bench_levers.py")
@click.option("--scores-run", default="auto", show_default=True, help="score_difficulty run for the diet")
@click.option("--output", default="reports/collapse.jsonl", show_default=True)
def main(dataset: str, seeds: str, precision: str, lever: str, scores_run: str, output: str) -> None:
    seed_list = parse_seeds(seeds)
    if set(seed_list) & set(TUNING_SEEDS):
        raise click.UsageError(f"--seeds {seeds}: seeds {TUNING_SEEDS} chose the defaults; report on others")
    if lever not in LEVERS:
        raise click.UsageError(f"--lever {lever!r}: use one of {', '.join(LEVERS)}")
    os.environ.pop("MLFLOW_RUN_ID", None)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    mlflow.set_experiment("bench_collapse")
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    # What the lever's new layers start as (rows from before the key: identities, as then).
    init = GrowthConfig(**LEVERS[lever][2]).growth_init
    asked = (lever, init, dataset, precision)
    recorded_init = lambda r: r.get("growth_init", DYNAMIC_BEFORE["growth_init"])
    mine = lambda r: (r.get("lever"), recorded_init(r), r.get("dataset"), r.get("asked_precision")) == asked
    seen = {r["seed"] for r in done if mine(r)}
    for seed in seed_list:
        if seed in seen:
            continue
        row = one_run(DataConfig(dataset=dataset), lever, seed, precision, scores_run)
        row = {"lever": lever, "growth_init": init, "dataset": dataset, "asked_precision": precision, **row}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        done.append(row)
        print(json.dumps(row), flush=True)
    print(summarise([r for r in done if mine(r) and r["seed"] in seed_list]))


if __name__ == "__main__":
    main()
