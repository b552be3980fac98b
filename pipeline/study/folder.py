"""A study's report folder read back: what a study logs on its parent run (``study/``:
``cells.csv``, ``preregistration.json`` and ``study.json``), checked to be a study's, for the join
and its continuations (pipeline/study/join.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline.cli import ConfigError
from pipeline.study.grid import Cell, cells, parse_arms, parse_budget

FILES = ("cells.csv", "preregistration.json", "study.json")
PREREG_KEYS = ("study", "comparisons", "seeds", "metric", "correction", "alpha", "grid")
DOC_KEYS = ("phase", "label", "epochs", "static_spec")
# what the report reads of every cell (pipeline/study/report.py); older studies lack run_s
CELL_COLUMNS = ("cell", "arm", "budget", "seed", "acc", "trained_s", "flops", "epochs", "health")
# read as written: a code version or boot id of digits alone would otherwise come back a number
TEXT_COLUMNS = {"code": str, "host": str, "boot": str}
CODE_NOT_IN_TABLE = "not in its cells.csv (written before the column; see its runs' code_version tag)"


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
        if not isinstance(prereg["grid"], dict) or not {"arms", "budgets"} <= prereg["grid"].keys():
            raise ConfigError(f"{path}: its preregistration.json's grid names no arms and budgets")
        try:
            rows = pd.read_csv(path / "cells.csv", dtype=TEXT_COLUMNS)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path}/cells.csv is not a study's table of cells: {err}") from None
        lacking = [c for c in CELL_COLUMNS if c not in rows.columns]
        if lacking:
            raise ConfigError(f"{path}/cells.csv lacks the columns {', '.join(lacking)}")
        if "code" not in rows:  # its runs may well record it: say where it is missing
            rows = rows.assign(code=CODE_NOT_IN_TABLE)
        return StudyFolder(path, rows, prereg, doc)


def grid_cells(prereg: dict) -> list[Cell]:
    """The cells a study's preregistered grid names, on its seeds."""
    grid = prereg["grid"]
    budgets = tuple(parse_budget(b) for b in grid["budgets"].split(","))
    return cells(parse_arms(grid["arms"]), budgets, tuple(prereg["seeds"]))
