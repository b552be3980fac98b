"""The residual checks' stored cells give their stored comparisons digit for digit: each folder
of docs/results/resnet/ that a study wrote keeps every cell's test accuracy, seconds and FLOPs
(cells.csv) beside what the study concluded from them (comparisons.csv, and controls.csv where
an arm was set against its control)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from pipeline.report.stats import summary
from pipeline.study import grid, report

RESNET = Path(__file__).resolve().parents[1] / "docs" / "results" / "resnet"
STUDIES = sorted(p.parent for p in RESNET.glob("*/comparisons.csv"))
NUMBERS = ("n", "diff_points", "ci_low_points", "ci_high_points", "p_t", "ahead", "seconds_ratio")
NUMBERS += ("flops_ratio", "p_holm", "diff_points_easy", "diff_points_medium", "diff_points_hard")


def recomputed(folder: Path, table: str = "comparisons.csv") -> tuple[pd.DataFrame, pd.DataFrame]:
    stored = pd.read_csv(folder / table, dtype={"seeds": str})  # "958", not 958.0
    comparisons = []
    for line in stored.itertuples():
        against_arm, against = line.against.split("@")
        budgets = grid.parse_budget(line.budget), grid.parse_budget(against)
        comparisons.append(grid.Comparison(line.arm, *budgets, against_arm))
    return stored, report.compare(pd.read_csv(folder / "cells.csv"), comparisons, stored["label"].iloc[0])


def interval(line: dict) -> str:
    """A comparison's difference and interval as the pages print them (with true minus signs)."""
    shown = f"{line['diff_points']:+.2f} ({line['ci_low_points']:+.2f} to {line['ci_high_points']:+.2f})"
    return shown.replace("-", "−")


def seconds_comparison(rows: pd.DataFrame) -> dict:
    """Growth at static's seconds against static, over ``rows`` (cells of one or more studies)."""
    budgets = (grid.parse_budget("seconds"),)
    (line,) = report.compare(rows, grid.comparisons(grid.parse_arms("static,dynamic"), budgets), "x").to_dict(
        "records"
    )
    return line


def counted_cells() -> pd.DataFrame:
    """The joined comparison's cells by name: all but the reference run a continuation kept for
    its own cells alone (962-e's static-22, the reference of its FLOPs cell)."""
    rows = pd.read_csv(RESNET / "airbench-compare" / "cells.csv", keep_default_na=False)
    return rows[rows["reference_of"] == ""].set_index("cell")


def test_every_study_folder_is_found():
    named = {"cpu-confirm", "cpu-control", "cpu-halfflops", "cpu-widen-seconds", "cpu-widen-seconds-2"}
    named |= {"cpu-widen-order", "short-seconds-948-949", "short-seconds-950-951", "short-seconds-952"}
    named |= {"gpu-short", "airbench-compare-958", "airbench-compare-959", "airbench-compare"}
    named |= {"airbench-compare-960", "airbench-compare-960-b", "airbench-compare-961"}
    named |= {
        "airbench-compare-962",
        "airbench-compare-962-b",
        "airbench-compare-962-d",
        "airbench-compare-962-e",
    }
    assert {p.name for p in STUDIES} >= named


# controls.csv: where an arm was set against its control. A baseline alone (static90-maxhead-b-S)
# compares nothing: the study code it ran with wrote that empty table as a bare newline.
TABLES = [
    (f, t)
    for f in STUDIES
    for t in ("comparisons.csv", "controls.csv")
    if (f / t).is_file() and (f / t).read_text().strip()
]


@pytest.mark.parametrize(("folder", "name"), TABLES, ids=lambda v: getattr(v, "name", v))
def test_the_stored_cells_give_the_stored_comparisons(folder, name):
    stored, table = recomputed(folder, name)
    assert list(table["comparison"]) == list(stored["comparison"])
    assert list(table["seeds"].astype(str)) == list(stored["seeds"].fillna("").astype(str))
    assert list(table["verdict"]) == list(stored["verdict"])
    for column in NUMBERS:
        for got, kept in zip(table[column], stored[column]):
            assert (math.isnan(got) and math.isnan(kept)) or got == pytest.approx(kept, rel=1e-9), column


