"""The comparison report on synthetic runs recorded in a real temporary MLflow store."""

from __future__ import annotations

import json
import math
import time

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.entities import Metric, Param
from scipy import stats as sps

from pipeline.report import build_report, collect_runs
from pipeline.report.groups import TARGET_FRACTION

T_975_DF2 = 4.302652729911275  # Student-t 97.5% quantile, 2 degrees of freedom

LAYERS = [{"id": "c1", "type": "conv", "out": 8}, {"id": "f1", "type": "fc", "out": 32}]
DEFAULT = {"input_shape": [1, 28, 28], "num_classes": 10, "layers": LAYERS}
STATIC_SPEC = json.dumps({"name": "default", **DEFAULT}, sort_keys=True)
GROWN_SPEC = json.dumps({"name": "minimal+grown", **DEFAULT}, sort_keys=True)  # same network
DEEP_SPEC = json.dumps({"name": "minimal+grown", **DEFAULT, "layers": [*LAYERS, LAYERS[1]]})

SEEDS = [0, 1, 2]
STATIC_ACC = [0.80, 0.82, 0.81]
STATIC_HARD = [0.60, 0.63, 0.61]
BETTER_ACC = [0.86, 0.87, 0.865]  # +5 to +6 points on every seed
NOISE_ACC = [0.81, 0.81, 0.816]  # static + (+0.01, -0.01, +0.006)
STATIC_VAL = [0.80, 0.81, 0.805]
CURVE = [0.6, 0.8, 0.9, 0.985, 1.0]  # validation accuracy per epoch, as a fraction of the final one
EPOCH_S = {"static": 10.0, "dynamic-default+tiers": 6.0}


def _record(
    variant: str, seed: int, spec: str, acc: float, hard: float | None, val: float, params: dict | None = None
) -> str:
    entry_point = "train_static" if variant.startswith("static") else "train_dynamic"
    epoch_s = EPOCH_S.get(variant, 8.0)
    history = pd.DataFrame(
        {
            "epoch": range(len(CURVE)),
            "val/acc": [val * f for f in CURVE],
            "time/cumulative_s": [epoch_s * (e + 1) for e in range(len(CURVE))],
            "train/flops_cumulative": [1e9 * (e + 1) for e in range(len(CURVE))],
        }
    )
    events = [] if entry_point == "train_static" else [{"epoch": 2, "label": "+conv c2"}]
    tiers = {"test/acc_easy": min(1.0, acc + 0.1), "test/acc_hard": hard} if hard is not None else {}
    final = {"test/acc": acc, **tiers, "time/total_s": epoch_s * len(CURVE), "train/flops_cumulative": 5e9}
    # a growing run with more, cheaper epochs validates more of its seconds away
    share = 0.9 if entry_point == "train_static" else 0.6
    final |= {"time/trained_s": share * final["time/total_s"], "time/trained_share": share}
    now = int(time.time() * 1000)
    # val/acc per epoch, as training logs it: the last step is the final value
    metrics = [Metric("val/acc", v, now, step) for step, v in enumerate(history["val/acc"])]
    metrics += [Metric(k, v, now, 0) for k, v in final.items()]
    tags = {"entry_point": entry_point, "variant": variant, "final_spec": spec}
    with mlflow.start_run(run_name=f"{variant}-{seed}", tags=tags) as run:
        # one batch per run: each store write costs a commit on the shared SQLite file
        logged = [Param(k, str(v)) for k, v in {"seed": seed, **(params or {})}.items()]
        mlflow.MlflowClient().log_batch(run.info.run_id, metrics=metrics, params=logged)
        mlflow.log_text(history.to_csv(index=False), "history.csv")
        mlflow.log_text(json.dumps({"specs": {}, "epochs": [], "events": events}), "architecture_trace.json")
    return run.info.run_id


