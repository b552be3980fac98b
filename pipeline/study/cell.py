"""Train one cell of a study in this process: the arm's training step at the cell's budget
and seed, as a child run of the study's parent run. Knows nothing of Optuna."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import mlflow
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from models.schedule import parse_schedule
from models.spec import NAMED_SPECS, ArchSpec, named_layers
from pipeline import train_dynamic, train_static
from pipeline.curriculum.config import CurriculumConfig, DynamicCurriculumConfig
from pipeline.curriculum.diet import diet_of_growth
from pipeline.data.config import DataConfig
from pipeline.growth.config import GrowthConfig
from pipeline.run.session import RunConfig
from pipeline.study.grid import ARMS, Arm, Cell, budget_option
from pipeline.study.recipes import recipe
from pipeline.tracking.runs import RUN_TAGS
from pipeline.training.config import TrainConfig

# Tags on every cell's run: which study and cell it is (reuse and the report find it by them).
STUDY_TAG, PHASE_TAG, CELL_TAG = "study_name", "study_phase", "study_cell"


@dataclass(frozen=True)
class StudyRuns:
    """What every cell of one study shares; a worker process rebuilds it from the study."""

    study: str
    phase: str
    parent_run_id: str
    experiment_name: str
    data_cfg: DataConfig
    train_cfg: TrainConfig  # the recipe of every arm; seed and budget are the cell's
    start_spec: str
    schedule: str
    recipe: str  # a name of pipeline/study/recipes.py; train_cfg already holds its options for every arm
    final: ArchSpec  # what the static arm trains: the network the growth ends in
    scores_run: str
    reference_flops: float  # training FLOPs of static at --epochs


def static_spec_option(final: ArchSpec) -> str:
    """The static arm's ``--spec``: a registered name where the final network is one (so its
    runs read as ``resnet``, not a page of JSON), else the spec's JSON."""
    for name in NAMED_SPECS:
        if list(final.layers) == named_layers(name) and not final.exits:
            return name
    return final.to_json()


def static_description(runs: StudyRuns) -> str:
    """What the static arm trains, in words for reports."""
    name = static_spec_option(runs.final)
    if name in NAMED_SPECS:
        return name
    return f"the network schedule {runs.schedule!r} grows {runs.start_spec!r} into"


def static_diet(runs: StudyRuns, arm: Arm) -> dict:
    """A static arm's curriculum options: its own, and where it takes the growing arm's diet,
    the tier boundaries and pruning start the study's schedule gives a growing run at --epochs."""
    if not arm.diet_of_growth:
        return dict(arm.curriculum)
    events = parse_schedule(runs.schedule, runs.train_cfg.epochs)
    return {**arm.curriculum, **diet_of_growth(events)}


def cell_tags(runs: StudyRuns, cell: Cell, trial_number: int) -> dict[str, str]:
    return {
        MLFLOW_PARENT_RUN_ID: runs.parent_run_id,
        STUDY_TAG: runs.study,
        PHASE_TAG: runs.phase,
        CELL_TAG: cell.key,
        "study_arm": cell.arm,
        "study_budget": cell.budget.label,
        "optuna_trial_number": str(trial_number),
    }


def train_cell(runs: StudyRuns, cell: Cell, trial_number: int, reference_run_id: str = "") -> str:
    """Train ``cell``; its run id. A seconds cell needs its reference run's id."""
    arm, lever = ARMS[cell.arm], recipe(runs.recipe)
    growing = arm.kind != "static"
    train = dataclasses.replace(
        runs.train_cfg,
        seed=cell.seed,
        budget=budget_option(cell, runs.reference_flops, reference_run_id),
        **{**(lever.dynamic if growing else {}), **arm.train},
    )
    run_cfg = RunConfig(
        run_name=f"{runs.study}-{cell.key}", experiment_name=runs.experiment_name, progress=False
    )
    token = RUN_TAGS.set(cell_tags(runs, cell, trial_number))
    try:
        if arm.kind == "static":
            train_static.run(
                runs.data_cfg,
                train,
                train_static.StaticConfig(spec=static_spec_option(runs.final)),
                CurriculumConfig(scores_run=runs.scores_run or "auto", **static_diet(runs, arm)),
                run_cfg,
            )
        else:
            growth = GrowthConfig(
                start_spec=runs.start_spec, schedule=runs.schedule, **{**lever.growth, **arm.growth}
            )
            diet = DynamicCurriculumConfig(
                scores_run=runs.scores_run or "auto", **{**lever.diet, **arm.curriculum}
            )
            train_dynamic.run(runs.data_cfg, train, growth, diet, run_cfg)
    finally:
        RUN_TAGS.reset(token)
    return cell_run_id(runs, cell, trial_number)


def cell_run_id(runs: StudyRuns, cell: Cell, trial_number: int) -> str:
    """The run the cell's trial just trained, found by its tags (the study's parent run is the
    active one in this process, so the fluent API's last run is not it)."""
    found = mlflow.search_runs(
        search_all_experiments=True,
        filter_string=(
            f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{runs.parent_run_id}' and "
            f"tags.optuna_trial_number = '{trial_number}' and tags.{CELL_TAG} = '{cell.key}'"
        ),
        order_by=["attributes.start_time DESC"],
        max_results=1,
        output_format="list",
    )
    return found[0].info.run_id