def test_the_pooled_widening_checks_are_what_the_residual_page_says():
    # The secondary named in docs/results/preregistered.md (commit 8a0840c): both checks' pairs.
    rows = pd.concat(
        [pd.read_csv(RESNET / f / "cells.csv") for f in ("cpu-widen-seconds", "cpu-widen-seconds-2")]
    )
    line = seconds_comparison(rows)
    assert line["n"] == 8 and line["ahead"] == 6
    page = (RESNET / "README.md").read_text()
    assert interval(line) in page, interval(line)
    assert f"| {line['p_t']:.2f} | {line['flops_ratio']:.2f}x |" in page


def test_the_gpu_checks_first_call_gives_the_view_the_residual_page_shows():
    # The preregistered command finished 29 of 40 cells; a second call trained the rest. The page
    # shows each comparison on the first call's cells too (first-call-cells.txt lists them).
    folder = RESNET / "gpu-short"
    rows = pd.read_csv(folder / "cells.csv")
    first = set((folder / "first-call-cells.txt").read_text().split())
    assert len(first) == 29 and first < set(rows["cell"]) and len(rows) == 40
    arms = grid.parse_arms("static,dynamic,dynamic-random")
    budgets = tuple(grid.parse_budget(b) for b in ("epochs", "flops:0.5", "flops:1"))
    table = report.compare(rows[rows["cell"].isin(first)], grid.comparisons(arms, budgets), "x")
    page = (RESNET / "README.md").read_text()
    for line in table.to_dict("records"):
        assert f"{interval(line)} | {line['n']} |" in page, (line["comparison"], interval(line))
    five = pd.concat([pd.read_csv(folder / t) for t in ("comparisons.csv", "controls.csv")])
    for line in five.to_dict("records"):  # all five seeds, the controls too
        assert f"{interval(line)} | {line['ahead']} of 5 |" in page.replace("**", ""), interval(line)


def test_the_five_short_run_seconds_pairs_are_what_the_residual_page_says():
    # docs/results/preregistered.md (5582274): one comparison over the five pairs of seeds
    # 948-952, read from the studies' cells.csv joined (all five have trained).
    folders = sorted(RESNET.glob("short-seconds-*"))
    rows = pd.concat([pd.read_csv(f / "cells.csv") for f in folders])
    line = seconds_comparison(rows)
    assert line["n"] == rows["seed"].nunique() == 5  # every seed's pair trained
    page = (RESNET / "README.md").read_text()
    assert f"{interval(line)} | {line['ahead']} of {line['n']} |" in page, interval(line)


def test_the_static_baseline_at_90_percent_is_what_the_residual_page_says():
    # docs/results/preregistered.md (0817aab): the mean of five static runs' test accuracy,
    # seeds 953-957, against 90.0%; and every whole run within 30 minutes
    folder = RESNET / "airbench-static"
    rows = pd.read_csv(folder / "cells.csv")
    assert sorted(rows["seed"]) == [953, 954, 955, 956, 957] and set(rows["arm"] + "@" + rows["budget"]) == {
        "static@epochs"
    }
    acc = summary(rows["acc"])
    shown = f"**{100 * acc['mean']:.2f}% ({100 * acc['ci_low']:.2f} to {100 * acc['ci_high']:.2f})**"
    page = (RESNET / "README.md").read_text()
    assert shown in page and acc["mean"] < 0.90  # the bar, not met
    assert rows["run_s"].max() <= 30 * 60  # the time bar, met
    assert f"longest {rows['run_s'].max() / 60:.1f}" in page
    (stored,) = pd.read_csv(folder / "frontier.csv").to_dict("records")  # the study's own means
    (again,) = report.frontier(rows).to_dict("records")
    for column in ("acc", "acc_ci_low", "acc_ci_high", "trained_s", "run_s", "run_s_max"):
        assert again[column] == pytest.approx(stored[column], rel=1e-9), column


