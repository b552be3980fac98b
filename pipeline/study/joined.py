"""What a joined report (pipeline/study/join.py) holds beyond one study's: reference runs kept
for some cells alone, and the lines that say what was joined and what each continuation
replaced. Pure: rows and summaries in, rows and text out.

A joined report may hold a continuation's reference run kept for the continuation's own cells
alone: its row names them in ``reference_of``. That row is no cell of the grid: the comparisons
set those cells against it, and nothing else reads it.
"""

from __future__ import annotations

import math

import pandas as pd

OWN_REFERENCE = "reference_of"  # the cells, ';'-joined, that a kept reference run is the reference of


def own_references(rows: pd.DataFrame) -> pd.DataFrame:
    """The reference runs kept for some cells alone (none outside a join)."""
    if OWN_REFERENCE not in rows:
        return rows.iloc[:0]
    return rows[rows[OWN_REFERENCE].fillna("").astype(str) != ""]


def counted(rows: pd.DataFrame) -> pd.DataFrame:
    """The grid's cells: every row but the reference runs kept for some cells alone."""
    return rows.drop(own_references(rows).index)


def kept_references(rows: pd.DataFrame) -> dict[str, int]:
    """Each cell whose reference run is not its seed's counted one -> that run's row (index)."""
    return {cell: i for i, r in own_references(rows).iterrows() for cell in str(r[OWN_REFERENCE]).split(";")}


def joined_lines(summary_doc: dict) -> list[str]:
    """A join's lines: the studies it reads, the seeds preregistered, whether it is partial,
    each study's scoring run and the options only some of them recorded (none for a study)."""
    lines = []
    if summary_doc.get("studies"):
        joined = ", ".join(
            f"{s['study']} (seeds {','.join(map(str, s['seeds']))}, {s['label']})"
            for s in summary_doc["studies"]
        )
        n = len(summary_doc["studies"])
        lines.append(f"Joined from {n} {'study' if n == 1 else 'studies'} of one grid: {joined}.")
    for study in summary_doc.get("studies", []):
        lines += [continued_line(study["study"], cont) for cont in study.get("continued", [])]
    if summary_doc.get("preregistered_seeds"):
        lines.append(f"Seeds preregistered for the joined comparison: {summary_doc['preregistered_seeds']}.")
    if summary_doc.get("partial"):
        lines.append(f"**Partial**: {summary_doc['partial']}.")
    if summary_doc.get("scored_by"):
        said = ", ".join(f"{study}: run {run}" for study, run in summary_doc["scored_by"].items())
        lines.append(f"Difficulty scored, each study for itself: {said}.")
    for key, values in summary_doc.get("recorded_by_some", {}).items():
        said = ", ".join(f"{study}: {value}" for study, value in values.items())
        lines.append(f"Option {key} recorded by only some of the studies ({said}).")
    return lines


def continued_line(study: str, cont: dict) -> str:
    """What a continuation replaced: its cells, each reading of the first study it superseded
    beside the continuation's own, and the options only one of the two recorded."""
    superseded = ", ".join(
        f"{r['cell']} {reading(r['acc'], r['run_id'])}, now {reading(r['now_acc'], r['now_run_id'])}"
        for r in cont["superseded"]
    )
    line = (
        f"{study} continued by {cont['by']} (a study in a new store): its cells {', '.join(cont['cells'])} "
        f"are the continuation's; superseded, not counted: {superseded or 'none'}."
    )
    for r in cont.get("references_kept", []):
        line += (
            f" Its {r['cell']} {reading(r['acc'], r['run_id'])} is the reference of its "
            f"{', '.join(r['of']) or 'no cell'} alone; the study's, "
            f"{reading(r['counted_acc'], r['counted_run_id'])}, stays counted (cells kept were given "
            "its seconds)."
        )
    for key, values in cont.get("recorded_by_one", {}).items():
        said = ", ".join(f"{name}: {value}" for name, value in values.items())
        line += f" Option {key} recorded by only one of the two ({said})."
    return line


def reading(acc, run_id) -> str:
    """A cell's accuracy and run as a report line says them; what a table lacks, said so."""
    acc = float(acc) if acc is not None else math.nan
    run = run_id if isinstance(run_id, str) and run_id else "not recorded"
    return f"{100 * acc:.2f}% (run {run})" if math.isfinite(acc) else f"no reading (run {run})"