def test_report_from_runs_in_a_real_store(tracking, tmp_path):
    """Record synthetic runs, read them back with collect_runs and check every part of the report.

    One test, several checks: creating a tracking store costs seconds, so it is made once.
    """
    ids = []
    for i, seed in enumerate(SEEDS):
        ids.append(_record("static", seed, STATIC_SPEC, STATIC_ACC[i], STATIC_HARD[i], STATIC_VAL[i]))
        ids.append(_record("dynamic-default+tiers", seed, GROWN_SPEC, BETTER_ACC[i], 0.70 + i / 100, 0.84))
        ids.append(_record("dynamic-default+tiers-random", seed, GROWN_SPEC, NOISE_ACC[i], None, 0.80))
    ids.append(_record("dynamic-early", 0, GROWN_SPEC, 0.83, None, 0.81))  # one seed: no test
    ids.append(_record("dynamic-deep", 0, DEEP_SPEC, 0.84, None, 0.82))  # no static of this spec
    runs_df, histories, events = collect_runs(ids)
    check_collected(runs_df, histories, events, ids)

    paths = build_report(runs_df, histories, events, tmp_path / "report")
    comp = pd.read_csv(paths.comparison_csv, keep_default_na=False, na_values=[""])
    comp = comp.set_index(["group", "metric"])
    check_means_and_intervals(comp)
    check_paired_difference(comp, pd.read_csv(paths.paired_csv))
    check_time_to_target(comp)
    check_missing_data(comp, paths.report_md.read_text(encoding="utf-8"))
    check_words(paths.report_md.read_text(encoding="utf-8"))
    check_ordering(paths.report_md.read_text(encoding="utf-8"))
    check_html_and_figures(paths)

    assert not paths.cost_frontier_png.exists()  # one training length: no cost frontier

    given = build_report(runs_df, histories, events, tmp_path / "given", target_acc=0.75)
    ttt = pd.read_csv(given.comparison_csv).query("metric == 'time/to_target_s'")
    assert set(ttt["target_acc"]) == {0.75} and "dynamic-deep" in set(ttt["group"])  # no baseline needed


def check_ordering(md: str):
    """The Conclusion pairs the curriculum with its random-order control by seed: +5.3 points
    (differences 0.05, 0.06, 0.049), an interval above 0."""
    conclusion = md.split("## Conclusion")[1].split("\n## ")[0]
    line = next(x for x in conclusion.splitlines() if "vs its random-order control" in x)
    assert "**dynamic-default+tiers** vs its random-order control dynamic-default+tiers-random" in line
    assert "(3 seeds paired)" in line and "the curriculum's ordering helps" in line


def check_collected(runs_df, histories, events, ids):
    assert list(runs_df["run_id"]) == ids
    row = runs_df.set_index("run_id").loc[ids[1]]
    assert (row["entry_point"], row["variant"], row["seed"], row["final_spec"]) == (
        "train_dynamic",
        "dynamic-default+tiers",
        0,
        GROWN_SPEC,
    )
    assert row["test/acc"] == pytest.approx(BETTER_ACC[0])
    assert row["val/acc"] == pytest.approx(0.84)  # the last epoch's value
    assert list(histories[ids[1]]["epoch"]) == list(range(len(CURVE)))
    assert events[ids[1]] == [{"epoch": 2, "label": "+conv c2"}]
    assert events[ids[0]] == []  # static: no growth


def check_means_and_intervals(comp):
    for (group, metric), values in {
        ("static", "test/acc"): STATIC_ACC,
        ("static", "test/acc_hard"): STATIC_HARD,
        ("dynamic-default+tiers", "test/acc"): BETTER_ACC,
    }.items():
        row = comp.loc[(group, metric)]
        x = np.array(values)
        half = T_975_DF2 * x.std(ddof=1) / math.sqrt(3)
        assert row["n"] == 3
        assert row["mean"] == pytest.approx(x.mean())
        assert row["std"] == pytest.approx(x.std(ddof=1))
        assert (row["ci_low"], row["ci_high"]) == (
            pytest.approx(x.mean() - half),
            pytest.approx(x.mean() + half),
        )


