"""Several studies read as one: studies that trained the same grid on different seeds (a
preregistered comparison spread over sessions or machines, a study each) joined into one
report by the study's own report functions, with the family and Holm's correction of the grid.

    python -m pipeline.study.join docs/results/resnet/airbench-compare-958 \\
        docs/results/resnet/airbench-compare-959 --seeds 958-962 --out joined/

Each folder is what a study logs on its parent run (``study/``: ``cells.csv``,
``preregistration.json`` and ``study.json``; ``mlflow artifacts download -r <parent run> -a
study`` brings it). The studies must have preregistered the same comparisons on the same metric
and grid, seeds apart, and no seed may be in two of them. ``--seeds``, the seeds the joined
comparison was preregistered on, makes a report on fewer of them say that it is a partial view.
A grid option that only some studies recorded (one added to the study step between them) is
named in the report, not refused.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pandas as pd

from pipeline.cli import ConfigError
from pipeline.study import report
from pipeline.study.grid import comparisons, control_comparisons, parse_arms, parse_budget, parse_seeds
from pipeline.tracking.errors import one_line, user_errors

FILES = ("cells.csv", "preregistration.json", "study.json")
# The grid's entries that may differ between the studies of one comparison: their seeds.
PER_STUDY = ("seeds",)
PREREG_KEYS = ("study", "comparisons", "seeds", "metric", "correction", "alpha", "grid")
DOC_KEYS = ("phase", "label", "epochs", "static_spec")


@dataclass(frozen=True)
class StudyFolder:
    """One study's logged report: its cells' rows, its preregistration and its summary."""

    path: Path
    rows: pd.DataFrame
    prereg: dict
    doc: dict

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(self.prereg["seeds"])

    @staticmethod
    def read(path: Path) -> StudyFolder:
        missing = [f for f in FILES if not (path / f).is_file()]
        if missing:
            raise ConfigError(
                f"{path} has no {', '.join(missing)}: pass folders that a study logged on its parent "
                "run (mlflow artifacts download -r <parent run> -a study)"
            )
        try:
            prereg = json.loads((path / "preregistration.json").read_text())
            doc = json.loads((path / "study.json").read_text())
            needed = [k for k in PREREG_KEYS if k not in prereg] + [k for k in DOC_KEYS if k not in doc]
        except (json.JSONDecodeError, TypeError) as err:  # TypeError: JSON that is not an object
            raise ConfigError(
                f"{path}: its preregistration.json or study.json is not a study's: {err}"
            ) from None
        if needed:
            raise ConfigError(f"{path}: its preregistration.json or study.json lacks {', '.join(needed)}")
        return StudyFolder(path, pd.read_csv(path / "cells.csv"), prereg, doc)


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
        for key in sorted(set(first.prereg["grid"]) & set(other.prereg["grid"]) - set(PER_STUDY)):
            if other.prereg["grid"][key] != first.prereg["grid"][key]:
                raise ConfigError(
                    f"{other.path} trained with {key} {other.prereg['grid'][key]!r}, {first.path} with "
                    f"{first.prereg['grid'][key]!r}: only studies of one grid can be joined"
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
    keys = set().union(*(s.prereg["grid"] for s in studies))
    return {
        key: {s.prereg["study"]: s.prereg["grid"].get(key, "not recorded") for s in studies}
        for key in sorted(keys)
        if any(key not in s.prereg["grid"] for s in studies)
    }


def joined_doc(studies: list[StudyFolder], preregistered: tuple[int, ...]) -> dict:
    """The joined report's summary: what ``report.write`` needs, the studies it reads, and
    whether it covers every preregistered seed."""
    seeds = sorted(s for study in studies for s in study.seeds)
    names = [s.prereg["study"] for s in studies]
    labels = {s.doc["label"] for s in studies}
    first = studies[0].doc
    doc = {
        "study": f"{' + '.join(names)} (joined)",
        "title": f"{len(names)} studies joined",
        "phase": first["phase"],
        "label": "confirmatory" if labels == {"confirmatory"} else "exploratory",
        "metric": studies[0].prereg["metric"],
        "seeds": ",".join(str(s) for s in seeds),
        "epochs": first["epochs"],
        "static_spec": first["static_spec"],
        "studies": [
            {"study": s.prereg["study"], "seeds": list(s.seeds), "label": s.doc["label"]} for s in studies
        ],
        "cells_finished": sum(len(s.rows) for s in studies),
        "cells_missing": [c for s in studies for c in s.doc.get("cells_missing", [])],
    }
    if preregistered:
        unknown = sorted(set(seeds) - set(preregistered))
        if unknown:
            raise ConfigError(f"--seeds {format_seeds(preregistered)} lacks the studies' seeds {unknown}")
        missing = [s for s in preregistered if s not in seeds]
        doc["preregistered_seeds"] = ",".join(str(s) for s in preregistered)
        if missing:
            doc["partial"] = (
                f"{len(seeds)} of the {len(preregistered)} preregistered seeds (not yet: "
                f"{','.join(str(s) for s in missing)}): a partial view, not the preregistered verdict"
            )
            doc["title"] += f" (partial: {len(seeds)} of {len(preregistered)} preregistered seeds)"
    return doc


def format_seeds(seeds: tuple[int, ...]) -> str:
    return (
        f"{seeds[0]}-{seeds[-1]}"
        if list(seeds) == list(range(seeds[0], seeds[-1] + 1))
        else ",".join(map(str, seeds))
    )


def join(folders: list[Path], out: Path, preregistered: tuple[int, ...] = ()) -> tuple[pd.DataFrame, dict]:
    """The joined report in ``out`` (report.write's files); returns its comparison table and
    summary (``study.json``). The
    files are written beside ``out`` and moved there whole, so a failed join leaves no report
    that looks finished."""
    if not folders:
        raise ConfigError("name at least one study folder to join")
    studies = [StudyFolder.read(Path(f)) for f in folders]
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
    seeds = tuple(sorted(preregistered or (s for study in studies for s in study.seeds)))
    staging = out.with_name(out.name + ".writing")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    table = report.write(staging, rows, family, controls, doc, seeds)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return table, doc


@click.command(name="join", help=__doc__.split("\n\n")[0])
@click.argument("folders", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, help="folder the joined report is written to"
)
@click.option(
    "--seeds", default="", help="the seeds the joined comparison was preregistered on, e.g. 958-962"
)
def main(folders: tuple[Path, ...], out: Path, seeds: str) -> None:
    try:
        table, doc = join(list(folders), out, parse_seeds(seeds) if seeds else ())
    except user_errors() as err:
        click.echo(f"error: {one_line(err)}", err=True)
        sys.exit(2)
    click.echo(f"joined report: {out / 'report.md'}")
    if doc.get("partial"):
        click.echo(f"partial: {doc['partial']}")
    if len(table):
        columns = [
            "comparison",
            "n",
            "diff_points",
            "ci_low_points",
            "ci_high_points",
            "p_holm",
            "label",
            "verdict",
        ]
        click.echo(table[columns].to_string(index=False, float_format=lambda v: f"{v:+.2f}"))


if __name__ == "__main__":
    main()