def test_the_first_seed_of_growth_against_the_90_percent_baseline_is_what_the_residual_page_says():
    # docs/results/preregistered.md (b42d7af): seeds 958-962, one a session; 958 alone is a
    # partial view, and the joined folder (pipeline.study.join), all five whole, the verdict
    rows = pd.read_csv(RESNET / "airbench-compare-958" / "cells.csv")
    page = (RESNET / "README.md").read_text()
    acc = rows.set_index("cell")["acc"]
    for cell, against in [
        ("dynamic@seconds#958", "static@epochs#958"),
        ("dynamic@flops:1#958", "static@epochs#958"),
        ("dynamic@flops:0.5#958", "static@flops:0.5#958"),
        ("dynamic-random@seconds#958", "static@epochs#958"),  # the control, trained a session later
    ]:
        shown = f"{100 * (acc[cell] - acc[against]):+.2f}".replace("-", "−")
        assert f"| {100 * acc[cell]:.2f}% | {shown}" in page.replace("**", ""), cell
    ahead = 100 * (acc["dynamic-random@seconds#958"] - acc["dynamic@seconds#958"])
    assert f"({ahead:+.2f} over the default order)" in page
    assert len(rows) == 6 and set(rows["boot"]) == {"6f624658-5849-494c-94de-e11ccaeb849d"}  # one boot
    joined = (RESNET / "airbench-compare" / "report.md").read_text()
    assert "**Partial**" not in joined and "Missing" not in joined
    assert joined.splitlines()[0].endswith(": confirmatory")


def test_the_second_seed_of_growth_against_the_90_percent_baseline_is_what_the_residual_page_says():
    # seed 959: its six cells over two sessions on one boot (the seconds cells left queued by
    # --stop-after-hours, then trained by the same command)
    rows = pd.read_csv(RESNET / "airbench-compare-959" / "cells.csv")
    page = (RESNET / "README.md").read_text().replace("**", "")
    acc = rows.set_index("cell")["acc"]
    assert len(rows) == 6 and set(rows["boot"]) == {"6f624658-5849-494c-94de-e11ccaeb849d"}
    for cell, against in [
        ("dynamic@seconds#959", "static@epochs#959"),
        ("dynamic@flops:1#959", "static@epochs#959"),
        ("dynamic@flops:0.5#959", "static@flops:0.5#959"),
        ("dynamic-random@seconds#959", "static@epochs#959"),
    ]:
        shown = f"{100 * (acc[cell] - acc[against]):+.2f}".replace("-", "−")
        assert f"| {100 * acc[cell]:.2f}% | {shown}" in page, cell
    assert f"| static, 22 epochs (the reference) | {100 * acc['static@epochs#959']:.2f}% |" in page
    ahead = 100 * (acc["dynamic-random@seconds#959"] - acc["dynamic@seconds#959"])
    assert f"({ahead:+.2f} over the default order)" in page
    study = json.loads((RESNET / "airbench-compare-959" / "study.json").read_text())
    assert not study["cells_missing"]
    # the five seeds joined, as the page and the README's first screen quote them
    joined = pd.read_csv(RESNET / "airbench-compare" / "comparisons.csv").set_index("comparison")
    controls = pd.read_csv(RESNET / "airbench-compare" / "controls.csv").set_index("comparison")
    readme = (RESNET.parents[2] / "README.md").read_text()
    for table, name, pairs in [
        (joined, "dynamic@seconds vs static@epochs", 5),
        (joined, "dynamic@flops:1 vs static@epochs", 5),
        (joined, "dynamic@flops:0.5 vs static@flops:0.5", 5),
        (joined, "dynamic-random@seconds vs static@epochs", 5),
        (controls, "dynamic@seconds vs dynamic-random@seconds", 5),
    ]:
        line = table.loc[name]
        shown = f"{line.diff_points:+.2f} ({line.ci_low_points:+.2f} to {line.ci_high_points:+.2f})"
        assert line.n == pairs and shown.replace("-", "−") in page, name
    for name in ("dynamic@seconds vs static@epochs", "dynamic@flops:1 vs static@epochs"):
        line = joined.loc[name]
        said = f"{-line.diff_points:.2f} at"  # "0.90 points at static's seconds", "0.37 at equal FLOPs"
        interval = f"({line.ci_low_points:+.2f} to {line.ci_high_points:+.2f})".replace("-", "−")
        assert said in readme.replace("points ", "") and interval in readme