def check_paired_difference(comp, paired):
    row = comp.loc[("dynamic-default+tiers", "test/acc")]
    assert row["baseline"] == "static"  # matched although the spec names differ
    diff = np.subtract(BETTER_ACC, STATIC_ACC)
    assert row["n_pairs"] == 3
    assert row["mean_diff"] == pytest.approx(diff.mean())
    assert row["p_t"] == pytest.approx(sps.ttest_rel(BETTER_ACC, STATIC_ACC).pvalue)
    assert row["p_wilcoxon"] == pytest.approx(sps.wilcoxon(diff).pvalue)
    assert row["within_noise"] in (False, "False")
    assert comp.loc[("dynamic-default+tiers-random", "test/acc"), "within_noise"] in (True, "True")

    pairs = paired[(paired["group"] == "dynamic-default+tiers") & (paired["metric"] == "test/acc")]
    assert list(pairs["seed"]) == SEEDS
    assert np.allclose(pairs["diff"], diff)


def check_time_to_target(comp):
    """Default target: 95% of the baseline's mean final val/acc."""
    assert TARGET_FRACTION == 0.95
    target = 0.95 * np.mean(STATIC_VAL)
    row = comp.loc[("static", "time/to_target_s")]
    assert row["target_acc"] == pytest.approx(target)
    # first epoch whose validation accuracy reaches the target, at 10 s per epoch
    reached = [next(10.0 * (e + 1) for e, f in enumerate(CURVE) if v * f >= target) for v in STATIC_VAL]
    assert row["mean"] == pytest.approx(np.mean(reached))
    dyn = comp.loc[("dynamic-default+tiers", "time/to_target_s")]
    assert dyn["mean"] == pytest.approx(6.0 * 4)  # 0.84 * 0.985 >= target in the 4th epoch (0.84 * 0.9 < it)


def check_missing_data(comp, md):
    deep = comp.loc[("dynamic-deep", "test/acc")]
    assert "no matched static baseline" in deep["note"]
    assert math.isnan(deep["mean_diff"]) and math.isnan(deep["p_t"])
    assert ("dynamic-deep", "test/acc_hard") not in comp.index  # tier not logged: skipped
    assert ("dynamic-default+tiers-random", "test/acc_easy") not in comp.index
    early = comp.loc[("dynamic-early", "test/acc")]
    assert early["n_pairs"] == 1 and math.isnan(early["p_t"])
    assert "dynamic-deep: no matched static baseline" in md
    assert "no test possible" in next(
        line for line in md.splitlines() if line.startswith("- dynamic-early vs")
    )


def check_words(md):
    lines = md.splitlines()
    assert md.index("## Conclusion") < md.index("|")  # the conclusion comes before any table
    better = next(line for line in lines if line.startswith("- dynamic-default+tiers vs static"))
    noise = next(line for line in lines if line.startswith("- dynamic-default+tiers-random vs static"))
    first = better.split(";")[0]  # the test/acc (all) clause
    assert "significant after Holm's correction" in first and "dynamic-default+tiers is better" in first
    assert "within noise" not in first
    assert "within noise" in noise.split(";")[0] and "significant" not in noise.split(";")[0]
    # The answer at a glance opens the Conclusion: one row per variant against its static twin.
    answer_table = md.split("## Conclusion")[1].split("\n- ")[0]
    assert (
        "| variant | against | seeds | time | FLOPs | test accuracy | matched on | verdict |" in answer_table
    )
    row = next(line for line in answer_table.splitlines() if line.startswith("| dynamic-default+tiers |"))
    assert row.startswith(
        "| dynamic-default+tiers | static | 3 | 0.40× (0.40-0.40) | 1.00× (1.00-1.00) | +5.50 pp"
    )
    assert row.endswith("| equal length | better |")
    cost = md.split("## Cost")[1].split("\n## ")[0]
    assert "| seconds that trained | share trained |" in cost
    static_row = next(line for line in cost.splitlines() if line.startswith("| static |"))
    assert "| 90.00%" in static_row  # the share of its seconds the static runs trained
    # seconds that trained stand for the wall-clock in the answer (0.6 x 6 s against 0.9 x 10 s)
    answer = next(line for line in lines if line.startswith("- **dynamic-default+tiers** vs static"))
    assert "seconds that trained 0.40×" in answer and "training wall-clock" not in answer
    all_line = next(line for line in lines if line.startswith("- **all**"))
    assert "dynamic-default+tiers at 86.50%" in all_line and "significant" in all_line


