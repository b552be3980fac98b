"""Benchmark: the default dynamic variant with the default curriculum against train_static.

    .venv/bin/python scripts/bench_dynamic.py                 # seeds 100-104, full data

Seeds: the defaults (schedule, tier boundaries, pruning rate) were chosen by looking at seeds
0-2 on the validation split. This benchmark reports seeds never used for choosing (``--seeds``,
default 100-104) and on the **test** split, through ``evaluate``; validation accuracy is kept
beside it only to show how far the two disagree. Seeds 0-2 are refused unless
``--allow-tuning-seeds`` is given (and the output then says so).

Side by side in one process, per seed, with the arms in a random order per seed (the
same-time control last, because it needs the others' clocks):

- ``static``: train_static on the dynamic run's final architecture for the same epochs, on all
  the data every epoch (the matched baseline the targets are measured against);
- ``dynamic``: train_dynamic (``--schedule``, tiers curriculum with its growth-tied boundaries);
- ``curriculum``: train_static with the dynamic run's curriculum, tier boundaries and pruning:
  the data side alone, without growth, so the two halves of the idea can be told apart;
- ``same_time``: train_static with its epochs cut so that it gets the dynamic run's training
  clock (its cosine schedule fitted to those epochs: a fair "same budget" control).

Each arm's final spec is checked to be the dynamic run's final spec before anything is reported.

What each clock includes:

- ``train_s``: the epoch loop (training steps, the per-epoch validation pass, growth, FLOP
  counting); not data loading, MLflow logging or checkpoint writes. Ratios use this clock.
- ``step_s``: the whole step as called here (data and scores loading, MLflow logging, a
  checkpoint after every epoch, the model upload).
- ``scoring_s``: score_difficulty, which every curriculum arm (dynamic, curriculum) needs: its
  whole step, timed here (or, with ``--scores-run``, its logged ``time/total_s``). It is added to
  those arms twice over: charged in full to one run (``*_charged``) and amortised over the
  benchmark's curriculum runs (``*_amortised``, seeds x 2 arms).

FLOPs: an arm's ``train/flops_cumulative`` (forward and backward of every trained example);
score_difficulty's: its fold models' training counted the same way, plus every forward pass it
makes (each fold model's per-epoch validation, and scoring held-out, validation and test examples
at each snapshot), charged and amortised like its time.

One warm-up (a few batches of the start and final specs) runs before anything is timed. The
JSON output records the thread count and the machine load (``os.getloadavg``) before each arm.

Needs nothing but the data; writes runs to the tracking store given by MLFLOW_TRACKING_URI
(default sqlite:///mlflow.db), experiment ``bench_dynamic``.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import click
import mlflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.schedule import named_schedule, validate_schedule
from models.spec import ArchSpec, resolve_spec
from pipeline import evaluate, train_dynamic, train_static
from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
from pipeline.curriculum.diet import diet_of_growth
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.report.stats import paired_test, summary
from pipeline.run.plan import GrowthConfig
from pipeline.run.session import RunConfig
from pipeline.training.config import TrainConfig
from scripts.bench_common import REPORT_SEEDS, TUNING_SEEDS, machine, points, scores_with_cost, warm_up

ARMS = ("static", "dynamic", "curriculum")  # shuffled per seed; same_time follows them
CURRICULUM_ARMS = ("dynamic", "curriculum")  # the arms that need score_difficulty


def same_architecture(a: ArchSpec, b: ArchSpec) -> bool:
    """The same network: input, classes and layers (names aside)."""
    return (a.input_shape, a.num_classes, list(a.layers)) == (b.input_shape, b.num_classes, list(b.layers))


def run_arm(name: str, run) -> dict:
    """Call ``run()`` (one training step) and time it; returns the outcome's numbers."""
    load = os.getloadavg()
    start = time.perf_counter()
    outcome = run()
    step_s = time.perf_counter() - start
    return {
        "outcome": outcome,
        "run_id": mlflow.last_active_run().info.run_id,
        "val_acc": outcome.state.history[-1]["val/acc"],
        "train_s": outcome.state.cumulative_s,
        "step_s": step_s,
        "flops": outcome.state.cumulative_train_flops,
        "loadavg_before": list(load),
    }


