"""study: a comparison grid at equal cost, with its protocol, on one machine or many.

    python -m pipeline.study --seeds 300-304 --study-name resnet-screen
    python -m pipeline.study --phase confirm --seeds 400-404 --study-name resnet-confirm --workers 2
    python -m pipeline.study --study-name resnet-confirm --worker true --storage postgresql://...
    mlflow run . -e study --env-manager local -P seeds=300-304 -P arms=static,dynamic,dynamic-random

Trains arms (static, the growing network, its controls) x budgets (epochs, shares of static's
FLOPs, static's seconds that trained) x seeds, each cell one training run and a child of the
study's parent run. Running the same command again trains only the cells that have not
finished. Cells are handed out through Optuna's storage, so ``--workers N`` processes here and
``--worker true`` processes on other machines (the same storage and tracking server) share them;
a worker killed mid-cell loses nothing: after the grace period its cell is queued again.
``--stop-after-hours H`` takes no new cell after H hours and leaves the rest queued for the same
command again.

The protocol: ``--phase screen`` reads validation accuracy only. ``--phase confirm`` refuses seeds
that gated a choice or trained in any screen run of the store, logs its preregistration
(comparisons, seeds, metric, correction) on the parent run before any cell trains, and reads
the test split once per run through evaluate. The report (``study/`` on the parent run) gives
per comparison the paired difference with its interval, Holm's correction over the study, and
labels every figure confirmatory or exploratory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable

import click
import mlflow
import optuna
import pandas as pd
from mlflow.entities import ViewType
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from models.schedule import parse_schedule, validate_schedule
from models.spec import resolve_spec
from pipeline import score_difficulty, workers
from pipeline.cli import ConfigError, build_config, config_options, help_text
from pipeline.codec import flat_params, to_argv
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.difficulty.scores_table import find_scores_run, parse_ref
from pipeline.run.length import static_training_flops
from pipeline.study import queue, report, results
from pipeline.study.cell import PHASE_TAG, STUDY_TAG, StudyRuns, static_description, train_cell
from pipeline.study.config import ENTRY_POINT, GridConfig, StudyConfig, added_since, differs
from pipeline.study.grid import cells, comparisons
from pipeline.study.protocol import CORRECTION, METRIC, Preregistration, check_confirm_seeds
from pipeline.study.recipes import recipe
from pipeline.tracking.artifacts import log_dataset
from pipeline.tracking.errors import one_line, raise_terminated
from pipeline.tracking.guard import GuardedCommand, main_guard
from pipeline.tracking.runs import RUN_TAGS, code_version, tracked_run
from pipeline.training.config import TrainConfig
from pipeline.training.stem import refuse_without_stem
from pipeline.tune.study import STUDY_EXPERIMENT, STUDY_PARENT, check_parent, default_storage, redact

CONFIGS = (DataConfig, TrainConfig, GridConfig, StudyConfig)
WORKER_INDEX_ENV = "GCNN_STUDY_WORKER_INDEX"
# Study attributes: what every worker must agree on, and what they need that is computed once.
DEFINITION_ATTR, SCORES_ATTR = "study_definition", "scores_run_id"
PREREGISTRATION_TAG = "preregistration"


def definition(
    data_cfg: DataConfig, train_cfg: TrainConfig, grid_cfg: GridConfig, study_cfg: StudyConfig
) -> dict:
    """What trains: every worker of a study must have the same."""
    return {**flat_params(data_cfg, train_cfg, grid_cfg), "phase": study_cfg.phase}


def final_network(grid_cfg: GridConfig, epochs: int, data):
    """The network the growth ends in (and static trains), the schedule checked on the way."""
    start = resolve_spec(grid_cfg.start_spec, data.input_shape, data.num_classes)
    return validate_schedule(start, parse_schedule(grid_cfg.schedule, epochs), epochs)


def study_runs(configs: tuple, parent: str, scores_run: str, data=None) -> StudyRuns:
    """The cells' shared setting; loads the data only to fit the networks to it."""
    data_cfg, train_cfg, grid_cfg, study_cfg = configs
    train_cfg = dataclasses.replace(train_cfg, **recipe(grid_cfg.recipe).both)  # every arm's
    data = data or load_data(data_cfg)  # never the test split
    final = final_network(grid_cfg, train_cfg.epochs, data)
    return StudyRuns(
        study=study_cfg.study_name,
        phase=study_cfg.phase,
        parent_run_id=parent,
        experiment_name=study_cfg.experiment_name,
        data_cfg=data_cfg,
        train_cfg=train_cfg,
        start_spec=grid_cfg.start_spec,
        schedule=grid_cfg.schedule,
        recipe=grid_cfg.recipe,
        final=final,
        scores_run=scores_run,
        reference_flops=static_training_flops(final, data, train_cfg.epochs, train_cfg.whiten_bias_epochs),
    )


