"""scripts/plot_growth_advantage.py: each matched pair of a frontier file lands at its static
run's cost, marked by how it was matched, and nothing unfinished or malformed is drawn."""

from __future__ import annotations

import json

from click.testing import CliRunner

from scripts.plot_growth_advantage import advantage_points, main
from tests.conftest import REPO


def points(mean: float) -> dict:
    return {"mean_diff": mean, "ci_low": mean - 0.1, "ci_high": mean + 0.1}


def frontier(same_time: bool = True, **extra) -> dict:
    return {
        "seeds": [100, 101, 102],
        "d_at_equal_budget": {"0.25": {"test_points": points(0.4)}, "1.5": {"test_points": points(-0.1)}},
        "f_equal_epochs_against_static_at_its_cost": {"static_fraction": 0.5, "test_points": points(0.1)},
        "b_dynamic_flops_share": "same-time" if same_time else 1.5,
        "b_test_points_at_static_12_wallclock": points(-0.2),
        **extra,
    }


def test_each_pair_sits_at_its_static_runs_cost_marked_by_how_it_was_matched():
    got = [(p["cost"], p["how"], p["mean_diff"], p["n"]) for p in advantage_points(frontier())]
    assert got == [
        (0.25, "budget", 0.4, 3),
        (0.5, "12 epochs", 0.1, 3),
        (1.0, "seconds", -0.2, 3),
        (1.5, "budget", -0.1, 3),
    ]
    # (b) read off a FLOPs budget is already among the budgets: not drawn twice as "seconds".
    assert "seconds" not in {p["how"] for p in advantage_points(frontier(same_time=False))}
    # Without a static budget at about the 12-epoch run's cost there is no (f).
    without_f = frontier(f_equal_epochs_against_static_at_its_cost=None)
    assert "12 epochs" not in {p["how"] for p in advantage_points(without_f)}


def test_the_committed_frontiers_draw_and_bad_files_are_refused(tmp_path):
    png = tmp_path / "advantage.png"
    committed = REPO / "docs" / "results" / "frontier_erase_wd_10seeds.json"
    drawn = CliRunner().invoke(main, ["--frontier", f"strong recipe={committed}", "--output", str(png)])
    assert drawn.exit_code == 0, drawn.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "strong recipe: at 0.5x" in drawn.output and "10 seeds" in drawn.output

    unfinished = tmp_path / "unfinished.json"
    unfinished.write_text(json.dumps({"complete": False, "runs": []}))
    malformed = tmp_path / "malformed.json"
    malformed.write_text(json.dumps({"seeds": [100]}))
    for spec, says in (
        (f"x={unfinished}", "has not finished"),
        (f"x={malformed}", "not a bench_frontier.py frontier.json"),
        (str(committed), "give LABEL=PATH"),
        (f"x={tmp_path / 'missing.json'}", "give LABEL=PATH"),
    ):
        refused = CliRunner().invoke(main, ["--frontier", spec, "--output", str(png)])
        assert refused.exit_code == 2 and says in refused.output, refused.output
