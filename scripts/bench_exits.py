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
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, run as a file

from models.flops import flops_per_example
from models.io import load_model
from pipeline import evaluate, exits, score_difficulty, train_dynamic, train_static
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.difficulty.scores_table import find_scores_run, load_scores
from pipeline.difficulty.tiers import TIER_NAMES
from pipeline.exits import ExitConfig
from pipeline.plan import CurriculumConfig, DynamicCurriculumConfig, GrowthConfig
from pipeline.session import RunConfig
from pipeline.stats import paired_test, summary
from pipeline.training.config import TrainConfig

TUNING_SEEDS = (0, 1, 2)
ARMS = ("dynamic+exits", "dynamic", "static+exits", "static")
EXPERIMENT = "bench_exits"
# The targets.
MAX_FLOPS_RATIO = 0.5
MAX_ACC_LOSS_POINTS = 0.2
MIN_LATENCY_RATIO = 1.5
MIN_EASY_FIRST_EXIT = 0.8
MAX_HARD_FIRST_EXIT = 0.5  # "the hard tier mostly runs deep"
# Issue 14's calibration grid (one shared threshold, 0.7 -> 0.8 -> 0.9, finer only above 0.9),
# kept to compare against on the same trained models.
COARSE_CANDIDATES = np.unique(
    np.concatenate([np.linspace(0.0, 0.9, 10), 1 - np.geomspace(0.1, 1e-5, 41), [1.0]])
)
# Threshold choices to compare: (confidence measure, candidate grid, per-exit search, accuracy
# points allowed to be lost on validation (None: --exit-acc-loss's default), how the loss is
# read (--exit-calibration)). The "-loss0" variants are the user's other choice of budget
# (--exit-acc-loss 0), not a tuning on test; the "-bound" ones hold the loss's 95% upper
# confidence bound, not its point, within the budget (a bound at budget 0 never exits).
POINT_TIERS = exits.CalibrationRule("point-tiers", exits.point_loss, per_tier=True)
HARD_DEEP = exits.CalibrationRule("bound-hard-deep", exits.upper_bound_loss, hard_deep=MAX_HARD_FIRST_EXIT)
CALIBRATIONS = {
    "maxprob-coarse": ("maxprob", COARSE_CANDIDATES, False, None, "point"),
    "maxprob-fine": ("maxprob", exits.CANDIDATES, True, None, "point"),
    "entropy-coarse": ("entropy", COARSE_CANDIDATES, False, None, "point"),
    "entropy-fine": ("entropy", exits.CANDIDATES, True, None, "point"),
    "maxprob-fine-loss0": ("maxprob", exits.CANDIDATES, True, 0.0, "point"),
    "entropy-fine-loss0": ("entropy", exits.CANDIDATES, True, 0.0, "point"),
    "maxprob-fine-bound": ("maxprob", exits.CANDIDATES, True, None, "bound"),
    "entropy-fine-bound": ("entropy", exits.CANDIDATES, True, None, "bound"),
    # tier-aware (issue 14d): the bound on each validation tier too (--exit-calibration tiers);
    # the point on each tier; the bound plus at least half the hard tier past the first exit
    "maxprob-fine-tiers": ("maxprob", exits.CANDIDATES, True, None, "tiers"),
    "maxprob-fine-ptiers": ("maxprob", exits.CANDIDATES, True, None, POINT_TIERS),
    "maxprob-fine-harddeep": ("maxprob", exits.CANDIDATES, True, None, HARD_DEEP),
}


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


