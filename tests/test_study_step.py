"""The study step's pure parts: the grid (arms, budgets, seeds, cells, comparisons), the
protocol (seeds that may confirm, Holm's correction, labels) and the report's arithmetic."""

from __future__ import annotations

import math

import mlflow
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.cli import ConfigError
from pipeline.report import stats
from pipeline.study import command, figure, grid, protocol, report, results
from pipeline.study.grid import Budget, Cell
from pipeline.tracking.runs import CODE_TAG


def test_budgets_seeds_and_arms_parse_or_name_the_fix():
    assert grid.parse_budget("flops:0.5") == Budget("flops", 0.5)
    assert grid.parse_budget(" seconds ") == Budget("seconds")
    assert grid.parse_seeds("300-302,310,301") == (300, 301, 302, 310)
    assert grid.parse_budget("flops:0.123457") == Budget("flops", 0.123457)
    # more digits than a cell's key keeps: two cells would share a key, or pass for the reference
    for bad in ("flops:0", "flops:-1", "flops:nan", "flops:x", "minutes", "flops", "flops:1.0000001"):
        with pytest.raises(ConfigError, match="--budgets"):
            grid.parse_budget(bad)
    for bad in ("", "3-x", "-5", "1,,a", "300-3000000"):  # a typo's millions refused, not expanded
        with pytest.raises(ConfigError, match="--seeds"):
            grid.parse_seeds(bad)
    with pytest.raises(ConfigError, match="unknown arm 'dynamc'.*known: static"):
        grid.parse_arms("static,dynamc")
    with pytest.raises(ConfigError, match="include static"):
        grid.parse_arms("dynamic")


