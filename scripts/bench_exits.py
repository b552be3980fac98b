"""Benchmark: input-adaptive inference with early exits, on the full Fashion-MNIST test split.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_exits.py            # seeds 100-102, 4 arms
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_exits.py --resume docs/results/exits/bench_exits.json

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

The JSON output is rewritten after every run (``--resume`` reads it back and skips what is
done). Writes runs to MLFLOW_TRACKING_URI (default sqlite:///mlflow.db), experiment
``bench_exits``; the accuracy-against-FLOPs figure goes beside the JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import click
import mlflow
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from pipeline import evaluate, score_difficulty, train_dynamic, train_static
from pipeline.data import DataConfig, load_data
from pipeline.exits import ExitConfig
from pipeline.plan import CurriculumConfig, DynamicCurriculumConfig, GrowthConfig
from pipeline.session import RunConfig, find_scores_run
from pipeline.stats import paired_test, summary
from pipeline.training import TIER_NAMES, TrainConfig

TUNING_SEEDS = (0, 1, 2)
ARMS = ("dynamic+exits", "dynamic", "static+exits", "static")
EXPERIMENT = "bench_exits"
# The targets.
MAX_FLOPS_RATIO = 0.5
MAX_ACC_LOSS_POINTS = 0.2
MIN_LATENCY_RATIO = 1.5
MIN_EASY_FIRST_EXIT = 0.8


def train_arm(arm: str, seed: int, epochs: int, data_cfg: DataConfig, scores_run: str) -> str:
    """Train one arm for one seed; its run id."""
    train = TrainConfig(epochs=epochs, seed=seed)
    quiet = RunConfig(progress=False, experiment_name=EXPERIMENT)
    exit_cfg = ExitConfig(exits="stages" if arm.endswith("+exits") else "none")
    if arm.startswith("dynamic"):
        curriculum = DynamicCurriculumConfig(scores_run=scores_run)
        train_dynamic.run(data_cfg, train, GrowthConfig(), curriculum, quiet, exit_cfg)
    else:
        curriculum = CurriculumConfig(scores_run=scores_run)
        train_static.run(data_cfg, train, train_static.StaticConfig(), curriculum, quiet, exit_cfg)
    return mlflow.last_active_run().info.run_id


def arm_figures(run_id: str) -> dict:
    """What evaluate and training logged on a run that the benchmark reports."""
    metrics = mlflow.MlflowClient().get_run(run_id).data.metrics
    keep = ("test/", "val/acc", "final/", "time/total_s", "train/flops_cumulative")
    return {k: v for k, v in sorted(metrics.items()) if k.startswith(keep)}


def exit_curve(run_id: str) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path="evaluation/exit_curve.json", dst_path=tmp
            )
        except (mlflow.exceptions.MlflowException, OSError):
            return None
        return json.loads(Path(path).read_text())


def _stat(values: list[float], scale: float = 1.0) -> dict:
    out = summary([v * scale for v in values])
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


def summarise(results: dict) -> dict:
    """Mean and 95% CI over seeds of each target's figure, and the paired deep-supervision tests."""
    seeds = sorted(results, key=int)
    out: dict = {}
    for arm in ("dynamic+exits", "static+exits"):
        rows = [
            results[s][arm]["figures"] for s in seeds if arm in results[s] and "figures" in results[s][arm]
        ]
        rows = [r for r in rows if "test/flops_ratio" in r]
        if not rows:
            continue
        figure = {
            "n_seeds": len(rows),
            "flops_ratio": _stat([r["test/flops_ratio"] for r in rows]),
            "acc_head_pct": _stat([r["test/acc"] for r in rows], 100),
            "acc_adaptive_pct": _stat([r["test/acc_adaptive"] for r in rows], 100),
            "acc_loss_points": _stat([r["test/acc"] - r["test/acc_adaptive"] for r in rows], 100),
            "latency_ratio_b1": _stat([r["test/latency_ratio_b1"] for r in rows]),
            "latency_ratio_batched": _stat(
                [r["test/infer_ms_per_example"] / r["test/infer_ms_adaptive"] for r in rows]
            ),
            "infer_ms_b1": _stat([r["test/infer_ms_b1"] for r in rows]),
            "infer_ms_b1_adaptive": _stat([r["test/infer_ms_b1_adaptive"] for r in rows]),
            "acc_exit1_pct": _stat([r["test/acc_exit1"] for r in rows], 100),
            "per_tier": {},
        }
        for tier in TIER_NAMES:
            if f"test/exit_share_exit1_{tier}" not in rows[0]:
                continue
            figure["per_tier"][tier] = {
                "exit1_share": _stat([r[f"test/exit_share_exit1_{tier}"] for r in rows]),
                "acc_head_pct": _stat([r[f"test/acc_{tier}"] for r in rows], 100),
                "acc_adaptive_pct": _stat([r[f"test/acc_adaptive_{tier}"] for r in rows], 100),
                "flops_ratio": _stat([r[f"test/flops_adaptive_{tier}"] / r["test/flops_full"] for r in rows]),
                "infer_ms_b1": _stat([r[f"test/infer_ms_b1_{tier}"] for r in rows]),
                "infer_ms_b1_adaptive": _stat([r[f"test/infer_ms_b1_adaptive_{tier}"] for r in rows]),
            }
        easy = figure["per_tier"].get("easy", {}).get("exit1_share", {}).get("mean", float("nan"))
        figure["targets"] = {
            f"flops_ratio <= {MAX_FLOPS_RATIO}": figure["flops_ratio"]["mean"] <= MAX_FLOPS_RATIO,
            f"acc_loss_points <= {MAX_ACC_LOSS_POINTS}": figure["acc_loss_points"]["mean"]
            <= MAX_ACC_LOSS_POINTS,
            f"latency_ratio_b1 >= {MIN_LATENCY_RATIO}": figure["latency_ratio_b1"]["mean"]
            >= MIN_LATENCY_RATIO,
            f"easy exit1_share >= {MIN_EASY_FIRST_EXIT}": easy >= MIN_EASY_FIRST_EXIT,
        }
        out[arm] = figure
    # Deep supervision: the final head's test accuracy with the auxiliary loss against without.
    for with_exits, without in (("dynamic+exits", "dynamic"), ("static+exits", "static")):
        pairs = [
            (results[s][with_exits]["figures"]["test/acc"], results[s][without]["figures"]["test/acc"])
            for s in seeds
            if all("figures" in results[s].get(a, {}) for a in (with_exits, without))
        ]
        if pairs:
            test = paired_test([a for a, _ in pairs], [b for _, b in pairs])
            out[f"deep_supervision {with_exits} - {without}"] = {
                **test,
                **{k: round(100 * test[k], 3) for k in ("mean_diff", "ci_low", "ci_high")},
                "unit": "test accuracy points of the final head",
            }
    return out


