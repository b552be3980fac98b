"""A study finished by a continuation (pipeline/study/join.py, ``--continuation``): seed 960's
first study, whose store was lost with three cells queued, joined with a study that trained those
cells again with their reference in a new store. The continuation here is built from seed 959's
real cells relabelled as 960's (the real one is read by tests/test_resnet_results.py), so that
which reading counts can be told apart."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pipeline.study import join
from pipeline.study.folder import TEXT_COLUMNS, grid_cells

RESNET = Path(__file__).resolve().parents[1] / "docs" / "results" / "resnet"
FIRST = RESNET / "airbench-compare-960"  # three cells finished, three missing
SEED_959 = RESNET / "airbench-compare-959"
ARMS = "static,dynamic,dynamic-random@seconds"  # the preregistered grid's
SECONDS_AND_FLOPS = ("static@epochs", "dynamic@flops:1", "dynamic@seconds", "dynamic-random@seconds")


def continuation(
    tmp_path: Path,
    name: str = "c",
    budgets: str = "seconds,flops:1",
    seed: int = 960,
    unfinished: str = "",
    metric: str = "test/acc",
    arms: str = ARMS,
    **grid,
) -> Path:
    """A continuation of ``FIRST`` at ``budgets`` (of ``arms``): seed 959's cells at those budgets
    as ``seed``'s, trained on another boot, with the preregistration a study with those budgets
    writes; ``unfinished``, a cell it left missing."""
    folder = tmp_path / name
    folder.mkdir()
    cells = pd.read_csv(SEED_959 / "cells.csv", dtype=TEXT_COLUMNS)
    owned = {
        c.key.rpartition("#")[0]
        for c in grid_cells({"grid": {"arms": arms, "budgets": budgets}, "seeds": [959]})
    }
    cells = cells[cells["cell"].str.rpartition("#")[0].isin(owned)].copy()
    cells["seed"] = seed
    cells["cell"] = cells["cell"].str.replace("#959", f"#{seed}")
    cells["boot"] = "another-boot"  # a new machine: its seconds cells must pair with its own reference
    cells["run_id"] = cells["run_id"] + f"-{name}"  # each continuation's runs its own
    cells = cells[cells["cell"] != unfinished]
    cells.to_csv(folder / "cells.csv", index=False)
    prereg = json.loads((FIRST / "preregistration.json").read_text())
    family = [
        c.name
        for c in join.comparisons(join.parse_arms(arms), tuple(map(join.parse_budget, budgets.split(","))))
    ]
    prereg.update(study=f"airbench-compare-960-{name}", seeds=[seed], comparisons=family, metric=metric)
    prereg["grid"].update(arms=arms, budgets=budgets, seeds=str(seed), **grid)
    (folder / "preregistration.json").write_text(json.dumps(prereg))
    doc = json.loads((SEED_959 / "study.json").read_text())
    doc.update(
        study=prereg["study"],
        seeds=str(seed),
        cells_missing=[unfinished] if unfinished else [],
        scoring={"run": "rescored", "seconds": 1.0},
    )
    (folder / "study.json").write_text(json.dumps(doc))
    return folder


def test_a_continuation_replaces_the_cells_it_trained_again_and_keeps_the_rest(tmp_path):
    later = continuation(tmp_path)
    table, doc = join.join(
        [RESNET / "airbench-compare-958", SEED_959, FIRST],
        tmp_path / "joined",
        (958, 959, 960, 961, 962),
        [later],
    )
    rows = pd.read_csv(tmp_path / "joined" / "cells.csv")
    mine = rows[rows["seed"] == 960].set_index("cell")
    assert len(rows) == 18 and len(mine) == 6
    first = pd.read_csv(FIRST / "cells.csv").set_index("cell")
    relabelled = pd.read_csv(later / "cells.csv").set_index("cell")
    # the reference and the cells matched to it are the continuation's; the half-FLOPs pair the first's
    for cell in (f"{c}#960" for c in SECONDS_AND_FLOPS):
        assert mine.loc[cell, "run_id"] == relabelled.loc[cell, "run_id"]
    for cell in ("static@flops:0.5#960", "dynamic@flops:0.5#960"):
        assert mine.loc[cell, "run_id"] == first.loc[cell, "run_id"]
    assert doc["cells_missing"] == [] and doc["cells_finished"] == 18
    ((cont,),) = [s["continued"] for s in doc["studies"] if s["study"] == "airbench-compare-960"]
    superseded = cont["superseded"]
    assert [(s["cell"], s["run_id"]) for s in superseded] == [
        ("static@epochs#960", first.loc["static@epochs#960", "run_id"])
    ]
    assert doc["scored_by"]["airbench-compare-960-c"] == "rescored"
    text = (tmp_path / "joined" / "report.md").read_text()
    assert (
        "airbench-compare-960 continued by airbench-compare-960-c (a study in a new store): its cells "
        "dynamic-random@seconds#960, dynamic@flops:1#960, dynamic@seconds#960, static@epochs#960 are the "
        "continuation's; superseded, not counted: static@epochs#960 89.45% "
        "(run e86348d0fa3e4ec3916692189a3e9cc9), now 89.42% (run "
    ) in text
    # every preregistered line now has three pairs, 960's seconds pair on the continuation's one boot
    assert set(table["n"]) == {3} and doc["seconds_on_another_machine"] == []
    assert mine.loc["dynamic@seconds#960", "boot"] == mine.loc["static@epochs#960", "boot"] == "another-boot"
    assert mine.loc["dynamic@flops:0.5#960", "boot"] != "another-boot"  # FLOPs-matched: any boot


def test_a_cell_the_continuation_left_missing_is_missing_and_its_options_are_named(tmp_path):
    # whiten_bias_epochs came into the study step after the first study: accepted at its default
    later = continuation(tmp_path, unfinished="dynamic-random@seconds#960", whiten_bias_epochs="0")
    table, doc = join.join([FIRST], tmp_path / "joined", (), [later])
    assert doc["cells_missing"] == ["dynamic-random@seconds#960"] and doc["cells_finished"] == 5
    (line,) = table[table["comparison"] == "dynamic-random@seconds vs static@epochs"].to_dict("records")
    assert line["n"] == 0
    text = (tmp_path / "joined" / "report.md").read_text()
    assert (
        "Option whiten_bias_epochs recorded by only one of the two (airbench-compare-960: not recorded, "
        "airbench-compare-960-c: 0)."
    ) in text
    assert "Missing, reported as missing and not replaced: 1 cell(s): dynamic-random@seconds#960." in text


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (
            lambda t: [continuation(t, budgets="seconds,flops:0.25")],
            "its budgets flops:0.25 are not in the study",
        ),
        (lambda t: [continuation(t, epochs="12")], "trained with epochs '12'"),
        (lambda t: [continuation(t, whiten_bias_epochs="3")], "trained with whiten_bias_epochs '3'"),
        (lambda t: [continuation(t, metric="val/acc")], "it preregistered metric 'val/acc', not 'test/acc'"),
        (lambda t: [continuation(t, seed=961)], "no study named is on exactly its seeds [961]"),
        # the study trained its random-order control at the seconds alone
        (
            lambda t: [continuation(t, arms="static,dynamic-random")],
            "its arms dynamic-random are not the study's",
        ),
    ],
    ids=["more-budgets", "other-grid", "newer-option-set", "other-metric", "no-such-study", "other-arms"],
)
def test_a_continuation_of_another_grid_or_study_is_refused_in_one_line(tmp_path, make, says):
    continuations = [arg for folder in make(tmp_path) for arg in ("--continuation", folder)]
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.study.join", FIRST, *continuations, "--out", tmp_path / "joined"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "joined").exists()


def test_a_continuation_of_the_reference_and_one_cell_pairs_that_cell_with_its_own_reference(tmp_path):
    # seed 959 finished but for its FLOPs cell (as 962-d did); the continuation trains the
    # reference again with it: the seconds cells keep the reference whose seconds they were given
    first = tmp_path / "first"
    shutil.copytree(SEED_959, first)
    cells = pd.read_csv(first / "cells.csv")
    cells[cells["cell"] != "dynamic@flops:1#959"].to_csv(first / "cells.csv", index=False)
    doc = json.loads((first / "study.json").read_text())
    (first / "study.json").write_text(json.dumps({**doc, "cells_missing": ["dynamic@flops:1#959"]}))
    later = continuation(tmp_path, arms="static,dynamic", budgets="flops:1", seed=959)
    mine = pd.read_csv(later / "cells.csv")
    assert sorted(mine["cell"]) == ["dynamic@flops:1#959", "static@epochs#959"]
    mine["acc"] = mine["cell"].map({"static@epochs#959": 0.80, "dynamic@flops:1#959": 0.81})
    mine.to_csv(later / "cells.csv", index=False)

    table, doc = join.join([first], tmp_path / "joined", (), [later])
    lines = table.set_index("comparison")
    assert lines.loc["dynamic@flops:1 vs static@epochs", "diff_points"] == pytest.approx(1.0)
    ours = cells.set_index("cell")["acc"]
    seconds = 100 * (ours["dynamic@seconds#959"] - ours["static@epochs#959"])
    assert lines.loc["dynamic@seconds vs static@epochs", "diff_points"] == pytest.approx(seconds)
    assert set(lines["n"]) == {1} and doc["cells_missing"] == [] and doc["cells_finished"] == 6
    assert doc["seconds_on_another_machine"] == []  # the seconds cells beside their own reference
    means = pd.read_csv(tmp_path / "joined" / "frontier.csv").set_index(["arm", "budget"])
    assert means.loc[("static", "epochs"), ["n", "acc"]].tolist() == [1, ours["static@epochs#959"]]
    assert sum(doc["health"]["static@epochs"].values()) == 1  # the counted run alone
    rows = pd.read_csv(tmp_path / "joined" / "cells.csv", keep_default_na=False)
    kept = rows[rows["reference_of"] != ""]
    assert kept[["cell", "reference_of", "acc"]].values.tolist() == [
        ["static@epochs#959", "dynamic@flops:1#959", 0.80]
    ]
    ((cont,),) = [s["continued"] for s in doc["studies"]]
    assert cont["cells"] == ["dynamic@flops:1#959"] and cont["superseded"] == []
    text = (tmp_path / "joined" / "report.md").read_text()
    assert (
        "its cells dynamic@flops:1#959 are the continuation's; superseded, not counted: none. Its "
        "static@epochs#959 80.00% (run "
    ) in text
    counted = 100 * ours["static@epochs#959"]
    said = f"is the reference of its dynamic@flops:1#959 alone; the study's, {counted:.2f}%"
    assert said in text and "stays counted (cells kept were given its seconds)." in text


def test_a_continuation_cut_short_is_finished_by_another_in_the_order_given(tmp_path):
    # the first continuation trains the reference and the FLOPs cell; its seconds cells are cut
    # off with its store, so a second trains the reference again with them
    b = continuation(tmp_path, "b", unfinished="dynamic@seconds#960")
    pd.read_csv(b / "cells.csv").query("cell != 'dynamic-random@seconds#960'").to_csv(
        b / "cells.csv", index=False
    )
    c = continuation(tmp_path, "c", budgets="seconds")
    table, doc = join.join([FIRST], tmp_path / "joined", (), [b, c])
    rows = pd.read_csv(tmp_path / "joined" / "cells.csv").set_index("cell")
    trained_by = {
        cell: run.rpartition("-")[2] if run.endswith(("-b", "-c")) else "first"
        for cell, run in rows["run_id"].items()
    }
    assert trained_by == {
        "static@flops:0.5#960": "first",
        "dynamic@flops:0.5#960": "first",
        "dynamic@flops:1#960": "b",
        "static@epochs#960": "c",
        "dynamic@seconds#960": "c",
        "dynamic-random@seconds#960": "c",
    }
    assert doc["cells_missing"] == [] and set(table["n"]) == {1}
    (study,) = doc["studies"]
    assert [(x["by"], [r["cell"] for r in x["superseded"]]) for x in study["continued"]] == [
        ("airbench-compare-960-b", ["static@epochs#960"]),
        ("airbench-compare-960-c", ["static@epochs#960"]),
    ]
    text = (tmp_path / "joined" / "report.md").read_text()
    assert "continued by airbench-compare-960-b" in text and "continued by airbench-compare-960-c" in text
    # a continuation that trains the reference again beside some of the cells matched to it:
    # the one kept (d's seconds cell) keeps d's reference, e's own cells are set against e's
    e = continuation(tmp_path, "e", budgets="flops:1")
    table, doc = join.join([FIRST], tmp_path / "again", (), [continuation(tmp_path, "d"), e])
    rows = pd.read_csv(tmp_path / "again" / "cells.csv", keep_default_na=False)
    trained_by = {
        (cell, of): run.rpartition("-")[2]
        for cell, of, run in rows[["cell", "reference_of", "run_id"]].values
    }
    assert {k: v for k, v in trained_by.items() if v in ("d", "e")} == {
        ("static@epochs#960", ""): "d",
        ("dynamic@seconds#960", ""): "d",
        ("dynamic@flops:1#960", ""): "e",
        ("dynamic-random@seconds#960", ""): "e",
        ("static@epochs#960", "dynamic-random@seconds#960;dynamic@flops:1#960"): "e",
    }
    assert doc["seconds_on_another_machine"] == [] and set(table["n"]) == {1}