def recalibrate(run_id: str, variant: str, data, val_tiers, acc_loss: float) -> dict:
    """The thresholds ``variant`` chooses for a trained run, from its weights and the validation
    split only, with what they get there (overall and per tier)."""
    measure, candidates, per_exit, loss, rule = CALIBRATIONS[variant]
    acc_loss = acc_loss if loss is None else loss
    with tempfile.TemporaryDirectory() as tmp:
        path = mlflow.MlflowClient().download_artifacts(run_id, "model/model.safetensors", tmp)
        model = load_model(path)
    logits = exits.all_exit_logits(model, data.val.x)  # (K+1, N, classes)
    y = data.val.y
    thresholds = exits.calibrate(logits, y, acc_loss, measure, candidates, per_exit, rule, val_tiers)
    predictions, taken = exits.simulate(logits, thresholds, measure)
    right_head, right = logits[-1].argmax(1) == y, predictions == y
    val = {
        "acc_head": float(right_head.float().mean()),
        "acc_adaptive": float(right.float().mean()),
        "acc_loss_bound_points": exits.acc_loss(right_head, right, "bound"),
        "discordant_b_c_n": list(exits.discordant(right_head, right)),
        "exit1_share": float((taken == 0).float().mean()),
    }
    flops = torch.tensor(exits.exit_flops(model), dtype=torch.float64)
    full = float(flops_per_example(model, model.spec.input_shape)["forward"])
    val["flops_ratio"] = float(flops[taken].mean()) / full
    out = {
        "confidence": measure,
        "calibration": exits.calibration_rule(rule).name,
        "acc_loss_points_allowed": acc_loss,
        "thresholds": list(thresholds),
        "saved_thresholds": list(model.exit_thresholds or []),
        "val": val,
    }
    if val_tiers is not None:
        hard = val_tiers == TIER_NAMES.index("hard")
        for t, tier in enumerate(TIER_NAMES):
            val[f"exit1_share_{tier}"] = float((taken[val_tiers == t] == 0).float().mean())
            in_tier = val_tiers == t
            val[f"acc_loss_points_{tier}"] = exits.acc_loss(right_head[in_tier], right[in_tier], "point")
        # Not a calibration (the tier is unknown at inference): what keeping most of the hard
        # tier deep would cost, at the lowest shared threshold of the grid that does it.
        for t in sorted(float(c) for c in candidates):
            p, where = exits.simulate(logits, [t] * (len(logits) - 1), measure)
            if float((where[hard] == 0).float().mean()) < MAX_HARD_FIRST_EXIT:
                out["hard_mostly_deep"] = {
                    "threshold": t,
                    "acc_loss_points": 100 * (val["acc_head"] - float((p == y).float().mean())),
                    "flops_ratio": float(flops[where].mean()) / full,
                }
                break
    return out


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
        if rows:
            out[arm] = summarise_exits(rows)
        for variant in CALIBRATIONS:
            done = [results[s][arm]["calibrations"][variant] for s in seeds if _has(results[s], arm, variant)]
            if done:
                figure = summarise_exits([d["figures"] for d in done])
                figure["thresholds"] = [d["thresholds"] for d in done]
                figure["val_acc_loss_points"] = _stat(
                    [d["val"]["acc_head"] - d["val"]["acc_adaptive"] for d in done], 100
                )
                if all("acc_loss_bound_points" in d["val"] for d in done):
                    figure["val_acc_loss_bound_points"] = _stat(
                        [d["val"]["acc_loss_bound_points"] for d in done]
                    )
                figure["val_exit1_share"] = {
                    k.removeprefix("exit1_share").lstrip("_") or "all": _stat([d["val"][k] for d in done])
                    for k in done[0]["val"]
                    if k.startswith("exit1_share")
                }
                deep = [d["hard_mostly_deep"] for d in done if "hard_mostly_deep" in d]
                if deep:
                    figure["val_hard_mostly_deep"] = {
                        k: _stat([d[k] for d in deep])
                        for k in ("threshold", "acc_loss_points", "flops_ratio")
                    }
                figure["val_flops_ratio"] = _stat([d["val"]["flops_ratio"] for d in done])
                out[f"{arm} [{variant}]"] = figure
    # Deep supervision: the final head's test accuracy with the auxiliary loss against without.
    for with_exits, without in (("dynamic+exits", "dynamic"), ("static+exits", "static")):
        pairs = [
            (head_figures(results[s][with_exits])["test/acc"], results[s][without]["figures"]["test/acc"])
            for s in seeds
            if head_figures(results[s].get(with_exits, {})) and "figures" in results[s].get(without, {})
        ]
        if pairs:
            test = paired_test([a for a, _ in pairs], [b for _, b in pairs])
            out[f"deep_supervision {with_exits} - {without}"] = {
                **test,
                **{k: round(100 * test[k], 3) for k in ("mean_diff", "ci_low", "ci_high")},
                "unit": "test accuracy points of the final head",
            }
    return out


def _has(runs_of_seed: dict, arm: str, variant: str) -> bool:
    return "figures" in runs_of_seed.get(arm, {}).get("calibrations", {}).get(variant, {})