def check_html_and_figures(paths):
    page = paths.report_html.read_text(encoding="utf-8")
    assert "<script" not in page and "<link" not in page
    assert 'src="http' not in page and "url(" not in page
    assert page.count('src="data:image/png;base64,') == 3
    assert "significant: dynamic-default+tiers is better" in page
    for png in (paths.tier_accuracy_png, paths.accuracy_vs_wallclock_png, paths.learning_curves_png):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    assert set(paths.files()) <= set(paths.out_dir.iterdir())


def test_runs_of_several_budgets_get_a_cost_frontier_and_are_never_paired_across_them(tracking, tmp_path):
    ids = []
    for budget, shift in (("", 0.0), ("1e10flops", 0.02)):
        for i, seed in enumerate(SEEDS[:2]):
            params = {"epochs": 12, "budget": budget}
            ids.append(_record("static", seed, STATIC_SPEC, STATIC_ACC[i] + shift, None, 0.8, params))
            ids.append(
                _record("dynamic-default+tiers", seed, GROWN_SPEC, BETTER_ACC[i] + shift, None, 0.8, params)
            )
    runs_df, histories, events = collect_runs(ids)
    paths = build_report(runs_df, histories, events, tmp_path / "report")
    assert paths.cost_frontier_png.exists() and paths.cost_frontier_png in paths.files()
    assert "Accuracy against training cost" in paths.report_md.read_text(encoding="utf-8")
    paired = pd.read_csv(paths.paired_csv).query("metric == 'test/acc'")
    # Each dynamic group is paired with the static runs of its own budget only: +5 to +6 points.
    assert len(paired) == 4 and paired["diff"].between(0.04, 0.07).all()
    # The pair given the same FLOPs is said to be at an equal budget, in a readable label.
    comp = pd.read_csv(paths.comparison_csv).query("metric == 'test/acc' and pairing == pairing")
    assert sorted(comp["pairing"]) == ["equal budget (flops)", "equal length"]
    assert "budget 1e+10 FLOPs" in comp.loc[comp["pairing"] == "equal budget (flops)", "group"].item()
    conclusion = paths.report_md.read_text(encoding="utf-8").split("## Conclusion")[1].split("\n## ")[0]
    assert "at an equal budget (both given the same training FLOPs)" in conclusion
    assert "at equal training length" in conclusion


