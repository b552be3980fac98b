"""The studies main runs for one data setting: one ``study`` step per growth schedule, each the
preset's grid, and the training runs their cells made (which evaluate then reads).
"""

from __future__ import annotations

import hashlib
import json

import mlflow

from pipeline.study.cell import CELL_TAG, STUDY_TAG
from pipeline.study.config import GridConfig
from pipeline.study.grid import cells
from pipeline.tracking.runs import code_version
from pipeline.workflow.presets import Preset, start_of
from pipeline.workflow.steps import StepRunner

# A main's studies read validation only: their seeds (the presets' 0-4 chose the defaults) are
# tuning seeds, and main's Conclusion, read from evaluate's report, is exploratory.
PHASE = "screen"


def noise_label(rate: float, kind: str) -> str:
    """What run names add for noisy data: '' when clean, else e.g. '-noise0.4' ('-asym0.4')."""
    return "" if not rate else f"-{'noise' if kind == 'symmetric' else 'asym'}{rate:g}"


def study_name(label: str, params: dict) -> str:
    """``label`` and a digest of what the study trains and the code it trains with: main run
    again with the same inputs finds the same study (and reuses its finished cells, so a main
    stopped midway trains only what is missing); with other inputs or code, a new one."""
    what = json.dumps({**params, "code_version": code_version()}, sort_keys=True, default=str)
    return f"{label}-{hashlib.sha256(what.encode()).hexdigest()[:8]}"


def run_studies(
    step: StepRunner,
    preset_name: str,
    preset: Preset,
    data_params: dict,
    scores: str,
    options: dict,
) -> list[str]:
    """Run the preset's study once per growth schedule on one data setting, every cell with
    ``options`` (the study's options main sets: precision, recipe, workers, experiment); the
    training runs of their finished cells."""
    noisy = noise_label(data_params.get("label_noise", 0), preset.noise_kind)
    runs = []
    for schedule in preset.schedules:
        params = {
            **data_params,
            **options,
            "epochs": preset.epochs,
            "seeds": ",".join(str(s) for s in preset.seeds),
            "arms": preset.arms,
            "budgets": preset.budgets,
            "schedule": schedule,
            "start_spec": start_of(schedule),
            "scores_run": scores,
            "phase": PHASE,
        }
        label = f"main-{preset_name}-{schedule}{noisy}"
        name = study_name(label, {k: v for k, v in params.items() if k not in ("workers", "experiment_name")})
        step("study", **params, study_name=name, run_name=f"study-{label}")
        runs += cell_runs(name, grid_cells(preset))
    return runs


def grid_cells(preset: Preset) -> list[str]:
    """The keys of the preset's cells (those main evaluates), parsed as the study parses them."""
    seeds = ",".join(str(s) for s in preset.seeds)
    return [c.key for c in cells(*GridConfig(arms=preset.arms, budgets=preset.budgets, seeds=seeds).parsed())]


def cell_runs(study: str, keys: list[str]) -> list[str]:
    """The training run of each of ``keys`` in ``study``: its first run to finish (a cell whose
    worker was presumed dead and finished after all counts once, as in the study's report)."""
    found = mlflow.search_runs(
        search_all_experiments=True,
        filter_string=(
            f"tags.{STUDY_TAG} = '{study}' and tags.{CELL_TAG} != '' and attributes.status = 'FINISHED'"
        ),
        order_by=["attributes.end_time ASC"],
        output_format="list",
    )
    first: dict[str, str] = {}
    for run in found:
        first.setdefault(run.data.tags[CELL_TAG], run.info.run_id)
    missing = [k for k in keys if k not in first]
    if missing:  # the study step fails where a cell did not finish; this would be a bug
        raise RuntimeError(f"study {study}: no finished run for cell(s) {', '.join(missing)}")
    return [first[k] for k in keys]
