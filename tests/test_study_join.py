"""Joining studies of one grid (pipeline/study/join.py): the stored folders of three real
studies, the five pairs of seeds 948-952 that trained a session apart, give the comparison the
residual page reports; studies that are not one comparison are refused with one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pipeline.study import folder, join

RESNET = Path(__file__).resolve().parents[1] / "docs" / "results" / "resnet"
PAIRS = [RESNET / f for f in ("short-seconds-948-949", "short-seconds-950-951", "short-seconds-952")]


def run_join(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.study.join", *map(str, args)], capture_output=True, text=True
    )


def test_the_three_sessions_studies_joined_give_the_five_pairs_verdict(tmp_path):
    table, doc = join.join(PAIRS, tmp_path / "joined", (948, 949, 950, 951, 952))
    (line,) = table.to_dict("records")
    assert line["n"] == 5 and line["ahead"] == 2 and line["label"] == "confirmatory"
    shown = f"{line['diff_points']:+.2f} ({line['ci_low_points']:+.2f} to {line['ci_high_points']:+.2f})"
    assert shown.replace("-", "−") == "−0.23 (−0.60 to +0.13)"  # as docs/results/resnet/README.md says
    assert "partial" not in doc
    written = tmp_path / "joined"
    assert {p.name for p in written.iterdir()} == {
        "cells.csv", "comparisons.csv", "frontier.csv", "frontier.png", "report.md", "study.json",
    }  # fmt: skip
    assert len(pd.read_csv(written / "cells.csv")) == 10
    text = (written / "report.md").read_text()
    assert (
        "Joined from 3 studies of one grid: short-seconds-cpu-948-949 (seeds 948,949, confirmatory)" in text
    )
    # tta came into the study step between the sessions: named, not refused
    assert "Option tta recorded by only some of the studies" in text and "short-seconds-cpu-952: none" in text
    assert json.loads((written / "study.json").read_text())["seeds"] == "948,949,950,951,952"
    # these studies' tables were written before cells recorded their code: said, not guessed
    assert f"Code the cells trained with: {folder.CODE_NOT_IN_TABLE} (10 cells)." in text


def _with_code(tmp_path: Path, source: Path, version: str) -> Path:
    folder = tmp_path / source.name
    shutil.copytree(source, folder)
    cells = pd.read_csv(folder / "cells.csv")
    cells["code"] = version
    cells.to_csv(folder / "cells.csv", index=False)
    return folder


def test_a_join_names_every_code_version_its_cells_trained_with(tmp_path):
    # one study's version is digits alone (a short commit can be): read back as written, not as a number
    folders = [_with_code(tmp_path, PAIRS[0], "0123456789ab"), _with_code(tmp_path, PAIRS[1], "000123456789")]
    _, doc = join.join(folders, tmp_path / "joined")
    assert doc["code_versions"] == {"0123456789ab": 4, "000123456789": 4}
    text = (tmp_path / "joined" / "report.md").read_text()
    assert "Code the cells trained with: 0123456789ab (4 cells), 000123456789 (4 cells): a change" in text
    # one table with the column, one written before it: said, for the cells it is missing from
    _, doc = join.join([folders[0], PAIRS[1]], tmp_path / "mixed")
    assert doc["code_versions"] == {"0123456789ab": 4, folder.CODE_NOT_IN_TABLE: 4}
    join.join(folders[:1], tmp_path / "alone")
    alone = (tmp_path / "alone" / "report.md").read_text()
    assert "Code the cells trained with: 0123456789ab (4 cells)." in alone


def test_fewer_studies_than_preregistered_seeds_make_a_report_that_says_it_is_partial(tmp_path):
    out = tmp_path / "joined"
    done = run_join(*PAIRS[:2], "--seeds", "948-952", "--out", out)
    assert done.returncode == 0, done.stderr
    assert "partial: 4 of the 5 preregistered seeds (not yet: 952)" in done.stdout
    text = (out / "report.md").read_text()
    assert "**Partial**: 4 of the 5 preregistered seeds (not yet: 952): a partial view" in text
    assert text.startswith("# Study") and text.splitlines()[0].endswith(": exploratory")  # not the verdict
    assert "| dynamic@seconds vs static@epochs | 4 |" in text


def test_a_partial_join_names_the_seeds_that_have_begun_but_lack_cells(tmp_path):
    # 950-951's study as it would stand with its growing cell of 951 still queued in the store
    folder = tmp_path / "short-seconds-950-951"
    shutil.copytree(PAIRS[1], folder)
    cells = pd.read_csv(folder / "cells.csv")
    cells[cells["cell"] != "dynamic@seconds#951"].to_csv(folder / "cells.csv", index=False)
    doc = json.loads((folder / "study.json").read_text())
    doc |= {"cells_finished": 3, "cells_missing": ["dynamic@seconds#951"]}
    (folder / "study.json").write_text(json.dumps(doc))
    out = tmp_path / "joined"
    done = run_join(PAIRS[0], folder, "--seeds", "948-952", "--out", out)
    assert done.returncode == 0, done.stderr
    text = (out / "report.md").read_text()
    assert "**Partial**: 4 of the 5 preregistered seeds (not yet: 952; cells missing: 951): a partial" in text
    assert "| dynamic@seconds vs static@epochs | 3 |" in text  # 951 pairs with nothing yet
    # every seed begun, one of them not whole: still partial, not the preregistered verdict
    done = run_join(PAIRS[0], folder, PAIRS[2], "--seeds", "948-952", "--out", out)
    assert done.returncode == 0, done.stderr
    text = (out / "report.md").read_text()
    assert "**Partial**: 5 of the 5 preregistered seeds (cells missing: 951): a partial view" in text
    assert text.splitlines()[0].endswith(": exploratory")
    assert "| dynamic@seconds vs static@epochs | 4 |" in text


def test_a_join_replaces_an_earlier_joins_report_whole_and_nothing_else(tmp_path):
    out = tmp_path / "joined"
    join.join(PAIRS[2:], out)
    (out / "stale.txt").write_text("from the earlier join")
    join.join(PAIRS, out)
    assert not (out / "stale.txt").exists() and len(pd.read_csv(out / "cells.csv")) == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joined"]  # no staging or old copy left
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("not a report")
    for out, says in [
        (mine, "exists and is not an earlier join's report"),
        (RESNET, "holds the study folder"),
    ]:
        done = run_join(PAIRS[2], "--out", out)
        assert done.returncode == 2 and says in done.stderr, done.stderr
    assert (mine / "notes.txt").read_text() == "not a report"


def _edited(tmp_path: Path, source: Path, name: str, edit) -> Path:
    folder = tmp_path / name
    shutil.copytree(source, folder)
    prereg = json.loads((folder / "preregistration.json").read_text())
    edit(prereg)
    (folder / "preregistration.json").write_text(json.dumps(prereg))
    return folder


def _emptied(tmp_path: Path) -> Path:
    folder = tmp_path / "emptied"
    shutil.copytree(PAIRS[2], folder)
    (folder / "cells.csv").write_text("")
    return folder


def _another_epochs(prereg: dict) -> None:
    prereg["grid"]["epochs"] = "12"


def _no_seed_952(prereg: dict) -> None:
    prereg["seeds"] = [953]


def _tta(value: str):
    def edit(prereg: dict) -> None:
        prereg["grid"]["tta"] = value

    return edit


@pytest.mark.parametrize(
    ("folders", "says"),
    [
        (lambda t: [PAIRS[0], PAIRS[0]], "seed 948 is in both"),
        (lambda t: [PAIRS[0], RESNET / "airbench-static"], "only studies of one comparison can be joined"),
        (
            lambda t: [PAIRS[0], _edited(t, PAIRS[2], "other-epochs", _another_epochs)],
            "trained with epochs '12'",
        ),
        (
            lambda t: [_edited(t, PAIRS[2], "stray", _no_seed_952)],
            "has seeds [952] its preregistration does not name",
        ),
        (
            # recorded by an earlier step, which trained without test-time views: not 'flip'
            lambda t: [PAIRS[0], _edited(t, PAIRS[2], "flip", _tta("flip"))],
            "short-seconds-948-949 did not record",
        ),
        (
            lambda t: [
                PAIRS[0],
                _edited(t, PAIRS[1], "none", _tta("none")),
                _edited(t, PAIRS[2], "f", _tta("flip")),
            ],
            "trained with tta 'flip'",
        ),
        (lambda t: [RESNET], "has no cells.csv"),
        (lambda t: [_emptied(t)], "cells.csv is not a study's table of cells"),
        (lambda t: [], "name at least one study folder"),
    ],
    ids=[
        "a-seed-twice",
        "other-comparisons",
        "other-grid",
        "stray-seed",
        "not-the-default",
        "three-ways",
        "not-a-study",
        "empty-cells",
        "none",
    ],
)
def test_studies_that_are_not_one_comparison_are_refused_in_one_line(tmp_path, folders, says):
    done = run_join(*folders(tmp_path), "--out", tmp_path / "joined")
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "joined").exists()


def test_preregistered_seeds_that_lack_a_studys_seed_are_refused(tmp_path):
    done = run_join(PAIRS[2], "--seeds", "948-951", "--out", tmp_path / "joined")
    assert done.returncode == 2 and "lacks the studies' seeds [952]" in done.stderr