def trainer(runs: StudyRuns):
    """``queue.work``'s ``train``: a cell trained here, its run id and final validation accuracy."""

    def train(cell, trial_number: int, reference: str) -> tuple[str, float]:
        run_id = train_cell(runs, cell, trial_number, reference)
        if runs.phase == "confirm":
            # Read its test split now, in the cell: a study cut off before its end (a machine
            # given back, a time limit) keeps every finished cell's test accuracy. A readout
            # that fails leaves the cell finished (training it again would read the test split
            # on its seed a second time): the study's end reads it, and fails loudly there.
            try:
                results.evaluate_once({cell.key: run_id}, runs, trial_number)
            except Exception as err:  # retried, with its traceback, at the end
                click.echo(
                    f"cell {cell.key}: its test readout failed ({one_line(err)}); read at the study's end",
                    err=True,
                )
        return run_id, mlflow.MlflowClient().get_run(run_id).data.metrics["val/acc"]

    return train


CONFIRM = "confirm study"


def own_parent(url: str, study_cfg: StudyConfig) -> str:
    """The parent run of the study of this name in ``url``; '' where the storage has none (the
    same name in another storage, or in one that was lost, is another study)."""
    try:
        return queue.open_queue(url, study_cfg, create=False).user_attrs.get(STUDY_PARENT, "")
    except KeyError:  # optuna: no study of that name here
        return ""


def used_seeds(own_parent: str) -> dict[int, str]:
    """seed -> the study that spent it, in this store, deleted runs and experiments included:
    any screen study or tune study that trained a run on it (its result may have chosen
    something), and any other confirm study with a cell on it that finished (its test split
    was read) or is training now; ``own_parent``'s cells are this study's own (running it
    again trains only what is missing)."""
    every = [e.experiment_id for e in mlflow.search_experiments(view_type=ViewType.ALL)]
    out: dict[int, str] = {}
    for where, kind in (
        (f"tags.{PHASE_TAG} = 'screen'", "screen study"),
        ("tags.entry_point = 'tune'", "tune study"),
        (f"tags.{PHASE_TAG} = 'confirm' and tags.study_arm != ''", CONFIRM),
    ):
        for run in mlflow.search_runs(every, where, run_view_type=ViewType.ALL, output_format="list"):
            seed, name = run.data.params.get("seed"), run.data.tags.get(STUDY_TAG, "?")
            if kind == CONFIRM and (
                run.info.status not in ("FINISHED", "RUNNING")
                or run.data.tags.get(MLFLOW_PARENT_RUN_ID) == own_parent
            ):
                continue
            if seed is not None and seed.lstrip("-").isdigit():
                out.setdefault(int(seed), f"{kind} {name!r}")
    return out


def preregistration(configs: tuple, runs: StudyRuns) -> Preregistration:
    _, _, grid_cfg, study_cfg = configs
    arms, budgets, seeds = grid_cfg.parsed()
    return Preregistration(
        study=study_cfg.study_name,
        comparisons=tuple(c.name for c in comparisons(arms, budgets)),
        seeds=seeds,
        metric=METRIC[study_cfg.phase],
        correction=CORRECTION,
        alpha=report.ALPHA,
        grid={**definition(*configs), "static_spec": static_description(runs)},
    )