def test_seed_960_s_first_cells_and_the_grown_step_benchmark_are_what_the_residual_page_says():
    rows = pd.read_csv(RESNET / "airbench-compare-960" / "cells.csv")
    page = (RESNET / "README.md").read_text()
    acc = rows.set_index("cell")["acc"]
    assert set(acc.index) == {"static@epochs#960", "static@flops:0.5#960", "dynamic@flops:0.5#960"}
    behind = 100 * (acc["dynamic@flops:0.5#960"] - acc["static@flops:0.5#960"])
    assert f"| {100 * acc['dynamic@flops:0.5#960']:.2f}% | {behind:+.2f}".replace("-", "−") in page
    assert f"static-22 {100 * acc['static@epochs#960']:.2f}% in" in page
    study = json.loads((RESNET / "airbench-compare-960" / "study.json").read_text())
    assert len(study["cells_missing"]) == 3
    bench = (RESNET / "bench-grown-step.md").read_text()
    grown = next(line for line in bench.splitlines() if line.startswith("| grown |"))
    ratio = grown.split("|")[3].strip()  # "0.990 (0.911 to 1.001)"
    median, low, high = (float(v) for v in ratio.replace("(", "").replace(")", "").replace("to", "").split())
    assert f"the grown network {median:.2f}x static's time a step ({low:.2f} to {high:.2f})" in page


def test_seed_960_s_continuation_is_what_the_residual_page_says():
    # preregistered.md (45ab191, 93c0c45): the first session's store was lost with three cells
    # queued; a continuation on another machine trained static-22 again and the growing network
    # at its FLOPs, and (3daa401: the next session found the same boot and store) its seconds
    # cells by the same command, matched to that static-22
    first = pd.read_csv(RESNET / "airbench-compare-960" / "cells.csv").set_index("cell")
    later = pd.read_csv(RESNET / "airbench-compare-960-b" / "cells.csv").set_index("cell")
    seconds = ("dynamic@seconds#960", "dynamic-random@seconds#960")
    assert set(later.index) == {"static@epochs#960", "dynamic@flops:1#960", *seconds}
    assert set(later["boot"]) == {later.loc["static@epochs#960", "boot"]}  # seconds matched on one boot
    assert set(later["boot"]) != set(first["boot"])  # another machine: nothing matched on seconds across
    study = json.loads((RESNET / "airbench-compare-960-b" / "study.json").read_text())
    assert not study["cells_missing"] and not study["seconds_on_another_machine"]
    page = (RESNET / "README.md").read_text().replace("**", "")
    acc = 100 * later["acc"]
    grown = f"{acc['dynamic@flops:1#960'] - acc['static@epochs#960']:+.2f}".replace("-", "−")
    assert f"| {acc['dynamic@flops:1#960']:.2f}% | {grown}" in page
    again = f"| static, 22 epochs (the reference, trained again) | {acc['static@epochs#960']:.2f}% |"
    superseded = (
        f"| static, 22 epochs (first session: superseded) | {100 * first['acc']['static@epochs#960']:.2f}% |"
    )
    assert again in page and superseded in page
    for cell in seconds:
        behind = f"{acc[cell] - acc['static@epochs#960']:+.2f}".replace("-", "−")
        assert f"| {acc[cell]:.2f}% | {behind}" in page, cell
    ahead = f"({acc[seconds[1]] - acc[seconds[0]]:+.2f} over the default order)"
    assert ahead in page
    # the join takes the continuation's cells for seed 960 and says which reading it superseded
    joined = counted_cells()
    for cell in ("static@epochs#960", "dynamic@flops:1#960", *seconds):
        assert joined.loc[cell, "run_id"] == later.loc[cell, "run_id"]
    for cell in ("static@flops:0.5#960", "dynamic@flops:0.5#960"):
        assert joined.loc[cell, "run_id"] == first.loc[cell, "run_id"]
    text = (RESNET / "airbench-compare" / "report.md").read_text()
    assert "airbench-compare-960 continued by airbench-compare-960-b (a study in a new store)" in text
    ref = first.loc["static@epochs#960"]
    assert f"static@epochs#960 {100 * ref['acc']:.2f}% (run {ref['run_id']})" in text