@click.command()
@click.option("--seeds", default=REPORT_SEEDS, show_default=True, help="seeds to report (not 0-2)")
@click.option("--allow-tuning-seeds", is_flag=True, help="allow seeds 0-2, which chose the defaults")
@click.option("--epochs", default=TrainConfig().epochs, show_default=True)
@click.option("--subset", default=0, show_default=True, help="0: full Fashion-MNIST")
@click.option("--schedule", default="default", show_default=True)
@click.option("--scores-run", default="", help="reuse this score_difficulty run (its logged time)")
@click.option("--max-time-ratio", default=0.6, show_default=True, help="target: dynamic/static train_s")
@click.option("--max-acc-drop", default=0.2, show_default=True, help="target: test points below static")
@click.option("--output", default="reports/bench_dynamic.json", show_default=True)
def main(
    seeds: str,
    allow_tuning_seeds: bool,
    epochs: int,
    subset: int,
    schedule: str,
    scores_run: str,
    max_time_ratio: float,
    max_acc_drop: float,
    output: str,
) -> None:
    seed_list = [int(s) for s in seeds.split(",")]
    reused = sorted(set(seed_list) & set(TUNING_SEEDS))
    if reused and not allow_tuning_seeds:
        raise click.UsageError(
            f"--seeds {seeds}: seed(s) {reused} chose the defaults; report on others "
            f"(default {REPORT_SEEDS}) or pass --allow-tuning-seeds"
        )
    os.environ.pop("MLFLOW_RUN_ID", None)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    mlflow.set_experiment("bench_dynamic")
    data_cfg = DataConfig(subset=subset)
    data = load_data(data_cfg)
    start_spec = resolve_spec("minimal", data.input_shape, data.num_classes)
    events = named_schedule(schedule, epochs)
    final = validate_schedule(start_spec, events, epochs)
    machine_start = machine()
    warm_s = warm_up(data, [start_spec, final])
    scores_run, scoring_info = scores_with_cost(data_cfg, data, scores_run)
    print(f"score_difficulty: {scoring_info['seconds']:.0f}s, {scoring_info['flops']:.3g} FLOPs", flush=True)

    final_static = train_static.StaticConfig(spec=final.to_json())
    # The curriculum control uses exactly the boundaries and pruning start the dynamic run
    # derives from its growth.
    diet = diet_of_growth(events)
    boundaries = diet["tier_boundaries"]
    quiet = RunConfig(progress=False)
    tiers = DynamicCurriculumConfig(scores_run=scores_run)
    curriculum_cfg = CurriculumConfig(scores_run=scores_run, pacing="tiers", prune=tiers.prune, **diet)
    per_seed = []
    for seed in seed_list:
        train = TrainConfig(epochs=epochs, seed=seed)
        calls = {
            "static": lambda train=train: train_static.run(
                data_cfg, train, final_static, CurriculumConfig(scores_run=scores_run), quiet
            ),
            "dynamic": lambda train=train: train_dynamic.run(
                data_cfg, train, GrowthConfig(schedule=schedule), tiers, quiet
            ),
            "curriculum": lambda train=train: train_static.run(
                data_cfg, train, final_static, curriculum_cfg, quiet
            ),
        }
        order = list(ARMS)
        random.Random(seed).shuffle(order)
        arms = {name: run_arm(name, calls[name]) for name in order}
        budget_epochs = max(1, round(epochs * arms["dynamic"]["train_s"] / arms["static"]["train_s"]))
        arms["same_time"] = run_arm(
            "same_time",
            lambda seed=seed, budget_epochs=budget_epochs: train_static.run(
                data_cfg,
                TrainConfig(epochs=budget_epochs, seed=seed),
                final_static,
                CurriculumConfig(scores_run=scores_run),
                quiet,
            ),
        )
        grown = arms["dynamic"]["outcome"].state.model.spec
        for name, arm in arms.items():
            if not same_architecture(arm["outcome"].state.model.spec, grown):
                raise SystemExit(f"seed {seed}: the {name} arm's spec differs from the grown final spec")
        if not same_architecture(grown, final):
            raise SystemExit(f"seed {seed}: the grown spec differs from the schedule's final spec")
        per_seed.append(
            {"seed": seed, "order": [*order, "same_time"], "epochs_same_time": budget_epochs, **arms}
        )
        print(
            f"seed {seed}: order {order}, " + ", ".join(f"{k} {a['train_s']:.0f}s" for k, a in arms.items())
        )

    # The test split, through evaluate, for every arm of every seed.
    run_ids = [arm["run_id"] for row in per_seed for arm in (row[k] for k in (*ARMS, "same_time"))]
    evaluate_run = evaluate.run(evaluate.EvaluateConfig(runs=",".join(run_ids)))
    client = mlflow.MlflowClient()
    rows = []
    n_curriculum_runs = len(seed_list) * len(CURRICULUM_ARMS)
    cost_s, cost_flops = scoring_info["seconds"], scoring_info["flops"]
    for row in per_seed:
        out = {"seed": row["seed"], "order": row["order"], "same_time_static_epochs": row["epochs_same_time"]}
        for name in (*ARMS, "same_time"):
            arm = row[name]
            out[name] = {
                "run_id": arm["run_id"],
                "test_acc": client.get_run(arm["run_id"]).data.metrics["test/acc"],
                "val_acc": arm["val_acc"],
                "train_s": arm["train_s"],
                "step_s": arm["step_s"],
                "flops": arm["flops"],
                "loadavg_before": arm["loadavg_before"],
            }
            if name in CURRICULUM_ARMS:
                out[name]["train_s_charged"] = arm["train_s"] + cost_s
                out[name]["train_s_amortised"] = arm["train_s"] + cost_s / n_curriculum_runs
                out[name]["flops_charged"] = arm["flops"] + cost_flops
                out[name]["flops_amortised"] = arm["flops"] + cost_flops / n_curriculum_runs
        static, dynamic = out["static"], out["dynamic"]
        out["time_ratio"] = dynamic["train_s"] / static["train_s"]
        out["time_ratio_charged"] = dynamic["train_s_charged"] / static["train_s"]
        out["time_ratio_amortised"] = dynamic["train_s_amortised"] / static["train_s"]
        out["step_time_ratio"] = dynamic["step_s"] / static["step_s"]
        out["flops_ratio"] = dynamic["flops"] / static["flops"]
        out["flops_ratio_charged"] = dynamic["flops_charged"] / static["flops"]
        out["flops_ratio_amortised"] = dynamic["flops_amortised"] / static["flops"]
        rows.append(out)
        print(json.dumps(out), flush=True)

    column = lambda key: [r[key] for r in rows]
    acc = lambda arm, split="test_acc": [r[arm][split] for r in rows]
    vs_static = points(paired_test(acc("dynamic"), acc("static")))
    ratio = summary(column("time_ratio_charged"))
    result = {
        "seeds": seed_list,
        "seeds_that_chose_the_defaults": list(TUNING_SEEDS),
        "seeds_disjoint_from_tuning": not reused,
        "accuracy": "test split, through evaluate (run " + evaluate_run + "); val_acc beside it",
        "clocks": {
            "train_s": "epoch loop: steps, per-epoch validation, growth, FLOP counting",
            "step_s": "whole step: data and scores loading, MLflow logging, checkpoints, model upload",
            "scoring_s": scoring_info["clock"],
            "charged": "score_difficulty's time/FLOPs added in full to each curriculum run",
            "amortised": f"score_difficulty's time/FLOPs divided over {n_curriculum_runs} curriculum runs",
        },
        "epochs": epochs,
        "subset": subset,
        "schedule": schedule,
        "final_spec": final.to_dict(),
        "static_spec_equals_grown_spec": True,  # checked per seed and arm above
        "tier_boundaries": boundaries,
        "prune": tiers.prune,
        "score_difficulty": scoring_info,
        "warm_up_s": warm_s,
        "machine_start": machine_start,
        "machine_end": machine(),
        "evaluate_run": evaluate_run,
        "runs": rows,
        "time_ratio": summary(column("time_ratio")),
        "time_ratio_charged": ratio,
        "time_ratio_amortised": summary(column("time_ratio_amortised")),
        "median_time_ratio_charged": statistics.median(column("time_ratio_charged")),
        "step_time_ratio": summary(column("step_time_ratio")),
        "flops_ratio": summary(column("flops_ratio")),
        "flops_ratio_charged": summary(column("flops_ratio_charged")),
        "flops_ratio_amortised": summary(column("flops_ratio_amortised")),
        "test_acc_points": {arm: summary(100 * a for a in acc(arm)) for arm in (*ARMS, "same_time")},
        "val_acc_points": {
            arm: summary(100 * a for a in acc(arm, "val_acc")) for arm in (*ARMS, "same_time")
        },
        "dynamic_minus_static": vs_static,
        "dynamic_minus_curriculum_static": points(paired_test(acc("dynamic"), acc("curriculum"))),
        "curriculum_static_minus_static": points(paired_test(acc("curriculum"), acc("static"))),
        "dynamic_minus_same_time_static": points(paired_test(acc("dynamic"), acc("same_time"))),
        "targets": {
            f"time_ratio (scoring charged) <= {max_time_ratio}": ratio["mean"] <= max_time_ratio,
            f"test_acc >= static - {max_acc_drop} points": vs_static["mean_diff"] >= -max_acc_drop,
        },
    }
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
