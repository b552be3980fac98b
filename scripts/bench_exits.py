"""Benchmark: input-adaptive inference with early exits, on the full Fashion-MNIST test split.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_exits.py            # seeds 100-102, 4 arms
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_exits.py --resume   # skip what the JSON holds
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_exits.py --arms dynamic+exits,static+exits \
        --calibrations maxprob-coarse,maxprob-fine,entropy-coarse,entropy-fine \
        --output docs/results/exits/bench_exits_calibration.json    # thresholds re-chosen
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_exits.py --arms dynamic+exits \
        --reuse docs/results/exits/bench_exits_calibration.json \
        --calibrations maxprob-fine-bound,entropy-fine-bound,maxprob-fine \
        --output docs/results/exits/bench_exits_calibration_bound.json  # same runs, new rules

Arms, per seed (12 epochs, default options otherwise):

- ``dynamic+exits``: train_dynamic ``--exits stages``: the minimal network's head, trained for
  the first quarter, becomes the exit after pool1 when the network grows, and keeps training
  beside the final head (deep supervision, ``--exit-weights`` default);
- ``dynamic``: the same run without exits (no auxiliary loss): the control for whether deep
  supervision moves the final head's accuracy;
- ``static+exits``: train_static ``--exits stages``: the default network carrying the same exit
  from the first epoch (the matched control for the dynamic run's exits);
- ``static``: train_static as it is: the control for deep supervision on the static network.

Each run's thresholds are calibrated on its validation split at training's end (for 0.2 points
of accuracy against its head); ``evaluate`` then measures on the test split, overall and per
difficulty tier: the share leaving at each exit, accuracy, mean FLOPs per example, and latency
per example at batch 1 and batched, with and without exits. Training runs first, every
evaluation after, so the latencies are timed back to back on a machine doing nothing else of
ours. Seeds 0-2 are the tuning seeds and are refused unless ``--allow-tuning-seeds``.

``--calibrations`` re-chooses the exits arms' thresholds from the trained weights and the
validation split alone, per variant (confidence measure and search), and evaluates each on the
test split through ``evaluate --exit-threshold --exit-confidence``: the same trained models
under max softmax and entropy, under issue 14's coarse shared grid and the fine per-exit
search, and under the two rules of ``--exit-calibration``: the loss measured on validation
(``point``: the variants without a suffix) or its 95% upper confidence bound (``-bound``).
``saved`` (the default) evaluates at the thresholds training saved with the model.
``--reuse`` takes the trained runs (and scores run) from another output of this script, so new
threshold choices on the same models go to a file of their own.

The JSON output is rewritten after every run (``--resume`` reads it back and skips what is
done). Writes runs to MLFLOW_TRACKING_URI (default sqlite:///mlflow.db), experiment
``bench_exits``; the accuracy-against-FLOPs figure goes beside the JSON.

This file is the command; beside it, ``bench_exits_arms.py`` (training an arm, re-choosing its
thresholds, the targets), ``bench_exits_summary.py`` (statistics over seeds),
``bench_exits_markdown.py`` (the tables) and ``bench_exits_figures.py`` (the figures).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import click
import mlflow
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from pipeline import evaluate, score_difficulty
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.difficulty.scores_table import find_scores_run, load_scores
from pipeline.exits import ExitConfig
from pipeline.training.config import TrainConfig
from scripts.bench_exits_arms import (
    ARMS,
    CALIBRATIONS,
    EXPERIMENT,
    arm_figures,
    exit_curve,
    recalibrate,
    train_arm,
)
from scripts.bench_exits_figures import figure_path, plot_calibrations, plot_curves
from scripts.bench_exits_markdown import markdown
from scripts.bench_exits_summary import summarise

TUNING_SEEDS = (0, 1, 2)


def reused_runs(path: str) -> tuple[dict, str]:
    """The trained runs (seed -> arm -> run id) and scores run of another output of this script."""
    try:
        earlier = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise click.UsageError(f"--reuse {path}: cannot read it ({err})") from None
    runs = {
        seed: {arm: {"run_id": entry["run_id"]} for arm, entry in arms.items() if "run_id" in entry}
        for seed, arms in earlier.get("runs", {}).items()
    }
    return runs, earlier.get("scores_run", "")


def _write(output: Path, payload: dict) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".partial")
    tmp.write_text(json.dumps(payload, indent=2, default=float))
    tmp.replace(output)


@click.command()
@click.option("--seeds", default="100,101,102", show_default=True, help="seeds to report (not 0-2)")
@click.option("--allow-tuning-seeds", is_flag=True, help="allow seeds 0-2 (the output says so)")
@click.option("--arms", default=",".join(ARMS), show_default=True)
@click.option("--epochs", default=TrainConfig().epochs, show_default=True)
@click.option("--subset", default=0, show_default=True, help="0: full Fashion-MNIST")
@click.option("--scores-run", default="", help="reuse this score_difficulty run; empty: newest, or run one")
@click.option("--output", default="docs/results/exits/bench_exits.json", show_default=True)
@click.option("--resume", "resume", is_flag=True, help="skip the runs the output file already holds")
@click.option(
    "--reuse",
    default="",
    help="another output of this script whose trained runs to use (nothing of theirs is retrained)",
)
@click.option(
    "--calibrations",
    default="saved",
    show_default=True,
    help=f"thresholds of the exits arms to evaluate: saved (training's), and/or {', '.join(CALIBRATIONS)}",
)
def main(
    seeds: str,
    allow_tuning_seeds: bool,
    arms: str,
    epochs: int,
    subset: int,
    scores_run: str,
    output: str,
    resume: bool,
    reuse: str,
    calibrations: str,
) -> None:
    seed_list = [int(s) for s in seeds.split(",")]
    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = sorted(set(arm_list) - set(ARMS))
    if unknown:
        raise click.UsageError(f"--arms: unknown {unknown} (known: {', '.join(ARMS)})")
    variants = [c.strip() for c in calibrations.split(",") if c.strip()]
    unknown = sorted(set(variants) - {"saved", *CALIBRATIONS})
    if unknown:
        raise click.UsageError(f"--calibrations: unknown {unknown} (known: saved, {', '.join(CALIBRATIONS)})")
    reused = sorted(set(seed_list) & set(TUNING_SEEDS))
    if reused and not allow_tuning_seeds:
        raise click.UsageError(f"--seeds {seeds}: seed(s) {reused} are the tuning seeds; report on others")
    os.environ.pop("MLFLOW_RUN_ID", None)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    mlflow.set_experiment(EXPERIMENT)
    out_path = Path(output)
    payload = json.loads(out_path.read_text()) if resume and out_path.exists() else {}
    results: dict = payload.get("runs", {})
    if reuse:
        trained, reused_scores = reused_runs(reuse)
        for seed, arms_of_seed in trained.items():
            for arm, entry in arms_of_seed.items():
                results.setdefault(seed, {}).setdefault(arm, {}).setdefault("run_id", entry["run_id"])
        payload.setdefault("scores_run", reused_scores)
        payload["reused_runs_from"] = reuse
    data_cfg = DataConfig(subset=subset)
    data = load_data(data_cfg)
    scores_run = scores_run or payload.get("scores_run") or find_scores_run(data)
    if not scores_run:
        scores_run = score_difficulty.run(data_cfg, score_difficulty.ScoreConfig())
    payload.update(
        {
            "what": "early exits: adaptive inference against the full network, full Fashion-MNIST test",
            "seeds": seed_list,
            "tuning_seeds_used": reused,
            "epochs": epochs,
            "subset": subset,
            "scores_run": scores_run,
            "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", ""),
            "exit_config": {k: getattr(ExitConfig(), k) for k in ("exit_weights", "exit_acc_loss")},
            "runs": results,
        }
    )
    # every invocation that wrote this file (a resumed one only adds what was missing)
    payload.setdefault("commands", [payload.pop("command")] if "command" in payload else []).append(
        " ".join(sys.argv)
    )
    for seed in seed_list:
        for arm in arm_list:
            if "run_id" in results.get(str(seed), {}).get(arm, {}):
                continue
            print(f"seed {seed}: training {arm}", flush=True)
            run_id = train_arm(arm, seed, epochs, data_cfg, scores_run)
            results.setdefault(str(seed), {})[arm] = {"run_id": run_id}
            _write(out_path, payload)
    # Every evaluation after every training run: latencies timed back to back.
    pending = [
        (seed, arm, entry["run_id"])
        for seed, arms_of_seed in results.items()
        for arm, entry in arms_of_seed.items()
        if "figures" not in entry and (not arm.endswith("+exits") or "saved" in variants)
    ]
    if pending:
        print(f"evaluating {len(pending)} run(s)", flush=True)
        evaluate.run(evaluate.EvaluateConfig(runs=",".join(r for _, _, r in pending), run_name="bench_exits"))
        for seed, arm, run_id in pending:
            results[seed][arm]["figures"] = arm_figures(run_id)
            results[seed][arm]["curve"] = exit_curve(run_id)
            _write(out_path, payload)
    # Re-chosen thresholds on the same trained models, each evaluated on test through evaluate.
    val_tiers = load_scores(scores_run, data).tiers_for(data.val, "val").cpu()
    acc_loss = ExitConfig().exit_acc_loss
    for seed, arms_of_seed in results.items():
        for arm, entry in arms_of_seed.items():
            for variant in (v for v in variants if v in CALIBRATIONS and arm.endswith("+exits")):
                if "figures" in entry.setdefault("calibrations", {}).get(variant, {}):
                    continue
                print(f"seed {seed}: {arm} at {variant} thresholds", flush=True)
                chosen = recalibrate(entry["run_id"], variant, data, val_tiers, acc_loss)
                evaluate.run(
                    evaluate.EvaluateConfig(
                        runs=entry["run_id"],
                        exit_threshold=",".join(repr(t) for t in chosen["thresholds"]),
                        exit_confidence=chosen["confidence"],
                        run_name=f"bench_exits {variant}",
                    )
                )
                chosen["figures"] = arm_figures(entry["run_id"])
                chosen["curve"] = exit_curve(entry["run_id"])
                entry["calibrations"][variant] = chosen
                _write(out_path, payload)
    payload["summary"] = summarise(results)
    payload["loadavg_1_5_15_at_end"] = list(os.getloadavg())
    _write(out_path, payload)
    if any(entry.get("curve") for arms_of_seed in results.values() for entry in arms_of_seed.values()):
        plot_curves(results, figure_path(out_path, "accuracy_vs_flops"))
    if any(v in CALIBRATIONS for v in variants):
        plot_calibrations(results, figure_path(out_path, "accuracy_vs_flops_calibrations"))
    table = markdown(payload["summary"])
    out_path.with_suffix(".md").write_text(table + "\n")
    print(table)
    medians = [
        results[s][a]["figures"]["test/latency_ratio_b1"]
        for s in results
        for a in results[s]
        if a.endswith("+exits") and "test/latency_ratio_b1" in results[s][a].get("figures", {})
    ]
    if medians:
        print(f"batch-1 latency ratio, median over exit runs: {statistics.median(medians):.2f}")


if __name__ == "__main__":
    main()