def test_seed_961_is_what_the_residual_page_says():
    # preregistered.md (b5606e1): static-22 at one session's end, four cells by the same command
    # the next and its random-order control (left queued) the session after, all on one boot
    rows = pd.read_csv(RESNET / "airbench-compare-961" / "cells.csv").set_index("cell")
    assert len(rows) == 6 and set(rows["boot"]) == {"1511b571-6337-4960-b93d-a8959deedf09"}  # one boot
    study = json.loads((RESNET / "airbench-compare-961" / "study.json").read_text())
    assert not study["cells_missing"]
    assert not study["seconds_on_another_machine"]
    page = (RESNET / "README.md").read_text().replace("**", "")
    acc = 100 * rows["acc"]
    assert f"| static, 22 epochs (the reference) | {acc['static@epochs#961']:.2f}% |" in page
    assert f"| static, half its FLOPs | {acc['static@flops:0.5#961']:.2f}% |" in page
    for cell, against in [
        ("dynamic@seconds#961", "static@epochs#961"),
        ("dynamic@flops:1#961", "static@epochs#961"),
        ("dynamic@flops:0.5#961", "static@flops:0.5#961"),
        ("dynamic-random@seconds#961", "static@epochs#961"),
    ]:
        shown = f"{acc[cell] - acc[against]:+.2f}".replace("-", "−")
        assert f"| {acc[cell]:.2f}% | {shown}" in page, cell
    behind = acc["dynamic@seconds#961"] - acc["dynamic-random@seconds#961"]
    assert behind > 0 and f"({behind:.2f} behind the default order)" in page
    # the join counts its pairs and names the cell it lacks
    joined = counted_cells()
    assert {c for c in joined.index if c.endswith("#961")} == set(rows.index)
    text = (RESNET / "airbench-compare" / "report.md").read_text()
    assert not any("#961" in line for line in text.splitlines() if line.startswith("Missing"))  # whole


def test_seed_962_s_first_cells_are_what_the_residual_page_says():
    # preregistered.md (05:05 entry): its reference and the half-FLOPs pair in one session, the
    # three other cells queued for the same command in the next
    rows = pd.read_csv(RESNET / "airbench-compare-962" / "cells.csv").set_index("cell")
    assert set(rows.index) == {"static@epochs#962", "static@flops:0.5#962", "dynamic@flops:0.5#962"}
    assert set(rows["boot"]) == {"1511b571-6337-4960-b93d-a8959deedf09"}
    study = json.loads((RESNET / "airbench-compare-962" / "study.json").read_text())
    queued = ["dynamic@flops:1#962", "dynamic@seconds#962", "dynamic-random@seconds#962"]
    assert study["cells_missing"] == queued
    page = (RESNET / "README.md").read_text().replace("**", "")
    acc = 100 * rows["acc"]
    # its reference is the continuation's now (test_seed_962_s_continuation_...)
    assert f"| static, half its FLOPs | {acc['static@flops:0.5#962']:.2f}% |" in page
    half = acc["dynamic@flops:0.5#962"] - acc["static@flops:0.5#962"]
    shown = f"{half:+.2f}".replace("-", "−")
    assert f"| {acc['dynamic@flops:0.5#962']:.2f}% | {shown} against static at half" in page