def register(client: mlflow.MlflowClient, parent: str, prereg: Preregistration) -> None:
    """Log the preregistration before any cell trains; a rerun must keep it unchanged."""
    logged = client.get_run(parent).data.tags.get(PREREGISTRATION_TAG)
    if logged is None:
        client.log_text(parent, json.dumps(prereg.to_dict(), indent=2), "study/preregistration.json")
        client.set_tag(parent, PREREGISTRATION_TAG, prereg.digest())
        return
    if logged != prereg.digest():  # an earlier version of the step may have recorded fewer options
        then = json.loads(mlflow.artifacts.load_text(f"runs:/{parent}/study/preregistration.json"))
        added = added_since(prereg.grid, then["grid"])
        prereg = dataclasses.replace(prereg, grid={k: v for k, v in prereg.grid.items() if k not in added})
    if logged != prereg.digest():
        raise ConfigError(
            f"study {prereg.study!r} was preregistered as {logged} (study/preregistration.json on its "
            "parent run); these options differ from it: confirm them under another --study-name"
        )


def check_inputs(configs: tuple, data) -> None:
    """The networks, the schedule and a named scores run, refused in one line before anything
    is created (a study half made by bad input would block its name)."""
    _, train_cfg, grid_cfg, _ = configs
    final = final_network(grid_cfg, train_cfg.epochs, data)
    every_arm = dataclasses.replace(train_cfg, **recipe(grid_cfg.recipe).both)
    refuse_without_stem(final, every_arm.whiten_bias_epochs)  # growth neither adds nor moves a stem
    if grid_cfg.scores_run != "auto":
        scores_run_metrics(grid_cfg.scores_run)


def scores_run_metrics(ref: str) -> dict:
    try:
        return mlflow.MlflowClient().get_run(parse_ref(ref)[0]).data.metrics
    except mlflow.exceptions.MlflowException:
        raise ConfigError(f"--scores-run {ref!r}: no such run in this tracking store") from None


def scores_for(data_cfg: DataConfig, grid_cfg: GridConfig, data, known: str = "") -> tuple[str, dict]:
    """The difficulty scores every cell uses (per-tier accuracy, the curriculum) and their cost:
    the study's own (``known``), the given run, the newest for this data, or a score_difficulty
    run made here, a child of the study."""
    if known:
        run_id = known
    elif grid_cfg.scores_run != "auto":
        run_id = grid_cfg.scores_run
    else:
        run_id = find_scores_run(data)
        if not run_id:
            click.echo("study: no score_difficulty run for this data; scoring it first", err=True)
            run_id = score_difficulty.run(data_cfg, score_difficulty.ScoreConfig())
    metrics = scores_run_metrics(run_id)
    return run_id, {"run": run_id, "seconds": metrics.get("time/total_s", float("nan"))}


def open_checked(url: str, configs: tuple) -> optuna.Study:
    """The study's trials, created or reopened; a reopened one must have these options."""
    study_cfg = configs[-1]
    study = queue.open_queue(url, study_cfg, create=True)
    mine, theirs = definition(*configs), study.user_attrs.get(DEFINITION_ATTR)
    if theirs is None and STUDY_PARENT in study.user_attrs:  # tune shares the storage and its attributes
        raise ConfigError(
            f"{study_cfg.study_name!r} in {redact(url)} is a tune study, not a study's grid: choose "
            "another --study-name"
        )
    changed = differs(mine, theirs) if theirs is not None else []
    if changed:
        raise ConfigError(
            f"study {study_cfg.study_name!r} in {redact(url)} was created with other options "
            f"({', '.join('--' + k.replace('_', '-') for k in changed)}): pass its options or "
            "choose another --study-name"
        )
    if STUDY_PARENT in study.user_attrs:
        check_parent(study)
    return study


def set_up(study: optuna.Study, configs: tuple, data, active: mlflow.ActiveRun) -> tuple[StudyRuns, dict]:
    """Inside the parent run, before any cell trains: the scores, the preregistration of a
    confirmation, and (for a new study) what its workers need, stored with its trials."""
    data_cfg, _, grid_cfg, study_cfg = configs
    parent = study.user_attrs.get(STUDY_PARENT, active.info.run_id)
    if active.info.run_id != study.user_attrs.get(STUDY_PARENT):  # a new run: its data too
        log_dataset(data, context="study")
    token = RUN_TAGS.set({"mlflow.parentRunId": parent, STUDY_TAG: study_cfg.study_name})
    try:
        scores_run, scoring = scores_for(data_cfg, grid_cfg, data, study.user_attrs.get(SCORES_ATTR, ""))
    finally:
        RUN_TAGS.reset(token)
    runs = study_runs(configs, parent, scores_run, data)
    if study_cfg.phase == "confirm":
        register(mlflow.MlflowClient(), parent, preregistration(configs, runs))
    if STUDY_PARENT not in study.user_attrs:
        for key, value in {
            DEFINITION_ATTR: definition(*configs),
            SCORES_ATTR: scores_run,
            STUDY_EXPERIMENT: active.info.experiment_id,
            STUDY_PARENT: parent,  # last: workers wait for it
        }.items():
            study.set_user_attr(key, value)
    return runs, scoring


