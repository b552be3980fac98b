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


def test_one_levers_seeds_trained_apart_are_joined_only_when_they_trained_the_same(tmp_path):
    def lever(name: str, growth: dict, **recipe) -> dict:
        dynamic = {"retire_easy": False, "growth_rewarm": 0.05, **recipe}
        return {"name": name, "options": [{}, {}, growth, {}], **dynamic}

    def write(name: str, entry: dict, seed: int) -> str:
        runs = [_run(seed, "static", f, 0.78) for f in (1.0, 0.7)] + [_run(seed, "dynamic-12ep", 1.0, 0.75)]
        for run in runs:
            run["run_id"] = f"{name}-{seed}-{run['arm']}-{run['fraction']}"
        content = {**_frontier(name, runs), "lever": entry}
        path = tmp_path / f"{name}-{seed}.json"
        path.write_text(json.dumps(content))
        return str(path)

    identity = write("identity", lever("identity", {"growth_init": "preserve"}, growth_init="preserve"), 1)
    old_base = write("base", lever("base", {}), 2)  # from before the random start: identities
    new_base = write("base", lever("base", {}, growth_init="random"), 3)
    other = write("other", lever("other", {"growth_init": "preserve"}, growth_init="preserve"), 1)
    result = CliRunner().invoke(main, [f"{identity}+{old_base}"])
    assert result.exit_code == 0, result.output
    assert any(line.startswith("| identity | 1-2 | 75.00 / 75.00") for line in result.output.splitlines())
    result = CliRunner().invoke(main, [f"{identity}+{new_base}"])
    assert result.exit_code == 2 and "lever base trained other options" in result.output
    result = CliRunner().invoke(main, [f"{identity}+{other}"])
    assert result.exit_code == 2 and "seed 1 static at 1 is in two files" in result.output