def test_runs_given_their_static_twins_cost_are_paired_with_them_at_equal_cost(tracking, tmp_path):
    """A dynamic run per seed whose budget is ``run:<that seed's static run>:s`` shares one
    setting with the others like it and is paired with those static runs, seed by seed, with
    the Conclusion saying the comparison is at equal cost; a run naming another seed's static
    run does not pair."""
    statics, ids = {}, []
    for i, seed in enumerate(SEEDS):
        statics[seed] = _record(
            "static", seed, STATIC_SPEC, STATIC_ACC[i], None, 0.8, {"epochs": 12, "budget": ""}
        )
        ids.append(statics[seed])
    for i, seed in enumerate(SEEDS):
        params = {"epochs": 12, "budget": f"run:{statics[seed]}:s", "budget_resolved": f"{40 + i} seconds"}
        ids.append(_record("dynamic-default+tiers", seed, GROWN_SPEC, BETTER_ACC[i], None, 0.84, params))
    # Same variant at equal epochs, so the equal-cost group is told apart by its budget.
    for i, seed in enumerate(SEEDS):
        ids.append(
            _record(
                "dynamic-default+tiers",
                seed,
                GROWN_SPEC,
                NOISE_ACC[i],
                None,
                0.8,
                {"epochs": 12, "budget": ""},
            )
        )
    runs_df, histories, events = collect_runs(ids)
    paths = build_report(runs_df, histories, events, tmp_path / "report")
    comp = pd.read_csv(paths.comparison_csv).query("metric == 'test/acc' and pairing == pairing")
    assert sorted(comp["pairing"]) == ["equal cost (seconds)", "equal length"]
    paired = pd.read_csv(paths.paired_csv).query("metric == 'test/acc'")
    cost_group = comp.loc[comp["pairing"] == "equal cost (seconds)", "group"].item()
    assert "budget run:RUN:s" in cost_group  # the setting's label names the budget, not one run
    at_cost = paired[paired["group"] == cost_group]
    assert sorted(at_cost["seed"]) == SEEDS
    assert all(at_cost["baseline_run_ids"] == [statics[s] for s in at_cost["seed"]])
    np.testing.assert_allclose(at_cost["diff"], np.subtract(BETTER_ACC, STATIC_ACC), atol=1e-9)
    md = paths.report_md.read_text(encoding="utf-8")
    conclusion = md.split("## Conclusion")[1]
    assert "at equal cost (each run was given its seed's static run's training seconds)" in conclusion
    assert "at equal training length" in conclusion

    # Seed 2's run names seed 0's static run: the group no longer pairs run for run.
    wrong = _record(
        "dynamic-default+tiers",
        2,
        GROWN_SPEC,
        0.9,
        None,
        0.84,
        {"epochs": 12, "budget": f"run:{statics[0]}:s", "budget_resolved": "40 seconds"},
    )
    runs_df, histories, events = collect_runs([*ids[:3], *ids[3:5], wrong])
    comp = pd.read_csv(build_report(runs_df, histories, events, tmp_path / "r2").comparison_csv)
    assert set(comp.loc[comp["group"] == cost_group, "baseline"].fillna("")) == {""}


def test_a_deterministic_difference_gets_no_p_value_and_no_test():
    from pipeline.report.wording import diff_phrase, p_cell, verdict

    row = pd.Series(
        {
            "note": "",
            "baseline": "static",
            "metric": "train/flops_cumulative",
            "n_pairs": 3,
            "mean_diff": -6.5e11,
            "diff_ci_low": -6.5e11,
            "diff_ci_high": -6.5e11,
            "p_t": 0.0,
            "p_wilcoxon": 0.25,
            "within_noise": False,
            "ratio_to_baseline": 0.42,
            "group": "dynamic-default+tiers",
        }
    )
    assert p_cell(row, "p_t") == "— (deterministic)"
    assert verdict(row).startswith("deterministic")
    assert "p =" not in diff_phrase(row) and "deterministic" in diff_phrase(row)


