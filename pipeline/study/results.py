"""A study's results in the tracking store: its finished cells' rows read from their runs,
test accuracy through evaluate (a confirmation's, once per run), and the report logged on the
parent run (``study/``: report.md, comparisons.csv, cells.csv, frontier.csv and .png, study.json)."""

from __future__ import annotations

import time

import mlflow
import optuna
import pandas as pd
from mlflow.entities import Metric

from pipeline import evaluate
from pipeline.data.tiers import TIER_NAMES
from pipeline.study import queue, report
from pipeline.study.cell import PHASE_TAG, STUDY_TAG, StudyRuns, static_description
from pipeline.study.grid import Cell, comparisons, control_comparisons
from pipeline.study.protocol import METRIC, label
from pipeline.tracking.artifacts import scratch_dir
from pipeline.tracking.processes import BOOT_TAG, HOST_TAG
from pipeline.tracking.runs import CODE_TAG, RUN_TAGS

# A finished cell's row; a study none of whose cells finished still has these columns (an empty
# report, not an error).
ROW_COLUMNS = [
    "cell", "arm", "budget", "seed", "run_id", "acc", "val_acc", "trained_s", "run_s", "flops",
    "epochs", "health", "dip", "host", "boot", "code", *(f"acc_{t}" for t in TIER_NAMES),
]  # fmt: skip


def _whole_run_s(run) -> float:
    """The run start to end: its data, validation and logging besides the seconds that trained
    (a resumed run's includes the time it lay stopped)."""
    return (run.info.end_time - run.info.start_time) / 1000 if run.info.end_time else float("nan")


def rows(finished: dict[str, str], phase: str) -> pd.DataFrame:
    """One row per finished cell, read from its run (see pipeline/study/report.py)."""
    client, prefix = mlflow.MlflowClient(), METRIC[phase].split("/")[0]
    out = []
    for key, run_id in finished.items():
        run = client.get_run(run_id)
        m = run.data.metrics
        out.append(
            {
                "cell": key,
                "arm": run.data.tags["study_arm"],
                "budget": run.data.tags["study_budget"],
                "seed": int(run.data.params["seed"]),
                "run_id": run_id,
                "acc": m.get(METRIC[phase], float("nan")),
                "val_acc": m.get("val/acc", float("nan")),
                "trained_s": m.get("time/trained_s", float("nan")),
                "run_s": _whole_run_s(run),
                "flops": m.get("train/flops_cumulative", float("nan")),
                "epochs": len(client.get_metric_history(run_id, "val/acc")),
                "health": run.data.tags.get("health", ""),
                "dip": m.get("growth/dip_worst", float("nan")),
                "host": run.data.tags.get(HOST_TAG, ""),
                "boot": run.data.tags.get(BOOT_TAG, ""),
                "code": run.data.tags.get(CODE_TAG, ""),
                **{f"acc_{t}": m.get(f"{prefix}/acc_{t}", float("nan")) for t in TIER_NAMES},
            }
        )
    return pd.DataFrame(out, columns=ROW_COLUMNS)  # with no cell finished, still a table of them


def code_versions_of(finished: dict[str, str]) -> dict[str, int]:
    """Finished cells per code version they trained with, read from their runs."""
    client = mlflow.MlflowClient()
    tags = [client.get_run(run_id).data.tags.get(CODE_TAG, "") for run_id in finished.values()]
    return report.code_versions(pd.DataFrame({"code": tags}))


# On a cell's own test readout: which cell and trial it read (not study_cell: that marks cells).
READOUT_CELL_TAG, READOUT_TRIAL_TAG = "study_readout_cell", "study_readout_trial"


def evaluate_once(finished: dict[str, str], runs: StudyRuns, trial_number: int | None = None) -> None:
    """Test accuracy for every cell that has none yet, through evaluate (a child of the study):
    each run reads the test split once. A cell's own readout names its cell and trial."""
    client = mlflow.MlflowClient()
    todo = [r for r in finished.values() if "test/acc" not in client.get_run(r).data.metrics]
    if not todo:
        return
    name = f"{runs.study}-evaluate" + (f"-{next(iter(finished))}" if len(finished) == 1 else "")
    tags = {"mlflow.parentRunId": runs.parent_run_id, STUDY_TAG: runs.study, PHASE_TAG: runs.phase}
    if trial_number is not None:
        tags.update({READOUT_CELL_TAG: next(iter(finished)), READOUT_TRIAL_TAG: str(trial_number)})
    token = RUN_TAGS.set(tags)
    try:
        evaluate.run(
            evaluate.EvaluateConfig(runs=",".join(todo), run_name=name, experiment_name=runs.experiment_name)
        )
    finally:
        RUN_TAGS.reset(token)


def log_report(
    study: optuna.Study, configs: tuple, runs: StudyRuns, scoring: dict, grid: list[Cell]
) -> pd.DataFrame:
    """The study's report on its parent run (``study/``) over ``grid``'s cells; the comparison
    table: the family's lines, then those of arms against their controls."""
    _, train_cfg, grid_cfg, study_cfg = configs
    arms, budgets, seeds = grid_cfg.parsed()
    done = queue.finished(study, grid)
    table_rows = rows(done, study_cfg.phase)
    family, controls = comparisons(arms, budgets), control_comparisons(arms, budgets)
    doc = {
        "study": study_cfg.study_name,
        "title": f"study {study_cfg.study_name}",
        "phase": study_cfg.phase,
        "label": label(study_cfg.phase, seeds, study_cfg.phase == "confirm"),
        "metric": METRIC[study_cfg.phase],
        "seeds": ",".join(str(s) for s in seeds),
        "epochs": train_cfg.epochs,
        "static_spec": static_description(runs),
        "scoring": scoring,
        "cells_finished": len(done),
        "cells_missing": [c.key for c in grid if c.key not in done],
        "cells_counted_twice": queue.counted_twice(study),
    }
    client = mlflow.MlflowClient()
    with scratch_dir() as tmp:
        folder = tmp / "study"
        folder.mkdir()
        table = report.write(folder, table_rows, family, controls, doc, seeds)
        client.log_artifacts(runs.parent_run_id, str(folder), "study")
    now = int(time.time() * 1000)
    metrics = [Metric("study/cells_finished", len(done), now, 0)]
    for c, line in zip([*family, *controls], table.to_dict("records")):
        metrics += [Metric(f"compare/{c.key}/diff_points", line["diff_points"], now, 0)]
        metrics += [Metric(f"compare/{c.key}/p_holm", line["p_holm"], now, 0)]
    client.log_batch(runs.parent_run_id, metrics=[m for m in metrics if pd.notna(m.value)])
    client.set_tag(runs.parent_run_id, "study_label", doc["label"])
    return table
