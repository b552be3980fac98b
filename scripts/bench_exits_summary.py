"""scripts/bench_exits.py's summary: mean and 95% CI over seeds of each target's figure, per
exits arm and threshold choice, overall and per tier, and the paired deep-supervision tests."""

from __future__ import annotations

from pipeline.data.tiers import TIER_NAMES
from pipeline.report.stats import paired_test, summary
from scripts.bench_exits_arms import (
    CALIBRATIONS,
    MAX_ACC_LOSS_POINTS,
    MAX_FLOPS_RATIO,
    MAX_HARD_FIRST_EXIT,
    MIN_EASY_FIRST_EXIT,
    MIN_LATENCY_RATIO,
)


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