def test_tier_verdicts_are_holm_corrected_over_the_reports_accuracy_tests():
    """Three variants x four tiers: twelve tests. A tier's p = 0.02 with an interval clear of 0
    was called significant; corrected over the twelve it is not, while p = 0.001 still is."""
    from pipeline.report.comparison import _correct_accuracy_tests
    from pipeline.report.wording import _acc_difference, verdict

    def row(group, metric, p, low=0.01):
        return {"group": group, "metric": metric, "baseline": "static", "note": "", "n_pairs": 3,
                "mean_diff": 0.02, "diff_ci_low": low, "diff_ci_high": 0.03, "p_t": p,
                "within_noise": low <= 0}  # fmt: skip

    tiers = ["test/acc", "test/acc_easy", "test/acc_medium", "test/acc_hard"]
    rows = [row(g, m, 0.5, low=-0.01) for g in ("a", "b", "c") for m in tiers]
    rows[3] = row("a", "test/acc_hard", 0.02)
    rows[5] = row("b", "test/acc_easy", 0.001)
    rows.append(row("a", "train/flops_cumulative", 0.0, low=0.03))  # deterministic: not a test
    _correct_accuracy_tests(rows)
    assert rows[3]["p_holm"] == pytest.approx(11 * 0.02)  # the second smallest of twelve
    assert rows[5]["p_holm"] == pytest.approx(12 * 0.001)
    assert math.isnan(rows[-1]["p_holm"])
    assert verdict(pd.Series(rows[3])).startswith("not significant after Holm's correction")
    said = verdict(pd.Series(rows[5]))
    assert said.startswith("significant after Holm's correction") and said.endswith("b is better")
    # the Conclusion's answer says the same: a tie, with the adjusted p beside the interval
    text, word = _acc_difference(pd.Series(rows[3]), "better", "worse", "tie")
    assert word == "tie" and "Holm-adjusted p = 0.22" in text
    assert _acc_difference(pd.Series(rows[5]), "better", "worse", "tie")[1] == "better"


def test_report_has_an_early_exits_section_for_runs_with_exits(tracking, tmp_path):
    """Runs whose evaluation measured exits get a table row (head against adaptive, FLOPs ratio,
    batch-1 speed-up, the easy tier's share at exit 1) and their accuracy-against-FLOPs curves."""
    ids, curves = [], {}
    for i, seed in enumerate(SEEDS):
        run_id = _record("static+exits", seed, STATIC_SPEC, STATIC_ACC[i], STATIC_HARD[i], STATIC_VAL[i])
        exit_metrics = {
            "test/acc_adaptive": STATIC_ACC[i] - 0.001,
            "test/flops_ratio": 0.25,
            "test/latency_ratio_b1": 2.0,
            "test/exit_share_exit1_easy": 0.9,
            "test/exit_share_exit1_hard": 0.5,
        }
        now = int(time.time() * 1000)
        mlflow.MlflowClient().log_batch(
            run_id, metrics=[Metric(k, v, now, 0) for k, v in exit_metrics.items()]
        )
        curve = [
            {"threshold": t, "acc": STATIC_ACC[i] - 0.05 * (1 - t), "flops": 4e6 + 12e6 * t}
            for t in (0, 0.5, 1)
        ]
        curves[run_id] = {
            "curve": curve,
            "acc_full": STATIC_ACC[i],
            "flops_full": 15.7e6,
            "acc_adaptive": STATIC_ACC[i] - 0.001,
            "flops_adaptive": 3.9e6,
        }
        ids.append(run_id)
    ids.append(_record("static", 0, STATIC_SPEC, 0.8, 0.6, 0.8))  # no exits: no row
    runs_df, histories, events = collect_runs(ids)
    paths = build_report(runs_df, histories, events, tmp_path / "report", exit_curves=curves)
    md = paths.report_md.read_text()
    section = md[md.index("## Early exits") :]
    rows = [line for line in section.splitlines() if line.startswith("| static")]
    assert len(rows) == 1 and rows[0].startswith("| static+exits | 3 |")
    assert "0.25x [0.25, 0.25]" in rows[0] and "2.00x" in rows[0] and "90.00%" in rows[0]
    assert "easy at exit 1" in section and "medium at exit 1" not in section
    assert paths.exit_curves_png.is_file() and paths.exit_curves_png in paths.files()


def test_a_ratio_too_wide_to_read_says_so_instead_of_a_headline():
    from pipeline.report.wording import _ratio_cell

    row = pd.Series({"paired_ratio": 1.91, "ratio_ci_low": 0.35, "ratio_ci_high": 10.41, "n_pairs": 3})
    assert _ratio_cell(row) == "too noisy to read (0.35-10.41)"
    assert _ratio_cell(row.copy().replace({10.41: 1.2})) == "1.91× (0.35-1.20)"
    assert _ratio_cell(None) == "n/a"