def head_figures(entry: dict) -> dict:
    """Figures of a run with the head's test accuracy: evaluate's at the saved thresholds, or
    any calibration variant's (the head does not depend on the thresholds)."""
    if "figures" in entry:
        return entry["figures"]
    done = [v["figures"] for v in entry.get("calibrations", {}).values() if "figures" in v]
    return done[0] if done else {}


def summarise_exits(rows: list[dict]) -> dict:
    """Mean and 95% CI over seeds of each target's figure, overall and per tier."""
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
    hard = figure["per_tier"].get("hard", {}).get("exit1_share", {}).get("mean", float("nan"))
    figure["targets"] = {
        f"flops_ratio <= {MAX_FLOPS_RATIO}": figure["flops_ratio"]["mean"] <= MAX_FLOPS_RATIO,
        f"acc_loss_points <= {MAX_ACC_LOSS_POINTS}": figure["acc_loss_points"]["mean"] <= MAX_ACC_LOSS_POINTS,
        f"latency_ratio_b1 >= {MIN_LATENCY_RATIO}": figure["latency_ratio_b1"]["mean"] >= MIN_LATENCY_RATIO,
        f"easy exit1_share >= {MIN_EASY_FIRST_EXIT}": easy >= MIN_EASY_FIRST_EXIT,
        f"hard exit1_share < {MAX_HARD_FIRST_EXIT} (mostly deep)": hard < MAX_HARD_FIRST_EXIT,
    }
    return figure