def markdown(summary_: dict) -> str:
    """The README's tables: the targets per exits arm, the per-tier exits, deep supervision."""

    def ci(stat: dict, fmt: str = "{:.2f}") -> str:
        if not stat or stat.get("n", 0) == 0:
            return "n/a"
        text = fmt.format(stat["mean"])
        if stat["n"] > 1:
            text += f" ({fmt.format(stat['ci_low'])} to {fmt.format(stat['ci_high'])})"
        return text

    arms = [a for a in ("dynamic+exits", "static+exits") if a in summary_]
    lines = [
        "| mean over seeds (95% CI) | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    rows = [
        ("seeds", lambda f: str(f["n_seeds"])),
        ("head test acc, %", lambda f: ci(f["acc_head_pct"])),
        ("adaptive test acc, %", lambda f: ci(f["acc_adaptive_pct"])),
        ("accuracy lost, points", lambda f: ci(f["acc_loss_points"])),
        ("exit 1 alone, test acc %", lambda f: ci(f["acc_exit1_pct"])),
        ("FLOPs per example, adaptive / full", lambda f: ci(f["flops_ratio"], "{:.3f}")),
        ("batch-1 latency, full / adaptive", lambda f: ci(f["latency_ratio_b1"])),
        ("batch-1 ms per example, full", lambda f: ci(f["infer_ms_b1"], "{:.3f}")),
        ("batch-1 ms per example, adaptive", lambda f: ci(f["infer_ms_b1_adaptive"], "{:.3f}")),
        ("batched (512) latency, full / adaptive", lambda f: ci(f["latency_ratio_batched"])),
    ]
    for name, get in rows:
        lines.append(f"| {name} | " + " | ".join(get(summary_[a]) for a in arms) + " |")
    for arm in arms:
        tiers = summary_[arm]["per_tier"]
        if not tiers:
            continue
        lines += [
            "",
            f"{arm}, per difficulty tier of the test split:",
            "",
            "| tier | leave at exit 1 | head acc, % | adaptive acc, % | FLOPs, adaptive / full "
            "| batch-1 ms, full | batch-1 ms, adaptive |",
            "|---|---|---|---|---|---|---|",
        ]
        for tier, f in tiers.items():
            lines.append(
                f"| {tier} | {ci(f['exit1_share'], '{:.3f}')} | {ci(f['acc_head_pct'])} | "
                f"{ci(f['acc_adaptive_pct'])} | {ci(f['flops_ratio'], '{:.3f}')} | "
                f"{ci(f['infer_ms_b1'], '{:.3f}')} | {ci(f['infer_ms_b1_adaptive'], '{:.3f}')} |"
            )
    deep = {k: v for k, v in summary_.items() if k.startswith("deep_supervision")}
    if deep:
        lines += [
            "",
            "| final head's test acc, with exits − without | n | points (95% CI) | p (t) |",
            "|---|---|---|---|",
        ]
        for key, test in deep.items():
            lines.append(
                f"| {key.removeprefix('deep_supervision ')} | {test['n']} | {test['mean_diff']:+.2f} "
                f"({test['ci_low']:+.2f} to {test['ci_high']:+.2f}) | {test['p_t']:.2f} |"
            )
    return "\n".join(lines)


