"""scripts/bench_exits.py's Markdown: the README's tables from the summary."""

from __future__ import annotations

from pipeline.data.tiers import TIER_NAMES


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