@given(
    arm=st.sampled_from(list(grid.ARMS)),
    budget=st.one_of(
        st.sampled_from([Budget("epochs"), Budget("seconds")]),
        st.floats(0.01, 10, allow_nan=False).map(lambda f: Budget("flops", f)),
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_cell_key_names_its_cell_exactly(arm, budget, seed):
    cell = Cell(arm, budget, seed)
    assert Cell.from_key(cell.key) == Cell(arm, grid.parse_budget(budget.label), seed)


def test_cells_put_each_reference_first_and_the_seconds_cells_last():
    arms = grid.parse_arms("static,dynamic,dynamic-random")
    budgets = (Budget("flops", 0.5), Budget("seconds"))
    cells = grid.cells(arms, budgets, (7, 3))
    keys = [c.key for c in cells]
    # static: the reference and flops:0.5 (no seconds cell); each growing arm: the two asked for
    assert len(keys) == len(set(keys)) == 2 * (2 + 2 + 2)
    assert keys[:2] == ["static@epochs#7", "static@epochs#3"]
    assert "dynamic@epochs#7" not in keys  # equal epochs was not asked for
    assert all(c.needs_reference_run for c in cells[-4:])
    assert not any(c.needs_reference_run for c in cells[:-4])
    assert "static@seconds#7" not in keys


def test_static_at_its_own_flops_is_the_reference_not_a_second_run():
    arms = grid.parse_arms("static,dynamic")
    budgets = (Budget("flops", 0.5), Budget("flops", 1.0))
    keys = [c.key for c in grid.cells(arms, budgets, (5,))]
    assert "static@flops:1#5" not in keys and "static@flops:0.5#5" in keys
    names = [c.name for c in grid.comparisons(arms, budgets)]
    assert "dynamic@flops:1 vs static@epochs" in names
    assert "dynamic@flops:0.5 vs static@flops:0.5" in names


def test_budget_options_follow_the_reference():
    cell = Cell("dynamic", Budget("flops", 0.25), 1)
    assert grid.budget_option(cell, 4e12, "") == "1000000000000flops"
    assert grid.budget_option(Cell("dynamic", Budget("seconds"), 1), 4e12, "abc") == "run:abc:s"
    assert grid.budget_option(Cell("static", Budget("epochs"), 1), 4e12, "") == ""
    with pytest.raises(ValueError):
        grid.budget_option(Cell("dynamic", Budget("seconds"), 1), 4e12, "")


def test_each_arm_is_set_against_static_at_its_budget_where_static_trains_there():
    arms = grid.parse_arms("static,dynamic")
    asked = (Budget("epochs"), Budget("flops", 0.5), Budget("seconds"))
    names = [c.name for c in grid.comparisons(arms, asked)]
    assert names == [
        "dynamic@epochs vs static@epochs",
        "dynamic@flops:0.5 vs static@flops:0.5",
        "dynamic@seconds vs static@epochs",
    ]


def test_an_arm_that_names_its_budgets_trains_and_is_compared_at_those_only():
    arms = grid.parse_arms("static,dynamic,dynamic-random@epochs")
    asked = (Budget("epochs"), Budget("seconds"), Budget("flops", 0.25))
    keys = [c.key for c in grid.cells(arms, asked, (4,))]
    assert [k for k in keys if k.startswith("dynamic-random")] == ["dynamic-random@epochs#4"]
    assert {"dynamic@epochs#4", "dynamic@seconds#4", "dynamic@flops:0.25#4", "static@flops:0.25#4"} <= set(
        keys
    )
    names = [c.name for c in grid.comparisons(arms, asked)]
    assert [n for n in names if n.startswith("dynamic-random")] == ["dynamic-random@epochs vs static@epochs"]
    # the reference always trains; limited, static trains no share of its FLOPs, so a growing arm
    # at a share is set against the reference run
    limited = grid.parse_arms("static@flops:0.5,dynamic@flops:0.25+epochs")
    keys = [c.key for c in grid.cells(limited, asked, (4,))]
    assert keys == ["static@epochs#4", "static@flops:0.5#4", "dynamic@flops:0.25#4", "dynamic@epochs#4"]
    assert [c.name for c in grid.comparisons(limited, asked)] == [
        "dynamic@flops:0.25 vs static@epochs",
        "dynamic@epochs vs static@epochs",
    ]
    for bad, why in (("static,dynamic@hours", "--budgets"), ("static,dynamic,dynamic", "named twice")):
        with pytest.raises(ConfigError, match=why):
            grid.parse_arms(bad)


def test_a_control_is_set_against_the_arm_it_controls_at_each_budget_both_train_at():
    arms = grid.parse_arms("static,dynamic,dynamic-random@epochs,dynamic-anti")
    asked = (Budget("epochs"), Budget("seconds"))
    controls = grid.control_comparisons(arms, asked)
    assert [c.name for c in controls] == [
        "dynamic@epochs vs dynamic-random@epochs",  # random order trains at epochs only
        "dynamic@epochs vs dynamic-anti@epochs",
        "dynamic@seconds vs dynamic-anti@seconds",
    ]
    assert [c.key for c in controls] == [
        "dynamic/epochs/vs-dynamic-random",
        "dynamic/epochs/vs-dynamic-anti",
        "dynamic/seconds/vs-dynamic-anti",
    ]
    family = grid.comparisons(arms, asked)
    assert all(c.against_arm == "static" for c in family)  # what a confirmation preregisters
    assert len({c.key for c in [*family, *controls]}) == len(family) + len(controls)  # one metric each
    # a control without the arm it controls is set against static only
    assert grid.control_comparisons(grid.parse_arms("static,dynamic-random"), asked) == []


def test_the_report_sets_an_arm_against_its_control_paired_by_seed_apart_from_the_family():
    rows = _rows()
    random_order = rows[(rows.arm == "dynamic") & (rows.budget == "epochs")].assign(arm="dynamic-random")
    random_order["acc"] = [0.83, 0.80, 0.85]  # dynamic: 0.82, 0.80, 0.84
    rows = pd.concat([rows, random_order.assign(acc_hard=random_order["acc"])])
    arms, budgets = grid.parse_arms("static,dynamic,dynamic-random"), (Budget("epochs"),)
    table = report.compare(rows, grid.comparisons(arms, budgets), "confirmatory")
    controls = report.compare(
        rows, grid.control_comparisons(arms, budgets), report.outside_family("confirmatory")
    )
    (line,) = controls.to_dict("records")
    assert line["comparison"] == "dynamic@epochs vs dynamic-random@epochs"
    assert line["against"] == "dynamic-random@epochs" and line["n"] == 3 and line["label"] == "secondary"
    assert line["diff_points"] == pytest.approx(-2 / 3) and line["ahead"] == 0
    assert line["diff_points_hard"] == pytest.approx(-2 / 3) and line["seconds_ratio"] == pytest.approx(1.0)
    assert line["p_holm"] == pytest.approx(line["p_t"])  # a family of its own: one line
    # the family is static's two lines, corrected over two whatever the controls
    random_line = table.set_index("comparison").loc["dynamic-random@epochs vs static@epochs"]
    assert len(table) == 2 and random_line["diff_points"] == pytest.approx(8 / 3)
    assert list(table["p_holm"]) == pytest.approx(stats.holm(list(table["p_t"])))
    assert report.verdict({**line, "p_holm": 0.01}) == "dynamic-random ahead"
    doc = {"study": "t", "phase": "confirm", "label": "confirmatory", "metric": "test/acc", "seeds": "1,2,3"}
    text = report.markdown({**doc, "epochs": 4, "static_spec": "default", "health": {}}, table, controls)
    assert "correction: Holm over the 2 comparisons" in text
    assert "Against the controls (secondary: outside the family above" in text
    assert "| dynamic@epochs vs dynamic-random@epochs | 3 | -0.67 (" in text


def test_a_static_arm_other_than_the_reference_trains_at_every_budget_asked_and_is_compared():
    arms = grid.parse_arms("static,static-curriculum")
    asked = (Budget("epochs"), Budget("flops", 1.0), Budget("seconds"))
    keys = [c.key for c in grid.cells(arms, asked, (2,))]
    assert keys == [
        "static@epochs#2",
        "static-curriculum@epochs#2",
        "static-curriculum@flops:1#2",
        "static-curriculum@seconds#2",
    ]
    assert [c.name for c in grid.comparisons(arms, asked)] == [
        "static-curriculum@epochs vs static@epochs",
        "static-curriculum@flops:1 vs static@epochs",
        "static-curriculum@seconds vs static@epochs",
    ]


def test_the_curriculum_alone_takes_the_growing_arms_diet_where_the_schedule_grows():
    from models.schedule import parse_schedule
    from pipeline.curriculum.config import DynamicCurriculumConfig
    from pipeline.curriculum.diet import diet_of_growth
    from pipeline.study.cell import StudyRuns, static_diet
    from pipeline.training.config import TrainConfig

    runs = StudyRuns(
        "s", "screen", "", "", None, TrainConfig(epochs=12), "minimal", "default", "base", None, "", 1.0
    )
    diet = static_diet(runs, grid.ARMS["static-curriculum"])
    assert diet == {
        "pacing": "tiers",
        "prune": DynamicCurriculumConfig().prune,
        **diet_of_growth(parse_schedule("default", 12)),
    }
    assert diet["tier_boundaries"] and diet["prune_from"] > 1  # tied to where growth falls
    assert static_diet(runs, grid.ARMS["static-hold-back"]) == {"hold_back": grid.NOISE_HOLD_BACK}
    assert static_diet(runs, grid.ARMS["static"]) == {}


def test_holm_matches_its_definition():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4 * 0.005, 3 * 0.01, 2 * 0.03, max(that, 1 * 0.04)
    adjusted = stats.holm([0.01, 0.04, 0.03, 0.005, math.nan])
    assert adjusted[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(adjusted[4])
    assert stats.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_a_seed_that_gated_a_choice_or_screened_cannot_confirm():
    assert protocol.gated(722) and protocol.gated(1) and not protocol.gated(400)
    assert protocol.gated(945) and protocol.gated(952) and protocol.gated(9991) and protocol.gated(957)
    assert protocol.gated(958) and protocol.gated(959) and protocol.gated(960) and protocol.gated(961)
    assert protocol.gated(962) and protocol.gated(963) and protocol.gated(964) and protocol.gated(967)
    assert protocol.gated(965) and protocol.gated(966) and protocol.gated(968)  # static90-maxhead-b
    with pytest.raises(ConfigError, match="seed 722 gated a choice"):
        protocol.check_confirm_seeds((400, 722), {})
    with pytest.raises(ConfigError, match="seed 401 trained in screen study 'resnet-screen'"):
        protocol.check_confirm_seeds((400, 401), {401: "screen study 'resnet-screen'"})
    protocol.check_confirm_seeds((400, 401), {500: "other"})
    assert protocol.label("confirm", (400, 401), preregistered=True) == "confirmatory"
    assert protocol.label("confirm", (400, 720), preregistered=True) == "exploratory"
    assert protocol.label("screen", (400, 401), preregistered=False) == "exploratory"


def test_a_preregistration_digest_changes_with_what_it_commits_to():
    base = protocol.Preregistration("s", ("a vs b",), (1, 2), "test/acc", "holm", 0.05, {"epochs": "12"})
    same = protocol.Preregistration("s", ("a vs b",), (1, 2), "test/acc", "holm", 0.05, {"epochs": "12"})
    other = protocol.Preregistration("s", ("a vs b",), (1, 3), "test/acc", "holm", 0.05, {"epochs": "12"})
    assert base.digest() == same.digest() != other.digest()


def _rows() -> pd.DataFrame:
    out = []
    for seed, static, dynamic, half in ((1, 0.80, 0.82, 0.81), (2, 0.79, 0.80, 0.80), (3, 0.81, 0.84, 0.82)):
        for arm, budget, acc, secs, flops in (
            ("static", "epochs", static, 100.0, 10.0),
            ("dynamic", "epochs", dynamic, 70.0, 6.0),
            ("dynamic", "flops:0.5", half, 50.0, 5.0),
            ("static", "flops:0.5", static - 0.02, 50.0, 5.0),
        ):
            out.append(
                {"arm": arm, "budget": budget, "seed": seed, "acc": acc, "trained_s": secs, "flops": flops}
                | {"epochs": 4, "health": "ok", "acc_easy": acc, "acc_medium": acc, "acc_hard": acc}
            )
    return pd.DataFrame(out)


EPOCHS_AND_HALF = (Budget("epochs"), Budget("flops", 0.5))


def test_the_report_pairs_by_seed_corrects_and_says_what_it_found():
    rows = _rows()
    comparisons = grid.comparisons(grid.parse_arms("static,dynamic"), EPOCHS_AND_HALF)
    table = report.compare(rows, comparisons, "exploratory")
    first = table.iloc[0].to_dict()
    assert first["comparison"] == "dynamic@epochs vs static@epochs"
    assert first["diff_points"] == pytest.approx(2.0)
    assert first["ahead"] == 3 and first["n"] == 3
    assert first["seconds_ratio"] == pytest.approx(0.7) and first["flops_ratio"] == pytest.approx(0.6)
    assert first["diff_points_hard"] == pytest.approx(2.0)
    assert list(table["p_holm"]) == pytest.approx(stats.holm(list(table["p_t"])))
    assert set(table["label"]) == {"exploratory"}
    points = report.frontier(rows)
    # dynamic's frontier (50 s: 0.81, 70 s: 0.82) reaches static's 0.80 before its first point
    assert report.seconds_to_reach(points)["dynamic"] == pytest.approx(0.5)
    assert report.health(rows)["dynamic@epochs"] == {"ok": 3}


def test_a_comparison_too_few_seeds_could_test_still_counts_in_holms_family():
    rows = _rows()
    rows = rows[~((rows.budget == "flops:0.5") & (rows.seed != 1))]  # the half-FLOPs cells: one seed
    table = report.compare(rows, grid.comparisons(grid.parse_arms("static,dynamic"), EPOCHS_AND_HALF), "x")
    epochs, half = table.iloc[0], table.iloc[1]
    assert half["n"] == 1 and math.isnan(half["p_holm"]) and half["verdict"] == "too few seeds to tell"
    assert epochs["p_holm"] == pytest.approx(min(1.0, 2 * epochs["p_t"]))  # a family of two, not one


def test_labels_of_arms_matched_on_one_budget_do_not_cover_each_other():
    # three arms whose points sit on the same spot (cells matched on seconds and on FLOPs):
    # each arm's labels have their own offset, so none is drawn over another's
    spot = {"acc": 0.89, "acc_ci_low": 0.88, "acc_ci_high": 0.90, "trained_s": 100.0, "flops": 1.0}
    points = pd.DataFrame(
        [{"arm": arm, "budget": budget, "n": n, **spot} for arm, budget, n in
         (("static", "epochs", 3), ("dynamic", "flops:1", 3), ("dynamic-random", "seconds", 2))]
    )  # fmt: skip
    fig = figure.draw(points, "t", "test/acc")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [text.get_window_extent(renderer) for text in ax.texts]
        assert len(boxes) == 3
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    figure.plt.close(fig)


def test_labels_of_points_near_one_spot_do_not_cover_each_other():
    # 958-962's join: two arms' seconds cells 0.28 points apart, on an axis of two points; the
    # arms' offsets alone drew one "seconds" over the other
    cells = (
        ("static", "epochs", 0.8940, 1926.0, 1.0), ("static", "flops:0.5", 0.8796, 878.0, 0.5),
        ("dynamic", "seconds", 0.8882, 1925.0, 0.86), ("dynamic", "flops:0.5", 0.8749, 930.0, 0.46),
        ("dynamic", "flops:1", 0.8898, 2160.0, 0.99), ("dynamic-random", "seconds", 0.8910, 1926.0, 0.86),
    )  # fmt: skip
    points = pd.DataFrame(
        [{"arm": arm, "budget": budget, "n": 5, "acc": acc, "acc_ci_low": acc - 0.003,
          "acc_ci_high": acc + 0.003, "trained_s": seconds, "flops": flops}
         for arm, budget, acc, seconds, flops in cells]
    )  # fmt: skip
    fig = figure.draw(points, "t", "test/acc")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [text.get_window_extent(renderer) for text in ax.texts]
        assert len(boxes) == len(cells)
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    figure.plt.close(fig)


def test_the_report_figure_and_text_are_written(tmp_path):
    rows = _rows()
    comparisons = grid.comparisons(grid.parse_arms("static,dynamic"), EPOCHS_AND_HALF)
    table = report.compare(rows, comparisons, "exploratory")
    path = figure.figure(report.frontier(rows), tmp_path / "f.png", "study t (exploratory)", "val/acc")
    assert path.stat().st_size > 10_000
    # a point resting on fewer seeds than the others says how many
    fewer = report.frontier(rows[(rows.arm == "static") | (rows.seed == 1)])
    said = figure.point_labels(fewer, most=3)
    labels = dict(zip(fewer["arm"] + "@" + fewer["budget"], said))
    assert labels == {
        "static@epochs": "epochs", "dynamic@epochs": "epochs (n=1)",
        "dynamic@flops:0.5": "flops:0.5 (n=1)", "static@flops:0.5": "flops:0.5",
    }  # fmt: skip
    doc = {"study": "t", "phase": "screen", "label": "exploratory", "metric": "val/acc", "seeds": "1,2,3"}
    text = report.markdown({**doc, "epochs": 4, "static_spec": "default", "health": {}}, table)
    assert "dynamic@flops:0.5 vs static@flops:0.5 | 3 | +3.00 (+3.00 to +3.00) | 3 of 3 | 0.000" in text


def test_the_report_gives_each_arms_mean_with_its_interval_and_whole_run_minutes():
    rows = _rows().assign(run_s=lambda r: r["trained_s"] * 1.2)
    rows.loc[(rows.arm == "static") & (rows.budget == "epochs") & (rows.seed == 3), "run_s"] = 150.0
    points = report.frontier(rows)
    static = points.set_index(["arm", "budget"]).loc[("static", "epochs")]
    assert static["run_s"] == pytest.approx((120 + 120 + 150) / 3) and static["run_s_max"] == 150.0
    doc = {"study": "t", "phase": "confirm", "label": "confirmatory", "metric": "test/acc", "seeds": "1,2,3"}
    doc |= {"epochs": 4, "static_spec": "default", "health": {}}
    text = report.markdown(doc, report.compare(rows, [], "confirmatory"), None, points)
    # 0.80, 0.79, 0.81: mean 80.00, t interval 80 -/+ 4.303 * 0.01 / sqrt(3) * 100
    assert "| static@epochs | 3 | 80.00 (77.52 to 82.48) | 100 | 2.2 (2.5) | 4 |" in text
    one = report.frontier(rows[rows.seed == 1].drop(columns="run_s"))  # rows that record no whole run
    text = report.markdown(doc, report.compare(rows, [], "confirmatory"), None, one)
    assert "| dynamic@epochs | 1 | 82.00 (no interval: one seed) | 70 | not recorded | 4 |" in text


def test_a_baseline_alone_writes_a_comparison_table_that_reads_back_empty(tmp_path):
    # a static-only confirmation compares nothing; its comparisons.csv once held a bare newline,
    # which pandas cannot read
    table = report.compare(_rows(), [], "confirmatory")
    table.to_csv(tmp_path / "comparisons.csv", index=False)
    again = pd.read_csv(tmp_path / "comparisons.csv")
    assert again.empty and list(again.columns) == report.COMPARISON_COLUMNS


def test_a_seconds_cell_trained_on_another_machine_than_its_reference_is_named():
    where = [
        ("static@epochs#1", "a", "boot-1"),
        ("dynamic@seconds#1", "a", "boot-2"),  # the same host name, booted again: another session
        ("static@epochs#2", "a", "boot-1"),
        ("dynamic@seconds#2", "a", "boot-1"),
        ("static@epochs#3", "a", ""),  # recorded before boots were: not compared
        ("dynamic@seconds#3", "a", "boot-1"),
        ("dynamic@epochs#3", "b", "boot-3"),  # epochs hold no machine's speed
        ("static@epochs#4", "a", "boot-1"),
        ("dynamic@seconds#4", "b", "boot-1"),
    ]
    rows = pd.DataFrame(where, columns=["cell", "host", "boot"])
    elsewhere = report.seconds_on_another_machine(rows)
    assert elsewhere == ["dynamic@seconds#1", "dynamic@seconds#4"]
    assert report.seconds_on_another_machine(_rows()) == []  # rows that record no machine
    # a table read back or joined gives NaN where nothing was recorded: not a machine of its own
    unrecorded = rows.assign(boot=rows["boot"].replace("", float("nan")))
    assert report.seconds_on_another_machine(unrecorded) == elsewhere
    assert report.seconds_on_another_machine(rows.assign(host=float("nan"), boot=float("nan"))) == []
    doc = {"study": "t", "phase": "screen", "label": "exploratory", "metric": "val/acc", "seeds": "1-4"}
    doc |= {"epochs": 4, "static_spec": "default", "health": {}, "seconds_on_another_machine": elsewhere}
    table = report.compare(_rows(), grid.comparisons(grid.parse_arms("static,dynamic"), EPOCHS_AND_HALF), "x")
    assert (
        "Seconds matched across machines: 2 cell(s) trained on another machine or boot than the run "
        "whose seconds they were given (dynamic@seconds#1, dynamic@seconds#4)"
    ) in report.markdown(doc, table)


def test_the_report_names_the_code_each_cell_trained_with():
    rows = _rows()
    assert report.code_versions(rows) == {}  # a table without the column: nothing to say
    rows["code"] = ["abc"] * (len(rows) - 2) + ["def", ""]
    assert report.code_versions(rows) == {"abc": len(rows) - 2, "def": 1, "not recorded": 1}
    rows["code"] = ["abc"] * (len(rows) - 1) + ["def"]
    doc = {"study": "t", "phase": "screen", "label": "exploratory", "metric": "val/acc", "seeds": "1-3"}
    doc |= {"epochs": 4, "static_spec": "default", "health": {}, "code_versions": report.code_versions(rows)}
    text = report.markdown(doc, report.compare(rows, [], "exploratory"))
    assert f"Code the cells trained with: abc ({len(rows) - 1} cells), def (1 cell): a change" in text
    doc["code_versions"] = {"abc": 2}  # one version: no caution
    assert "Code the cells trained with: abc (2 cells).\n" in report.markdown(
        doc, report.compare(rows, [], "x")
    )


def test_a_reopened_study_says_when_its_finished_cells_trained_with_other_code(tracking):
    finished = {}
    for key, version in [("static@epochs#1", "abc"), ("dynamic@epochs#1", "abc"), ("static@epochs#2", "")]:
        with mlflow.start_run() as run:
            if version:
                mlflow.set_tag(CODE_TAG, version)
        finished[key] = run.info.run_id
    earlier = results.code_versions_of(finished)
    assert earlier == {"abc": 2, "not recorded": 1}
    assert command.code_changed("s", earlier, "def", left=3) == (
        "study 's': its finished cells trained with code abc (2 cells), not recorded (1 cell); the 3 "
        "left train with def: if a change between them alters training, start another study"
    )
    # the same code, nothing finished yet, or nothing left to train: nothing to say
    for same, left in (({"def": 3}, 1), ({}, 6), (earlier, 0)):
        assert command.code_changed("s", same, "def", left) == ""


def test_the_figure_names_the_seeds_its_means_rest_on():
    rows = _rows()
    assert figure.seeds_shown((1, 2, 3), rows) == "1,2,3"
    assert figure.seeds_shown((1, 2, 3, 4), rows[rows.seed != 2]) == "1,3 (not in the means: 2,4)"
    assert figure.seeds_shown((5,), rows.iloc[:0]) == "none (not in the means: 5)"
    unread = rows.assign(acc=rows["acc"].where(rows.seed != 3))  # a cell with no accuracy read
    assert figure.seeds_shown((1, 2, 3), unread) == "1,2 (not in the means: 3)"


def test_every_arm_is_options_the_steps_take():
    from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
    from pipeline.curriculum.ordering import ORDERS
    from pipeline.growth.config import GrowthConfig
    from pipeline.training.config import TrainConfig

    for name, arm in grid.ARMS.items():
        assert arm.kind in ("static", "dynamic"), name
        TrainConfig(**arm.train).validate()
        GrowthConfig(**arm.growth).validate()
        diets = {"static": CurriculumConfig, "dynamic": DynamicCurriculumConfig}
        diet = diets[arm.kind](**arm.curriculum)  # fields it has
        assert diet.order in ORDERS, name
        assert not arm.diet_of_growth or arm.kind == "static", name
    assert grid.ARMS["dynamic-anti"].curriculum == {"order": "anti"}


def test_every_named_recipe_is_options_the_steps_take():
    import dataclasses

    from pipeline.curriculum.config import DynamicCurriculumConfig
    from pipeline.growth.config import GrowthConfig
    from pipeline.study.config import GridConfig
    from pipeline.study.recipes import RECIPES
    from pipeline.training.config import TrainConfig

    for name, lever in RECIPES.items():
        dataclasses.replace(TrainConfig(), **lever.both, **lever.dynamic).validate()
        DynamicCurriculumConfig(**lever.diet)
        GrowthConfig(**lever.growth).validate()
        assert not {"start_spec", "schedule"} & set(lever.growth), name  # static trains what growth ends in
    with pytest.raises(ConfigError, match="--recipe 'nope'"):
        GridConfig(seeds="1", recipe="nope").parsed()


def test_the_report_says_a_comparison_without_an_interval_or_without_pairs_has_none(tmp_path):
    # a study with one seed of a budget trained, and one with none of an arm yet: the table says
    # so in words, not "+nan (+nan to +nan)"
    rows = _rows()
    rows = rows[~((rows.budget == "flops:0.5") & (rows.seed != 1))]
    rows = rows[~((rows.arm == "dynamic") & (rows.budget == "epochs"))]
    family = grid.comparisons(grid.parse_arms("static,dynamic"), EPOCHS_AND_HALF)
    doc = {"study": "s", "title": "s", "phase": "screen", "label": "exploratory", "metric": "val/acc"}
    doc |= {"seeds": "1,2,3", "epochs": 4, "static_spec": "x"}
    report.write(tmp_path, rows, family, [], doc, (1, 2, 3))
    text = (tmp_path / "report.md").read_text()
    assert "| dynamic@epochs vs static@epochs | 0 | no pairs yet | 0 of 0 | not tested | - | - |" in text
    half = "| dynamic@flops:0.5 vs static@flops:0.5 | 1 | +3.00 (no interval: one pair) | 1 of 1 |"
    assert f"{half} not tested |" in text
    assert "nan" not in text
