"""scripts/bench_frontier.py end to end on a tiny real subset: its same-time arm is given its
own seed's static-12 seconds, every run is evaluated on the test split, and (b) pairs them; (f)
pairs the 12-epoch grown network with static at about its cost; a benchmark stopped part-way
resumes from the runs it finished."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import click
import mlflow
import pytest

from pipeline.report.stats import paired_test
from tests.conftest import REPO, subprocess_env

pytestmark = pytest.mark.slow

BENCH = [sys.executable, str(REPO / "scripts" / "bench_frontier.py")]


def bench(tracking, *args: str) -> subprocess.CompletedProcess:
    """scripts/bench_frontier.py run to its end with ``args``, against the test's store."""
    return subprocess.run(
        [*BENCH, *args], env=subprocess_env(tracking), capture_output=True, text=True, timeout=900
    )


def second_pass(tracking, first: list[str], reuse: str, output_dir) -> subprocess.CompletedProcess:
    """bench_frontier on the first pass's data and seeds, static at 3/4 and 1, no dynamic budgets."""
    return bench(
        tracking,
        *first[:4],
        *("--fractions", "0.75,1", "--dynamic-fractions", "none"),
        *("--reuse", reuse, "--output-dir", str(output_dir)),
    )


def test_the_frontier_pairs_each_seeds_same_time_run_with_its_static_run(tracking, tmp_path):
    refused = bench(tracking, "--seeds", "1,100")
    assert refused.returncode == 2 and "chose the defaults" in refused.stderr

    out = tmp_path / "frontier"
    args = ["--subset", "300", "--seeds", "100,101", "--fractions", "1", "--dynamic-fractions", "none"]
    result = bench(tracking, *args, "--output-dir", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "frontier.json").read_text())
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = report["runs"]
    assert sorted((r["seed"], r["arm"]) for r in runs) == [
        (seed, arm) for seed in (100, 101) for arm in ("dynamic-12ep", "dynamic-same-time", "static")
    ]
    client = mlflow.MlflowClient()
    for seed in (100, 101):
        mine = {r["arm"]: r for r in runs if r["seed"] == seed}
        static = mine["static"]["run_id"]
        assert mine["dynamic-same-time"]["budget"] == f"run:{static}:s"
        budget = client.get_run(mine["dynamic-same-time"]["run_id"]).data.params["budget"].strip("'")
        assert budget == f"run:{static}:s"
        # given the static run's seconds that trained, spent within the 3%; its validation
        # is not charged. (The meter begins no step it predicts it cannot pay; a step slower than
        # predicted, on a loaded machine, can end a fraction of a step over.)
        assert mine["dynamic-same-time"]["train_s"] <= 1.03 * mine["static"]["train_s"]
        assert all(0 < row["trained_share"] < 1 and row["wall_s"] > row["train_s"] for row in mine.values())
        for row in mine.values():  # accuracy is evaluate's, on the test split
            assert row["test_acc"] == client.get_run(row["run_id"]).data.metrics["test/acc"]
    ratios = [
        next(r for r in runs if r["seed"] == s and r["arm"] == "dynamic-same-time")["train_s"]
        / next(r for r in runs if r["seed"] == s and r["arm"] == "static")["train_s"]
        for s in (100, 101)
    ]
    assert report["b_wallclock_ratio"]["mean"] == pytest.approx(sum(ratios) / 2)
    assert report["b_dynamic_flops_share"] == "same-time"
    assert "(b) at static-12's wall-clock (dynamic at its own seconds" in result.stdout

    # A second pass adds a static budget and trains only that: the rest is taken as it was.
    more = tmp_path / "more"
    again = second_pass(tracking, args, str(out / "frontier.json"), more)
    assert again.returncode == 0, again.stderr[-3000:]
    grown = json.loads((more / "frontier.json").read_text())
    before = {(r["seed"], r["arm"], r["fraction"]): r for r in runs}
    after = {(r["seed"], r["arm"], r["fraction"]): r for r in grown["runs"]}
    assert set(after) == set(before) | {(100, "static", 0.75), (101, "static", 0.75)}
    assert all(after[k] == before[k] for k in before)  # reused, not retrained
    for seed in (100, 101):
        half = after[(seed, "static", 0.75)]
        assert (
            half["epochs"] == 9
            and half["test_acc"] == client.get_run(half["run_id"]).data.metrics["test/acc"]
        )
    # (f): the 12-epoch grown network spent less than 3/4 of static-12's FLOPs, so static at
    # 3/4 is the cheapest budget that gets no less, and the pair is taken seed by seed.
    against = grown["f_equal_epochs_against_static_at_its_cost"]
    twelve = [after[(seed, "dynamic-12ep", 1.0)] for seed in (100, 101)]
    halves = [after[(seed, "static", 0.75)] for seed in (100, 101)]
    assert all(d["flops"] < h["flops"] for d, h in zip(twelve, halves))
    assert against["static_fraction"] == 0.75
    expected = paired_test([r["test_acc"] for r in twelve], [r["test_acc"] for r in halves])
    assert against["test_points"]["mean_diff"] == pytest.approx(100 * expected["mean_diff"])
    assert against["flops_ratio"]["mean"] == pytest.approx(
        sum(d["flops"] / h["flops"] for d, h in zip(twelve, halves)) / 2
    )
    assert "(f) dynamic at 12 epochs against static at 0.75x static-12's FLOPs" in again.stdout
    assert report["f_equal_epochs_against_static_at_its_cost"] is None  # static at 1 only
    assert "(f) not measured" in result.stdout

    # Joining both outputs with nothing missing trains nothing: the summary and plot only.
    joined = tmp_path / "joined"
    join = second_pass(tracking, args, f"{out / 'frontier.json'},{more / 'frontier.json'}", joined)
    assert join.returncode == 0, join.stderr[-3000:]
    summary = json.loads((joined / "frontier.json").read_text())
    assert {(r["seed"], r["arm"], r["fraction"]): r for r in summary["runs"]} == after
    first = json.loads((out / "frontier.json").read_text())
    assert summary["frontier"] == grown["frontier"] and summary["machine"] == first["machine"]
    assert all(run_id in summary["accuracy"] for run_id in re.findall(r"[0-9a-f]{32}", grown["accuracy"]))
    assert (joined / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # With neither the same-time arm nor a dynamic budget there is no (b) to state: the summary
    # says so and still writes the rest (it once crashed here, after all the training).
    bare = tmp_path / "bare"
    no_b = bench(
        tracking, *args, "--no-same-time", "--reuse", str(joined / "frontier.json"), "--output-dir", str(bare)
    )
    assert no_b.returncode == 0, no_b.stderr[-3000:]
    assert "(b) not measured" in no_b.stdout and "(c) at 12 epochs" in no_b.stdout
    report = json.loads((bare / "frontier.json").read_text())
    assert (
        report["b_test"] is None
        and report["c_test_points_at_equal_epochs"] == first["c_test_points_at_equal_epochs"]
    )


def test_a_benchmark_stopped_part_way_resumes_from_the_runs_it_finished(tracking, tmp_path):
    out = tmp_path / "stopped"
    args = ["--subset", "300", "--seeds", "100", "--fractions", "1", "--dynamic-fractions", "none"]
    args += ["--no-same-time", "--output-dir", str(out)]
    process = subprocess.Popen(
        [*BENCH, *args],
        env=subprocess_env(tracking),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        first = next(line for line in process.stdout if line.startswith('{"seed"'))  # one run finished
    finally:  # stopped as a crash would stop it, with the second run under way or about to be
        process.kill()
        process.wait(timeout=60)
    stopped = json.loads((out / "frontier.json").read_text())
    assert stopped["complete"] is False
    assert [r["run_id"] for r in stopped["runs"]] == [json.loads(first)["run_id"]]
    assert "test_acc" not in stopped["runs"][0]  # trained, not yet evaluated

    resumed = bench(tracking, *args, "--reuse", str(out / "frontier.json"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    done = json.loads((out / "frontier.json").read_text())
    assert done["complete"] is True
    assert sorted(r["arm"] for r in done["runs"]) == ["dynamic-12ep", "static"]
    kept = next(r for r in done["runs"] if r["run_id"] == stopped["runs"][0]["run_id"])  # not retrained
    client = mlflow.MlflowClient()
    for row in done["runs"]:  # the kept run too is evaluated on the test split
        assert row["test_acc"] == client.get_run(row["run_id"]).data.metrics["test/acc"]
    assert kept["test_acc"] > 0 and not list(out.glob("*.partial"))


def test_f_sets_the_grown_network_against_the_cheapest_static_budget_that_spent_no_less():
    from scripts.bench_frontier import cheapest_static_covering

    static = [{"fraction": f, "flops": {"mean": f * 1e12}} for f in (0.25, 0.5, 1.0)]
    assert cheapest_static_covering(static, 0.41e12) == 0.5
    assert cheapest_static_covering(static, 0.1e12) == 0.25
    assert cheapest_static_covering(static, 0.5e12) == 0.5  # as much counts
    assert cheapest_static_covering(static, 0.6e12) is None  # static-12 itself is (c), not (f)


def test_another_levers_file_lends_only_its_static_runs_and_only_with_the_same_recipe(tmp_path):
    from scripts.bench_frontier import reused_runs
    from scripts.bench_levers import LEVERS, dynamic_recipe

    def frontier(name: str, predates: tuple[str, ...] = ()) -> str:
        """A result file of ``name`` written before the options ``predates`` existed."""
        path = tmp_path / f"{name}.json"
        runs = [
            {"seed": 100, "arm": arm, "fraction": 1.0, "run_id": arm} for arm in ("static", "dynamic-12ep")
        ]
        recipe = {k: v for k, v in dynamic_recipe(name).items() if k not in predates}
        lever = {"name": name, "options": LEVERS[name], **recipe}
        path.write_text(json.dumps({"lever": lever, "subset": 0, "runs": runs}))
        return str(path)

    rows, _ = reused_runs(frontier("base"), "noise1", 0)  # noise1 changes the dynamic run only
    assert set(rows) == {(100, "static", 1.0)}
    rows, _ = reused_runs(frontier("noise1"), "noise1", 0)
    assert set(rows) == {(100, "static", 1.0), (100, "dynamic-12ep", 1.0)}
    # A file from before --retire-easy: its `base` runs retired the easy tier, so they are not
    # this `base`'s; its static runs still are (and, as another lever's, for `retire` too).
    for lever in ("base", "retire"):
        rows, _ = reused_runs(frontier("base", predates=("retire_easy",)), lever, 0)
        assert set(rows) == {(100, "static", 1.0)}
    # A file from before the re-warm after growth: its `base` did not re-warm, as `no-rewarm` does.
    rows, _ = reused_runs(frontier("base", predates=("growth_rewarm",)), "base", 0)
    assert set(rows) == {(100, "static", 1.0)}
    rows, _ = reused_runs(frontier("no-rewarm", predates=("growth_rewarm",)), "no-rewarm", 0)
    assert set(rows) == {(100, "static", 1.0), (100, "dynamic-12ep", 1.0)}
    # A file from before the random start became the default: its `base` grew identities; a
    # lever that named its start ran that start.
    rows, _ = reused_runs(frontier("base", predates=("growth_init",)), "base", 0)
    assert set(rows) == {(100, "static", 1.0)}
    rows, _ = reused_runs(frontier("random-init", predates=("growth_init",)), "random-init", 0)
    assert set(rows) == {(100, "static", 1.0), (100, "dynamic-12ep", 1.0)}
    with pytest.raises(
        click.UsageError, match="lever smooth, subset 0, fashion-mnist; this run has lever noise1"
    ):
        reused_runs(frontier("smooth"), "noise1", 0)  # smoothing trains static differently
    with pytest.raises(click.UsageError, match="this run has lever bn, subset 0, fashion-mnist"):
        reused_runs(frontier("base"), "bn", 0, "fashion-mnist", "default-bn")  # same recipe, another network
    with pytest.raises(
        click.UsageError, match="lever base, subset 0, fashion-mnist; this run has lever base"
    ):
        reused_runs(frontier("base"), "base", 0, "folder:/data/cifar10.tar.xz")  # another dataset


def test_by_tier_pairs_each_budget_with_its_seeds_static_12_run_per_tier():
    from scripts.bench_frontier_tiers import by_tier, test_by_tier

    def row(seed, arm, fraction, easy, medium, hard):
        metrics = {"test/acc_easy": easy, "test/acc_medium": medium, "test/acc_hard": hard, "test/loss": 0.2}
        return {"seed": seed, "arm": arm, "fraction": fraction, "test_tiers": test_by_tier(metrics)}

    runs = [
        row(100, "static", 1.0, 0.99, 0.98, 0.80),
        row(101, "static", 1.0, 1.00, 0.97, 0.82),
        row(100, "dynamic", 1.5, 0.99, 0.97, 0.82),  # medium traded for hard
        row(101, "dynamic", 1.5, 0.99, 0.96, 0.83),
        {"seed": 100, "arm": "static", "fraction": 0.5, "test_tiers": None},  # evaluated without scores
        {"seed": 101, "arm": "static", "fraction": 0.5, "test_tiers": None},
    ]
    table = by_tier(runs)
    assert set(table) == {"dynamic@1.5"}  # not static-12 against itself, nor runs without tiers
    dynamic = table["dynamic@1.5"]
    assert dynamic["seeds"] == [100, 101]
    assert dynamic["medium"]["mean_diff"] == pytest.approx(-1.0)
    assert dynamic["hard"]["mean_diff"] == pytest.approx(1.5)
    assert dynamic["easy"]["mean_diff"] == pytest.approx(-0.5)
    assert test_by_tier({"test/acc": 0.9, "test/loss": 0.3}) is None
