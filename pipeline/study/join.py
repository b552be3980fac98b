"""Several studies read as one: studies that trained the same grid on different seeds (a
preregistered comparison spread over sessions or machines, a study each) joined into one
report by the study's own report functions, with the family and Holm's correction of the grid.

    python -m pipeline.study.join docs/results/resnet/airbench-compare-958 \\
        docs/results/resnet/airbench-compare-959 --seeds 958-962 --out joined/

Each folder is what a study logs on its parent run (``study/``: ``cells.csv``,
``preregistration.json`` and ``study.json``; ``mlflow artifacts download -r <parent run> -a
study`` brings it). The studies must have preregistered the same comparisons on the same metric
and grid, seeds apart, and no seed may be in two of them. ``--seeds``, the seeds the joined
comparison was preregistered on, makes a report on fewer of them say that it is a partial view
(and labels it exploratory). A grid option that only the newer studies recorded (one added to
the study step between them) is accepted at the default the older ones trained with, and named
in the report; at any other value the studies are refused.

A study whose store was lost before all its cells trained is finished by a continuation: a study
of its own, in a new store, on the same seeds and grid but for fewer budgets or arms, that trains
the missing cells again with their reference (``--continuation FOLDER``, repeated for a
continuation that was itself cut short, in the order they trained). Its cells replace the
study's of the same name (both readings of a cell trained twice are listed); the study's other
cells stay. Where one that stays was given the seconds of the study's reference run, that run
stays the seed's reference, and the continuation's is kept as the reference of the
continuation's own cells alone (its row names them in ``reference_of``), so that every cell is
set against the run it was matched to.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import click
import pandas as pd

from pipeline.cli import ConfigError
from pipeline.study import report
from pipeline.study.config import added_since
from pipeline.study.folder import StudyFolder, grid_cells
from pipeline.study.grid import Cell, comparisons, control_comparisons, parse_arms, parse_budget, parse_seeds
from pipeline.study.joined import OWN_REFERENCE, counted, own_references
from pipeline.tracking.errors import one_line, user_errors

# The grid's entries that may differ between the studies of one comparison: their seeds.
PER_STUDY = ("seeds",)


def check_continues(first: StudyFolder, later: StudyFolder) -> dict[str, dict[str, str]]:
    """Refuse ``later`` as a continuation of ``first`` unless it is the same comparison on the
    same seeds and grid, fewer budgets or arms apart; return the options only one of them
    recorded (``check_grids``)."""
    said = f"--continuation {later.path} of {first.path}"
    for key in ("metric", "correction", "alpha"):
        if later.prereg[key] != first.prereg[key]:
            raise ConfigError(
                f"{said}: it preregistered {key} {later.prereg[key]!r}, not {first.prereg[key]!r}: "
                "a continuation preregisters the study's comparison"
            )
    for key in ("phase", "epochs", "static_spec"):
        if later.doc[key] != first.doc[key]:
            raise ConfigError(
                f"{said}: its {key} is {later.doc[key]!r}, not {first.doc[key]!r}: give it the "
                "study's options"
            )
    theirs = first.prereg["grid"]["budgets"]
    extra = [b for b in later.prereg["grid"]["budgets"].split(",") if parse_budget(b) not in _budgets(theirs)]
    if extra:
        raise ConfigError(
            f"{said}: its budgets {','.join(extra)} are not in the study it continues ({theirs}): "
            "a continuation trains some of the study's budgets"
        )
    arms = {arm.name: arm for arm in parse_arms(first.prereg["grid"]["arms"])}
    other = [a.name for a in parse_arms(later.prereg["grid"]["arms"]) if arms.get(a.name) != a]
    if other:
        raise ConfigError(
            f"{said}: its arms {','.join(other)} are not the study's ({first.prereg['grid']['arms']}): "
            "a continuation trains some of the study's arms, each at the budgets the study gave it"
        )
    stray = [c for c in later.prereg["comparisons"] if c not in first.prereg["comparisons"]]
    if stray:
        raise ConfigError(f"{said}: it preregistered {stray}, which the study it continues did not")
    # its grid with the first's arms and budgets is the first's: every other option checked as a join does
    grid = {**later.prereg["grid"], "arms": first.prereg["grid"]["arms"], "budgets": theirs}
    as_first = StudyFolder(later.path, later.rows, {**later.prereg, "grid": grid}, later.doc)
    return check_grids([first, as_first])


def _budgets(text: str) -> set:
    return {parse_budget(b) for b in text.split(",")}


def continued(first: StudyFolder, later: StudyFolder) -> StudyFolder:
    """``first`` with ``later``'s cells in place of its own of the same name, and what was
    replaced, with both readings, added to its summary's ``continued`` (a list: a continuation
    may itself be continued). A reference of ``first`` that a cell it keeps was given the seconds
    of stays, and ``later``'s run of it is kept as the reference of ``later``'s own cells."""
    only_some = check_continues(first, later)
    cells = counted(first.rows)  # a reference kept for an earlier continuation's cells stays
    trained = {c.key for c in grid_cells(later.prereg)}
    held = {
        cell.reference.key
        for cell in map(Cell.from_key, cells["cell"])
        if cell.needs_reference_run and cell.key not in trained
    }
    retrained = trained - held
    replaced = cells[cells["cell"].isin(retrained)]
    now = later.rows.set_index("cell")
    own = later.rows[later.rows["cell"].isin(held)]
    own = own.assign(**{OWN_REFERENCE: [";".join(_set_against(later, key)) for key in own["cell"]]})
    rows = pd.concat(
        [
            cells[~cells["cell"].isin(retrained)],
            own_references(first.rows),
            later.rows[~later.rows["cell"].isin(held)],
            own,
        ],
        ignore_index=True,
    )
    missing = [c for c in first.doc.get("cells_missing", []) if c not in retrained]
    labels = {first.doc["label"], later.doc["label"]}
    counted_now = cells.set_index("cell")
    doc = {
        **first.doc,
        "label": "confirmatory" if labels == {"confirmatory"} else "exploratory",
        "cells_missing": missing + list(later.doc.get("cells_missing", [])),
        "cells_counted_twice": [
            *first.doc.get("cells_counted_twice", []),
            *later.doc.get("cells_counted_twice", []),
        ],
        "continued": [
            *first.doc.get("continued", []),
            {
                "by": later.prereg["study"],
                "cells": sorted(retrained),
                "superseded": [
                    {
                        "cell": r["cell"],
                        "acc": r["acc"],
                        "run_id": r.get("run_id", ""),
                        "now_acc": now["acc"].get(r["cell"], float("nan")),
                        "now_run_id": now["run_id"].get(r["cell"], "") if "run_id" in now else "",
                    }
                    for r in replaced.to_dict("records")
                ],
                "references_kept": [
                    {
                        "cell": r["cell"],
                        "acc": r["acc"],
                        "run_id": r.get("run_id", ""),
                        "of": r[OWN_REFERENCE].split(";") if r[OWN_REFERENCE] else [],
                        "counted_acc": counted_now["acc"].get(r["cell"], float("nan")),
                        "counted_run_id": counted_now["run_id"].get(r["cell"], "")
                        if "run_id" in counted_now
                        else "",
                    }
                    for r in own.to_dict("records")
                ],
                "scoring": (later.doc.get("scoring") or {}).get("run", "not recorded"),
                "recorded_by_one": only_some,
            },
        ],
    }
    return StudyFolder(first.path, rows, first.prereg, doc)


def _set_against(study: StudyFolder, reference: str) -> list[str]:
    """The cells of ``study`` that its comparisons set against its run of ``reference``."""
    grid = study.prereg["grid"]
    budgets = tuple(parse_budget(b) for b in grid["budgets"].split(","))
    against = [
        f"{c.arm}@{c.budget.label}"
        for c in comparisons(parse_arms(grid["arms"]), budgets)
        if f"{c.against_arm}@{c.against.label}" == reference.partition("#")[0]
    ]
    seed = Cell.from_key(reference).seed
    mine = (Cell.from_key(k) for k in study.rows["cell"])
    return sorted(c.key for c in mine if f"{c.arm}@{c.budget.label}" in against and c.seed == seed)


def with_continuations(studies: list[StudyFolder], later: list[StudyFolder]) -> list[StudyFolder]:
    """The studies, each continued by the continuations on its seeds in the order given (the
    second finishing what the first left, say)."""
    out = list(studies)
    for cont in later:
        matches = [i for i, s in enumerate(out) if set(s.seeds) == set(cont.seeds)]
        if not matches:
            raise ConfigError(
                f"--continuation {cont.path}: no study named is on exactly its seeds "
                f"{list(cont.seeds)}: pass the study it continues too"
            )
        if len(matches) > 1:
            raise ConfigError(
                f"--continuation {cont.path}: its seeds {list(cont.seeds)} are in more than one study "
                "named: a seed counts once (pass each study once)"
            )
        out[matches[0]] = continued(out[matches[0]], cont)
    return out


def check_joinable(studies: list[StudyFolder]) -> dict[str, dict[str, str]]:
    """Refuse studies that cannot be read as one; return the grid entries only some of them
    recorded: entry -> {study: value}."""
    first = studies[0]
    for other in studies[1:]:
        for key in ("metric", "comparisons", "correction", "alpha"):
            if other.prereg[key] != first.prereg[key]:
                raise ConfigError(
                    f"{other.path} preregistered {key} {other.prereg[key]!r}, {first.path} "
                    f"{first.prereg[key]!r}: only studies of one comparison can be joined"
                )
    owner: dict[int, Path] = {}
    for study in studies:
        for seed in study.seeds:
            if seed in owner:
                raise ConfigError(
                    f"seed {seed} is in both {owner[seed]} and {study.path}: a seed counts once "
                    "(pass each study once)"
                )
            owner[seed] = study.path
        stray = sorted(set(study.rows["seed"]) - set(study.seeds))
        if stray:
            raise ConfigError(f"{study.path}/cells.csv has seeds {stray} its preregistration does not name")
    return check_grids(studies)


def check_grids(studies: list[StudyFolder]) -> dict[str, dict[str, str]]:
    """Refuse studies whose grids differ, their seeds apart, in any option two of them recorded,
    or in one that only some recorded while it is not at the default that the others (recorded
    by an earlier version of the step) trained with; return those recorded by only some:
    option -> {study: value}."""
    keys = sorted(set().union(*(s.prereg["grid"] for s in studies)) - set(PER_STUDY))
    only_some = {}
    for key in keys:
        recorded = {s.path: s.prereg["grid"][key] for s in studies if key in s.prereg["grid"]}
        (path, value), *others = recorded.items()
        for other, theirs in others:
            if theirs != value:
                raise ConfigError(
                    f"{other} trained with {key} {theirs!r}, {path} with {value!r}: only studies of one "
                    "grid can be joined"
                )
        if len(recorded) < len(studies):
            if key not in added_since({key: value}, {}):
                lacking = next(s.path for s in studies if key not in s.prereg["grid"])
                raise ConfigError(
                    f"{path} trained with {key} {value!r}, which {lacking} did not record (an earlier "
                    "version of the study step, which trained with the option's default): only studies "
                    "of one grid can be joined"
                )
            only_some[key] = {s.prereg["study"]: s.prereg["grid"].get(key, "not recorded") for s in studies}
    return only_some


def all_seeds(studies: list[StudyFolder]) -> tuple[int, ...]:
    return tuple(sorted(s for study in studies for s in study.seeds))


def scored_by(studies: list[StudyFolder]) -> dict[str, str]:
    """Each study's difficulty-scoring run, and each continuation's (scored again in its store)."""
    out = {}
    for s in studies:
        out[s.prereg["study"]] = (s.doc.get("scoring") or {}).get("run", "not recorded")
        for cont in s.doc.get("continued", []):
            out[cont["by"]] = cont["scoring"]
    return out


def joined_doc(studies: list[StudyFolder], preregistered: tuple[int, ...]) -> dict:
    """The joined report's summary: what ``report.write`` needs, the studies it reads, and
    whether it covers every preregistered seed."""
    seeds = all_seeds(studies)
    names = [s.prereg["study"] for s in studies]
    labels = {s.doc["label"] for s in studies}
    first = studies[0].doc
    doc = {
        "study": f"{' + '.join(names)} (joined)",
        "title": f"{len(names)} {'study' if len(names) == 1 else 'studies'} joined",
        "phase": first["phase"],
        "label": "confirmatory" if labels == {"confirmatory"} else "exploratory",
        "metric": studies[0].prereg["metric"],
        "seeds": ",".join(str(s) for s in seeds),
        "epochs": first["epochs"],
        "static_spec": first["static_spec"],
        "studies": [
            {"study": s.prereg["study"], "seeds": list(s.seeds), "label": s.doc["label"]}
            | ({"continued": s.doc["continued"]} if "continued" in s.doc else {})
            for s in studies
        ],
        "scored_by": scored_by(studies),
        "cells_finished": sum(len(counted(s.rows)) for s in studies),
        "cells_missing": [c for s in studies for c in s.doc.get("cells_missing", [])],
    }
    if preregistered:
        unknown = sorted(set(seeds) - set(preregistered))
        if unknown:
            raise ConfigError(
                f"--seeds {','.join(map(str, preregistered))} lacks the studies' seeds {unknown}"
            )
        missing = [s for s in preregistered if s not in seeds]
        # a seed that has begun but lacks cells (queued for a later session) leaves the view as
        # partial as one not begun: its pairs are not all counted yet
        unfinished = sorted({Cell.from_key(c).seed for c in doc["cells_missing"]})
        doc["preregistered_seeds"] = ",".join(str(s) for s in preregistered)
        if missing or unfinished:
            why = [f"not yet: {','.join(map(str, missing))}"] if missing else []
            why += [f"cells missing: {','.join(map(str, unfinished))}"] if unfinished else []
            doc["partial"] = (
                f"{len(seeds)} of the {len(preregistered)} preregistered seeds ({'; '.join(why)}): "
                "a partial view, not the preregistered verdict"
            )
            whole = f", {len(unfinished)} of them not whole" if unfinished else ""
            doc["title"] += f" (partial: {len(seeds)} of {len(preregistered)} preregistered seeds{whole})"
            doc["label"] = "exploratory"  # what the preregistration reads is all of them together
    else:
        doc["preregistered_seeds"] = "not given (--seeds): the studies' own seeds are taken as all of them"
    return doc


def join(
    folders: list[Path],
    out: Path,
    preregistered: tuple[int, ...] = (),
    continuations: tuple[Path, ...] = (),
) -> tuple[pd.DataFrame, dict]:
    """The joined report in ``out`` (report.write's files); returns its comparison table and
    summary (``study.json``). ``continuations`` finish the studies on their seeds (see the
    module's docstring). The files are written beside ``out`` and moved there whole, so a failed
    join leaves no report that looks finished."""
    if not folders:
        raise ConfigError("name at least one study folder to join")
    later = [StudyFolder.read(Path(f)) for f in continuations]
    studies = with_continuations([StudyFolder.read(Path(f)) for f in folders], later)
    only_some = check_joinable(studies)
    doc = joined_doc(studies, preregistered)
    if only_some:
        doc["recorded_by_some"] = only_some
    grid = studies[0].prereg["grid"]
    arms = parse_arms(grid["arms"])
    budgets = tuple(parse_budget(b) for b in grid["budgets"].split(","))
    family, controls = comparisons(arms, budgets), control_comparisons(arms, budgets)
    if [c.name for c in family] != studies[0].prereg["comparisons"]:
        raise ConfigError(
            f"{studies[0].path}: its grid makes the comparisons {[c.name for c in family]}, its "
            f"preregistration names {studies[0].prereg['comparisons']}: it was written by another "
            "version of the study step"
        )
    rows = pd.concat([s.rows for s in studies], ignore_index=True)
    seeds = preregistered or all_seeds(studies)
    out = check_out(out, studies + later)
    staging, old = out.with_name(out.name + ".writing"), out.with_name(out.name + ".old")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        table = report.write(staging, rows, family, controls, doc, seeds)
        if out.exists():  # an earlier join's report, replaced whole
            out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return table, doc


def _is_join(summary: Path) -> bool:
    try:
        doc = json.loads(summary.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(doc, dict) and "studies" in doc


def check_out(out: Path, studies: list[StudyFolder]) -> Path:
    """``--out``, resolved: a new folder, or an earlier join's report (its study.json names the
    studies it joined), never a study's own folder or one that holds a study."""
    out = out.resolve()
    if out == out.parent:
        raise ConfigError(f"--out {out}: name a folder for the joined report, not the root")
    for study in studies:
        if out == study.path.resolve() or out in study.path.resolve().parents:
            raise ConfigError(f"--out {out} holds the study folder {study.path}: write the join elsewhere")
    if out.exists() and not _is_join(out / "study.json"):
        raise ConfigError(f"--out {out} exists and is not an earlier join's report: name a new folder")
    return out


@click.command(name="join", help=__doc__.split("\n\n")[0])
@click.argument("folders", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, help="folder the joined report is written to"
)
@click.option(
    "--seeds", default="", help="the seeds the joined comparison was preregistered on, e.g. 958-962"
)
@click.option(
    "--continuation",
    "continuations",
    multiple=True,
    type=click.Path(path_type=Path),
    help="a study that trained again, in a new store, some cells of the study on its seeds (whose "
    "store was lost) with their reference: its cells replace that study's of the same name (a "
    "reference whose seconds a kept cell was given stays, the continuation's set against its own)",
)
def main(folders: tuple[Path, ...], out: Path, seeds: str, continuations: tuple[Path, ...]) -> None:
    try:
        table, doc = join(list(folders), out, parse_seeds(seeds) if seeds else (), continuations)
    except user_errors() as err:
        click.echo(f"error: {one_line(err)}", err=True)
        sys.exit(2)
    click.echo(f"joined report: {out / 'report.md'}")
    if doc.get("partial"):
        click.echo(f"partial: {doc['partial']}")
    if len(table):
        click.echo(report.console_table(table))


if __name__ == "__main__":
    main()