def train_grid(
    study: optuna.Study, configs: tuple, runs: StudyRuns, url: str, grid: list, deadline: float | None
) -> list[str]:
    """Queue the missing cells and train them: in ``--workers`` processes, then here whatever
    they left or lost (a dead worker's cell, once its heartbeat is stale), taking none after
    ``deadline``; the cells missing."""
    data_cfg, train_cfg, grid_cfg, study_cfg = configs
    queue.enqueue_missing(study, grid)
    done, waiting = queue.finished(study, grid), queue.queued(study) & {c.key for c in grid}
    click.echo(
        f"study {study_cfg.study_name!r}: {len(grid)} cells, {len(done)} finished, "
        f"{len(grid) - len(done) - len(waiting)} under way, {len(waiting)} queued; parent run "
        f"{runs.parent_run_id}; cells in {redact(url)}",
        err=True,
    )
    changed = code_changed(
        study_cfg.study_name, results.code_versions_of(done), code_version(), len(grid) - len(done)
    )
    if changed:
        click.echo(changed, err=True)
    hours_left = None if deadline is None else (deadline - time.monotonic()) / 3600
    if study_cfg.workers > 1 and (hours_left is None or hours_left > 0):
        worker_cfg = dataclasses.replace(
            study_cfg, storage=url, worker=True, workers=1, stop_after_hours=hours_left or 0.0
        )
        argv = to_argv(data_cfg, train_cfg, grid_cfg, worker_cfg)
        workers.run_worker_processes("pipeline.study", argv, study_cfg.workers, WORKER_INDEX_ENV)
    queue.work(study, trainer(runs), grid, stop_taking=past(deadline), wait_after_stop=True)
    done = queue.finished(study, grid)
    return [c.key for c in grid if c.key not in done]


def code_changed(name: str, earlier: dict[str, int], mine: str, left: int) -> str:
    """The warning a reopened study gives before it trains its ``left`` cells when its finished
    ones trained with other code (``earlier``: cells per version) than ``mine``; '' when there is
    none to give. The definition check compares options only, so a code change that alters
    training would otherwise pass unseen until the report names both versions."""
    if not left or not earlier or set(earlier) == {mine}:
        return ""
    return (
        f"study {name!r}: its finished cells trained with code {report.versions_said(earlier)}; the "
        f"{left} left train with {mine}: if a change between them alters training, start another study"
    )


def run(
    data_cfg: DataConfig, train_cfg: TrainConfig, grid_cfg: GridConfig, study_cfg: StudyConfig
) -> pd.DataFrame | None:
    configs = (data_cfg, train_cfg, grid_cfg, study_cfg)
    train_cfg.validate()
    deadline = study_cfg.validate().deadline(time.monotonic())
    arms, budgets, seeds = grid_cfg.parsed()
    grid = cells(arms, budgets, seeds)
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # each cell prints its own line
    url = study_cfg.storage.strip() or default_storage(mlflow.get_tracking_uri())
    if study_cfg.worker:
        return _join(url, configs, deadline)
    if study_cfg.phase == "confirm":  # before anything is created or trained
        check_confirm_seeds(seeds, used_seeds(own_parent(url, study_cfg)))
    data = load_data(data_cfg)  # never the test split
    check_inputs(configs, data)  # before any storage, study or run is created
    study = open_checked(url, configs)
    parent = study.user_attrs.get(STUDY_PARENT)
    with tracked_run(
        ENTRY_POINT,
        # the storage as given (redacted; '' for the default, so main finds this run again
        # by its parameters), the one used in the tag below
        {**flat_params(*configs), "storage": redact(study_cfg.storage) if study_cfg.storage.strip() else ""},
        run_name=study_cfg.run_name or f"study-{study_cfg.study_name}",
        run_id=parent if parent and not os.environ.get("MLFLOW_RUN_ID") else None,
        tags={STUDY_TAG: study_cfg.study_name, PHASE_TAG: study_cfg.phase, "optuna_storage": redact(url)},
        experiment_name=study_cfg.experiment_name,
    ) as active:
        runs, scoring = set_up(study, configs, data, active)
        missing = train_grid(study, configs, runs, url, grid, deadline)
        if study_cfg.phase == "confirm":  # any cell whose own readout failed or predates it
            results.evaluate_once(queue.finished(study, grid), runs)
        table = results.log_report(study, configs, runs, scoring, grid)
        if missing:
            raise click.ClickException(unfinished(missing, queue.queued(study), study_cfg.stop_after_hours))
    return table