def markdown(summary_: dict) -> str:
    """The README's tables: the targets per exits arm, the per-tier exits, deep supervision."""

    def ci(stat: dict, fmt: str = "{:.2f}") -> str:
        if not stat or stat.get("n", 0) == 0:
            return "n/a"
        text = fmt.format(stat["mean"])
        if stat["n"] > 1:
            text += f" ({fmt.format(stat['ci_low'])} to {fmt.format(stat['ci_high'])})"
        return text

    # one column per exits arm and calibration variant: "dynamic+exits [entropy-fine]"
    arms = [k for k in summary_ if not k.startswith("deep_supervision")]

    def thresholds(f: dict) -> str:
        return (
            "; ".join("/".join(f"{t:.4g}" for t in per_seed) for per_seed in f.get("thresholds", []))
            or "saved"
        )

    lines = []
    variants = [a for a in arms if "[" in a]
    if variants:  # one row per calibration: the comparison at a glance
        lines += [
            "| arm [calibration] | thresholds (per seed) | validation acc lost, points "
            "| test acc lost, points (95% CI) | FLOPs, adaptive / full | batch-1 speed-up "
            "| leave at exit 1: easy / medium / hard | hard tier acc lost, points |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key in variants:
            f = summary_[key]
            tiers = f["per_tier"]
            shares = " / ".join(
                f"{tiers[t]['exit1_share']['mean']:.3f}" if t in tiers else "n/a" for t in TIER_NAMES
            )
            hard = tiers.get("hard", {})
            hard_loss = (
                f"{hard['acc_head_pct']['mean'] - hard['acc_adaptive_pct']['mean']:.2f}" if hard else "n/a"
            )
            lines.append(
                f"| {key} | {thresholds(f)} | {ci(f.get('val_acc_loss_points', {}))} "
                f"| {ci(f['acc_loss_points'])} | {ci(f['flops_ratio'], '{:.3f}')} "
                f"| {ci(f['latency_ratio_b1'])} | {shares} | {hard_loss} |"
            )
        lines.append("")
    lines += [
        "| mean over seeds (95% CI) | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    rows = [
        ("seeds", lambda f: str(f["n_seeds"])),
        ("thresholds (per seed)", thresholds),
        ("validation accuracy lost, points", lambda f: ci(f.get("val_acc_loss_points", {}))),
        (
            "... its 95% upper bound, points",
            lambda f: ci(f.get("val_acc_loss_bound_points", {})),
        ),
        ("validation FLOPs, adaptive / full", lambda f: ci(f.get("val_flops_ratio", {}), "{:.3f}")),
        (
            "keeping half the hard tier deep (validation): shared threshold",
            lambda f: ci(f.get("val_hard_mostly_deep", {}).get("threshold", {}), "{:.4f}"),
        ),
        (
            "... its accuracy lost, points / FLOPs ratio",
            lambda f: (
                ci(f.get("val_hard_mostly_deep", {}).get("acc_loss_points", {}))
                + " / "
                + ci(f.get("val_hard_mostly_deep", {}).get("flops_ratio", {}), "{:.3f}")
            ),
        ),
        (
            "hard tier leaving at exit 1 (validation)",
            lambda f: ci(f.get("val_exit1_share", {}).get("hard", {}), "{:.3f}"),
        ),
        (
            "hard tier leaving at exit 1 (test)",
            lambda f: ci(f["per_tier"].get("hard", {}).get("exit1_share", {}), "{:.3f}"),
        ),
        (
            "medium tier leaving at exit 1 (test)",
            lambda f: ci(f["per_tier"].get("medium", {}).get("exit1_share", {}), "{:.3f}"),
        ),
        (
            "easy tier leaving at exit 1 (test)",
            lambda f: ci(f["per_tier"].get("easy", {}).get("exit1_share", {}), "{:.3f}"),
        ),
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


def plot_calibrations(results: dict, path: Path) -> None:
    """Per exits arm: test accuracy against mean FLOPs over shared thresholds under each
    confidence measure (one line per seed), and where each calibration variant lands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [
        a
        for a in ("dynamic+exits", "static+exits")
        if any(results[s].get(a, {}).get("calibrations") for s in results)
    ]
    fig, axes = plt.subplots(1, len(arms), figsize=(7 * len(arms), 5), squeeze=False)
    colours = {"maxprob": "tab:blue", "entropy": "tab:green"}
    markers = {
        **{"coarse": "s", "fine": "o", "loss0": "^", "bound": "*"},
        **{"tiers": "P", "ptiers": "X", "harddeep": "v"},
    }
    for ax, arm in zip(axes[0], arms):
        labelled: set = set()
        drawn: set = set()
        fulls = []
        for seed in sorted(results, key=int):
            done = results[seed].get(arm, {}).get("calibrations", {})
            for variant, entry in done.items():
                if not entry.get("curve"):
                    continue
                measure, grid = variant.split("-")[:2]
                if variant.endswith(("-loss0", "-bound", "-tiers", "-ptiers", "-harddeep")):
                    grid = variant.rsplit("-", 1)[1]
                curve = entry["curve"]
                fulls.append(100 * curve["acc_full"])
                # each seed's test curve over shared thresholds (every variant on a measure has it)
                if (seed, measure) not in drawn:
                    drawn.add((seed, measure))
                    points = sorted(curve["curve"], key=lambda p: p["flops"])
                    label = f"{measure}: shared thresholds" if measure not in labelled else None
                    labelled.add(measure)
                    ax.plot([p["flops"] / 1e6 for p in points], [100 * p["acc"] for p in points], "-",
                            color=colours[measure], alpha=0.6, lw=1.1, label=label)  # fmt: skip
                label = f"{variant}: calibrated" if variant not in labelled else None
                labelled.add(variant)
                ax.plot(curve["flops_adaptive"] / 1e6, 100 * curve["acc_adaptive"], markers[grid],
                        color=colours[measure], ms=12 if grid == "bound" else 7, markeredgecolor="k",
                        label=label)  # fmt: skip
                ax.plot(curve["flops_full"] / 1e6, 100 * curve["acc_full"], "D", color="grey", ms=6,
                        label=None if "full" in labelled else "full network (each seed)")  # fmt: skip
                labelled.add("full")
        if fulls:
            ax.set_ylim(min(fulls) - 2, max(fulls) + 0.6)
        ax.set_xlabel("mean forward FLOPs per test example (millions)")
        ax.set_ylabel("test accuracy (%)")
        seeds = ", ".join(sorted(results, key=int))
        ax.set_title(f"{arm}, Fashion-MNIST test (seeds {seeds})", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(
        "Early exits: max softmax vs entropy; coarse shared vs fine per-exit thresholds;\n"
        "o/s: loss on validation within 0.2 points; ^: within 0; *: its 95% upper bound within 0.2;\n"
        "P: that bound on every tier too; X: the loss on every tier; v: the bound, half the hard tier deep",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_path(output: Path, name: str) -> Path:
    """``name``.png beside the JSON; an output named other than the defaults adds its own tail
    (bench_exits_calibration_bound.json: accuracy_vs_flops_calibrations_bound.png), so outputs
    on the same runs never overwrite each other's figures."""
    tail = output.stem.removeprefix("bench_exits").removeprefix("_calibration").lstrip("_")
    return output.with_name(f"{name}_{tail}.png" if tail else f"{name}.png")


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