def test_seed_962_s_continuation_is_what_the_residual_page_says():
    # preregistered.md (13:55 and 14:06 entries): the store holding 962's three queued cells was
    # lost with its boot; a continuation in a new store trained static-22 again and, before its
    # FLOPs cell (which could not end that session), the growing network at its seconds
    first = pd.read_csv(RESNET / "airbench-compare-962" / "cells.csv").set_index("cell")
    later = pd.read_csv(RESNET / "airbench-compare-962-b" / "cells.csv").set_index("cell")
    assert set(later.index) == {"static@epochs#962", "dynamic@seconds#962"}
    assert set(later["boot"]) == {later.loc["static@epochs#962", "boot"]} != set(first["boot"])
    study = json.loads((RESNET / "airbench-compare-962-b" / "study.json").read_text())
    queued = ["dynamic@flops:1#962", "dynamic-random@seconds#962"]
    assert sorted(study["cells_missing"]) == sorted(queued) and not study["seconds_on_another_machine"]
    page = (RESNET / "README.md").read_text().replace("**", "")
    acc = 100 * later["acc"]
    again = f"| static, 22 epochs (962-b: superseded) | {acc['static@epochs#962']:.2f}% |"
    superseded = (
        f"| static, 22 epochs (first session: superseded) | {100 * first['acc']['static@epochs#962']:.2f}% |"
    )
    assert again in page and superseded in page
    behind = f"{acc['dynamic@seconds#962'] - acc['static@epochs#962']:+.2f}".replace("-", "−")
    row = f"| growing, static-22's seconds (962-b: superseded) | {acc['dynamic@seconds#962']:.2f}% | {behind}"
    assert row in page


def test_seed_962_s_seconds_cells_on_one_boot_are_what_the_residual_page_says():
    # preregistered.md (06:22 entry of 2026-12-03): 962-c's store lost with its boot, a further
    # continuation trained static-22 a fourth time and both seconds cells on one boot, its FLOPs
    # cell queued
    first = pd.read_csv(RESNET / "airbench-compare-962" / "cells.csv").set_index("cell")
    later = pd.read_csv(RESNET / "airbench-compare-962-d" / "cells.csv").set_index("cell")
    assert set(later.index) == {"static@epochs#962", "dynamic@seconds#962", "dynamic-random@seconds#962"}
    assert set(later["boot"]) == {"b040434d-9b61-4705-ad7c-9d58b829d41e"}
    study = json.loads((RESNET / "airbench-compare-962-d" / "study.json").read_text())
    assert study["cells_missing"] == ["dynamic@flops:1#962"] and not study["seconds_on_another_machine"]
    page = (RESNET / "README.md").read_text().replace("**", "")
    acc = 100 * later["acc"]
    assert f"| static, 22 epochs (the reference, 962-d) | {acc['static@epochs#962']:.2f}% |" in page
    for cell, label in [
        ("dynamic@seconds#962", "growing, static-22's seconds (primary)"),
        ("dynamic-random@seconds#962", "random-order control, static-22's seconds"),
    ]:
        behind = f"{acc[cell] - acc['static@epochs#962']:+.2f}".replace("-", "−")
        assert f"| {label} | {acc[cell]:.2f}% | {behind}" in page, cell
    # the join takes 962-d's reference and seconds cells, the first session's half pair, and
    # lists the superseded readings (962-e's FLOPs pair: the next test)
    joined = counted_cells()
    for cell in later.index:
        assert joined.loc[cell, "run_id"] == later.loc[cell, "run_id"]
    for cell in ("static@flops:0.5#962", "dynamic@flops:0.5#962"):
        assert joined.loc[cell, "run_id"] == first.loc[cell, "run_id"]
    text = (RESNET / "airbench-compare" / "report.md").read_text()
    assert "airbench-compare-962 continued by airbench-compare-962-b (a study in a new store)" in text
    # the primary and the random-order control on all five pairs, as the page and the README's
    # first screen quote them
    line = pd.read_csv(RESNET / "airbench-compare" / "comparisons.csv").set_index("comparison")
    readme = (RESNET.parents[2] / "README.md").read_text()
    for name in ("dynamic@seconds vs static@epochs", "dynamic-random@seconds vs static@epochs"):
        assert line.loc[name].n == 5 and interval(line.loc[name].to_dict()) in page, name
    assert interval(line.loc["dynamic@seconds vs static@epochs"].to_dict()) in readme