def past(deadline: float | None) -> Callable[[], bool]:
    """``queue.work``'s ``stop_taking`` for ``--stop-after-hours``: whether ``deadline`` (a
    ``time.monotonic()``) has passed; never without one."""
    return lambda: deadline is not None and time.monotonic() >= deadline


def unfinished(missing: list[str], queued: set[str], stop_after_hours: float) -> str:
    """What the study's error says of its cells that did not finish: those that failed, and
    those ``--stop-after-hours`` left queued."""

    def named(keys: list[str]) -> str:
        return f"{', '.join(keys[:4])}{', ...' if len(keys) > 4 else ''}"

    left = [k for k in missing if k in queued]
    failed = [k for k in missing if k not in queued]
    parts = []
    if failed:
        parts.append(f"{len(failed)} cell(s) did not finish ({named(failed)}): their errors are above")
    if left:
        by = f" by --stop-after-hours {stop_after_hours:g}" if stop_after_hours else ""
        parts.append(f"{len(left)} cell(s) left queued{by} ({named(left)})")
    return "; ".join(parts) + "; run the study again to train them"


def _join(url: str, configs: tuple, deadline: float | None) -> None:
    """``--worker true``: take cells of a study that another process created."""
    _, _, _, study_cfg = configs
    signal.signal(signal.SIGTERM, raise_terminated)  # a stopped worker closes its cell's run
    appear_by = time.monotonic() + study_cfg.wait_s
    while True:
        try:
            study = queue.open_queue(url, study_cfg, create=False)
            if STUDY_PARENT in study.user_attrs:
                break
        except KeyError:  # not created yet
            pass
        if time.monotonic() > appear_by:
            raise ConfigError(
                f"study {study_cfg.study_name!r} did not appear in {redact(url)} within --wait-s "
                f"{study_cfg.wait_s}: start `python -m pipeline.study` without --worker first"
            )
        time.sleep(2)
    changed = differs(definition(*configs), study.user_attrs[DEFINITION_ATTR])
    if changed:
        raise ConfigError(
            f"this worker's options differ from study {study_cfg.study_name!r}'s "
            f"({', '.join('--' + k.replace('_', '-') for k in changed)}): pass the options it was "
            "created with"
        )
    check_parent(study)
    # The cells go where the study's parent run is, whatever experiment this worker was told.
    experiment = mlflow.get_experiment(study.user_attrs[STUDY_EXPERIMENT]).name
    if study_cfg.experiment_name and study_cfg.experiment_name != experiment:
        raise ConfigError(
            f"--experiment-name {study_cfg.experiment_name!r}: study {study_cfg.study_name!r} "
            f"records its runs in experiment {experiment!r}; pass that or leave it empty"
        )
    configs = (*configs[:3], dataclasses.replace(study_cfg, experiment_name=experiment))
    runs = study_runs(configs, study.user_attrs[STUDY_PARENT], study.user_attrs[SCORES_ATTR])
    queue.work(study, trainer(runs), cells(*configs[2].parsed()), stop_taking=past(deadline))


@click.command(name=ENTRY_POINT, help=help_text(__doc__), cls=GuardedCommand)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    configs = tuple(build_config(cls, values) for cls in CONFIGS)
    table = run(*configs)
    if table is not None and len(table):
        # Said before the table: under main its numbers stand beside evaluate's, on another split.
        study_cfg = configs[-1]
        click.echo(
            f"study {study_cfg.study_name!r} ({study_cfg.phase}): {METRIC[study_cfg.phase]} minus "
            "static's (or a control's), in points, paired by seed"
        )
        click.echo(report.console_table(table))
