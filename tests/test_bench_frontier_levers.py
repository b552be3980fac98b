"""scripts/bench_frontier_levers.py pairs each lever's dynamic arm by seed with the reference
lever's, with static at about its FLOPs and with static-12, taking static runs from any file."""

from __future__ import annotations

import json

from click.testing import CliRunner

from scripts.bench_frontier_levers import main

TIERS = {"easy": 0.9, "medium": 0.8, "hard": 0.5}


def _run(seed: int, arm: str, fraction: float, acc: float, hard: float = 0.5) -> dict:
    return {
        "seed": seed,
        "arm": arm,
        "fraction": fraction,
        "test_acc": acc,
        "test_tiers": {**TIERS, "hard": hard},
        "health": "ok",
        "growth_dip": 0.01,
        "flops": 60.0,
    }


def _frontier(name: str, runs: list[dict]) -> dict:
    return {"lever": {"name": name}, "static_12_flops": 100.0, "runs": runs}


def test_levers_are_paired_by_seed_against_the_reference_and_the_static_arms(tmp_path):
    seeds = (1, 2, 3)
    statics = [_run(s, "static", 1.0, 0.78) for s in seeds] + [_run(s, "static", 0.7, 0.77) for s in seeds]
    base = _frontier("base", statics + [_run(s, "dynamic-12ep", 1.0, 0.74 + s / 1000) for s in seeds])
    # The other lever's file has no static runs of its own; one seed more than the reference.
    other = _frontier(
        "growth", [_run(s, "dynamic-12ep", 1.0, 0.76 + s / 1000, hard=0.45) for s in (*seeds, 4)]
    )
    paths = []
    for name, content in (("base", base), ("growth", other)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(content))
    result = CliRunner().invoke(main, [str(p) for p in paths])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    base_row = next(line for line in lines if line.startswith("| base | 1-3"))
    assert "(reference)" in base_row
    assert "-2.80 (-3.05 to -2.55), n=3 | -3.80 (-4.05 to -3.55), n=3" in base_row  # 4.30 x 0.1 / sqrt 3
    growth = next(line for line in lines if line.startswith("| growth | 1-4"))
    assert "+2.00 (+2.00 to +2.00), n=3" in growth  # against base, on the three seeds both have
    assert "0.600" in growth and "4 of 4 ok" in growth
    hard_row = next(line for line in lines if line.startswith("| growth | +0.00"))
    assert hard_row.endswith("-5.00 (-5.00 to -5.00), n=3 |")