def test_seed_962_s_flops_pair_and_the_verdict_are_what_the_residual_page_says():
    # preregistered.md (11:59 entry of 2026-12-03): 962-d's store lost with its boot, a further
    # continuation trained static-22 a fifth time and the growing network at its FLOPs, that cell
    # set against that static-22 alone; 962 whole, the join is the preregistered verdict
    later = pd.read_csv(RESNET / "airbench-compare-962-e" / "cells.csv").set_index("cell")
    assert set(later.index) == {"static@epochs#962", "dynamic@flops:1#962"}
    assert set(later["boot"]) == {"ed62e98c-3f52-4ebe-8739-5e0cc9013dfe"}
    study = json.loads((RESNET / "airbench-compare-962-e" / "study.json").read_text())
    assert not study["cells_missing"]
    page = (RESNET / "README.md").read_text().replace("**", "")
    acc = 100 * later["acc"]
    own = f"| static, 22 epochs (962-e: its FLOPs cell's reference alone) | {acc['static@epochs#962']:.2f}% |"
    grown = f"{acc['dynamic@flops:1#962'] - acc['static@epochs#962']:+.2f}".replace("-", "−")
    assert (
        own in page and f"| growing, static-22's FLOPs | {acc['dynamic@flops:1#962']:.2f}% | {grown}" in page
    )
    rows = pd.read_csv(RESNET / "airbench-compare" / "cells.csv", keep_default_na=False)
    kept = rows[rows["reference_of"] != ""]
    assert kept[["cell", "run_id", "reference_of"]].values.tolist() == [
        ["static@epochs#962", later.loc["static@epochs#962", "run_id"], "dynamic@flops:1#962"]
    ]
    cells = counted_cells()
    d = pd.read_csv(RESNET / "airbench-compare-962-d" / "cells.csv").set_index("cell")
    assert cells.loc["dynamic@flops:1#962", "run_id"] == later.loc["dynamic@flops:1#962", "run_id"]
    assert cells.loc["static@epochs#962", "run_id"] == d.loc["static@epochs#962", "run_id"]
    # every preregistered line on five pairs, as the page and the README's first screen give them
    table = pd.read_csv(RESNET / "airbench-compare" / "comparisons.csv").set_index("comparison")
    readme = (RESNET.parents[2] / "README.md").read_text()
    assert set(table["n"]) == {5} and set(table["label"]) == {"confirmatory"}
    for name, verdict in [
        ("dynamic@seconds vs static@epochs", "no difference shown"),
        ("dynamic@flops:0.5 vs static@flops:0.5", "no difference shown"),
        ("dynamic@flops:1 vs static@epochs", "static ahead"),
        ("dynamic-random@seconds vs static@epochs", "no difference shown"),
    ]:
        line = table.loc[name]
        assert (
            line.verdict == verdict
            and interval(line.to_dict()) in page
            and interval(line.to_dict()) in readme
        )
        assert f"Holm p {line.p_holm:.3f}" in page, name
    ahead = sum(table["ahead"])
    assert ahead == 1 and "behind static in 19 of the 20 pairs" in readme


def test_the_max_head_screen_at_22_epochs_is_what_the_residual_page_says():
    # docs/results/preregistered.md (334296f): validation at epoch 22 on tuning seeds 1000 and
    # 1001; the max head is kept if it is ahead of short-convs on both
    def val(study: str) -> float:
        folder = RESNET / study
        (cell,) = pd.read_csv(folder / "cells.csv").to_dict("records")
        assert json.loads((folder / "study.json").read_text())["metric"] == "val/acc"  # no test split
        assert cell["code"] == "334296fa1718" and cell["epochs"] == 22
        return 100 * cell["val_acc"]

    def points(diff: float) -> str:
        return f"{diff:+.2f}".replace("-", "−")

    maxhead = {seed: val(f"screen90-maxhead-{seed}") for seed in (1000, 1001)}
    short_convs = {1000: 89.80, 1001: val("screen90-airbench-1001")}  # 1000's read 2026-12-02
    page = (RESNET / "README.md").read_text()
    for seed in (1000, 1001):
        shown = f"| {seed} | {short_convs[seed]:.2f}%"
        assert (
            shown in page
            and f"| {maxhead[seed]:.2f}% | {points(maxhead[seed] - short_convs[seed])} |" in page
        )
    assert all(maxhead[seed] > short_convs[seed] for seed in maxhead)  # the rule: kept
    assert "**The preregistered rule keeps the max head**" in page