def plot_curves(results: dict, path: Path) -> None:
    """Test accuracy against mean FLOPs per example over shared thresholds, per exits arm and
    seed, with each run's calibrated point and its full network."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colours = {"dynamic+exits": "tab:blue", "static+exits": "tab:orange"}
    for arm, colour in colours.items():
        for i, seed in enumerate(sorted(results, key=int)):
            curve = results[seed].get(arm, {}).get("curve")
            if not curve:
                continue
            points = sorted(curve["curve"], key=lambda p: p["flops"])
            full = curve["flops_full"] / 1e6
            label = arm if i == 0 else None
            ax.plot([p["flops"] / 1e6 for p in points], [100 * p["acc"] for p in points], "-", color=colour,
                    alpha=0.7, lw=1.2, label=f"{arm}: thresholds 0 to 1" if label else None)  # fmt: skip
            ax.plot(curve["flops_adaptive"] / 1e6, 100 * curve["acc_adaptive"], "o", color=colour, ms=7,
                    markeredgecolor="k", label=f"{arm}: calibrated" if label else None)  # fmt: skip
            ax.plot(full, 100 * curve["acc_full"], "s", color=colour, ms=7, markerfacecolor="white",
                    label=f"{arm}: full network" if label else None)  # fmt: skip
    ax.set_xlabel("mean forward FLOPs per test example (millions)")
    ax.set_ylabel("test accuracy (%)")
    # Thresholds near 0 send everything out at the first exit, far below: the view is the
    # region around the full networks, where the trade-off is decided.
    fulls = [
        100 * results[s][a]["curve"]["acc_full"]
        for s in results
        for a in colours
        if results[s].get(a, {}).get("curve")
    ]
    if fulls:
        ax.set_ylim(min(fulls) - 3, max(fulls) + 0.8)
    ax.grid(alpha=0.3)
    seeds = ", ".join(sorted(results, key=int))
    ax.set_title(f"Early exits on Fashion-MNIST test: accuracy against FLOPs (seeds {seeds})", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
def main(
    seeds: str,
    allow_tuning_seeds: bool,
    arms: str,
    epochs: int,
    subset: int,
    scores_run: str,
    output: str,
    resume: bool,
) -> None:
    seed_list = [int(s) for s in seeds.split(",")]
    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = sorted(set(arm_list) - set(ARMS))
    if unknown:
        raise click.UsageError(f"--arms: unknown {unknown} (known: {', '.join(ARMS)})")
    reused = sorted(set(seed_list) & set(TUNING_SEEDS))
    if reused and not allow_tuning_seeds:
        raise click.UsageError(f"--seeds {seeds}: seed(s) {reused} are the tuning seeds; report on others")
    os.environ.pop("MLFLOW_RUN_ID", None)
    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    mlflow.set_experiment(EXPERIMENT)
    out_path = Path(output)
    payload = json.loads(out_path.read_text()) if resume and out_path.exists() else {}
    results: dict = payload.get("runs", {})
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
        if "figures" not in entry
    ]
    if pending:
        print(f"evaluating {len(pending)} run(s)", flush=True)
        evaluate.run(evaluate.EvaluateConfig(runs=",".join(r for _, _, r in pending), run_name="bench_exits"))
        for seed, arm, run_id in pending:
            results[seed][arm]["figures"] = arm_figures(run_id)
            results[seed][arm]["curve"] = exit_curve(run_id)
            _write(out_path, payload)
    payload["summary"] = summarise(results)
    payload["loadavg_1_5_15_at_end"] = list(os.getloadavg())
    _write(out_path, payload)
    plot_curves(results, out_path.with_name("accuracy_vs_flops.png"))
    table = markdown(payload["summary"])
    out_path.with_suffix(".md").write_text(table + "\n")
    print(table)
    medians = [
        results[s][a]["figures"].get("test/latency_ratio_b1", float("nan"))
        for s in results
        for a in results[s]
        if a.endswith("+exits")
    ]
    if medians:
        print(f"batch-1 latency ratio, median over exit runs: {statistics.median(medians):.2f}")


if __name__ == "__main__":
    main()
