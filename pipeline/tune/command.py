"""tune: an Optuna study over growth schedules, curriculum pacing and the learning rate.

    python -m pipeline.tune --subset 3000 --epochs 4 --n-trials 20 --workers 2
    mlflow run . -e tune --env-manager local -P n_trials=20 -P objectives=acc+time -P pruner=none

Each trial grows the ``--start-spec`` network by a searched schedule (how many events, the
epoch of each, the layer type each adds: see pipeline/tune/search_space.py), fed by a searched
curriculum pacing at a searched learning rate, and trains ``--epochs`` epochs with
``pipeline.training.epoch_loop.fit`` on data loaded once per worker. The test split is never loaded.
Objectives: validation accuracy, pruned per epoch by ``--pruner``, or validation accuracy and
wall-clock time (``--objectives acc+time``), whose Pareto front the report shows. A schedule
that cannot be built is pruned before training, with the reason in the trial's
``invalid_reason`` attribute.

MLflow: one parent run per study (tag ``entry_point=tune``), opened before any trial, and one
child run per trial with the parameters a ``train_dynamic`` run would log, per-epoch metrics
(``val/acc``, ``val/acc_<tier>``, ``time/epoch_s``, ...) and ``architecture_trace.json``. Run
tag ``optuna_trial_number`` and trial attribute ``mlflow_run_id`` link the two; runs are named
``tune-<study>`` and ``tune-<study>-trial-<n>``; pruned trials end FINISHED with tags
``trial_state=PRUNED``, ``pruned`` (why) and ``pruned_at_epoch``. The study report
(``study/report.html``, CSV, PNG) is logged on the parent.

Storage: ``--storage`` takes an Optuna storage URL; by default ``optuna.db`` (SQLite) next to
the MLflow store. A study of the same ``--study-name`` is resumed: ``--n-trials`` is the total
it should reach. ``--workers N`` runs N worker processes on this machine; ``--worker true``
joins an existing study from any machine that reaches the same storage and tracking server.
With an RDB storage, a worker that dies stops its trial's heartbeat; after ``--grace-period``
seconds another worker fails the trial and queues a retry.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import warnings

import click
import mlflow
import optuna
from mlflow.entities import Metric
from optuna.trial import TrialState

from models.spec import resolve_spec
from pipeline import workers
from pipeline.budget.spec import parse_budget
from pipeline.cli import ConfigError, build_config, config_options, help_text
from pipeline.codec import flat_params, to_argv
from pipeline.curriculum.config import DynamicCurriculumConfig
from pipeline.curriculum.inputs import prepare_curriculum
from pipeline.data.config import DataConfig
from pipeline.data.dataset import Data
from pipeline.data.splits import load_data
from pipeline.difficulty.scores_table import find_scores_run
from pipeline.run.length import run_cost
from pipeline.run.logged_model import register_champion
from pipeline.tracking.artifacts import log_dataset, scratch_dir
from pipeline.tracking.errors import raise_terminated
from pipeline.tracking.guard import GuardedCommand, main_guard
from pipeline.tracking.runs import tracked_run
from pipeline.training.config import TrainConfig
from pipeline.training.stem import refuse_without_stem
from pipeline.tune import report, search_space
from pipeline.tune.config import CONFIGS, ENTRY_POINT, SpaceConfig, StudyConfig, definition
from pipeline.tune.study import (
    STUDY_DEFINITION,
    STUDY_EXPERIMENT,
    STUDY_PACING_NOTE,
    STUDY_PARENT,
    STUDY_SCORES,
    STUDY_SPACE,
    check_definition,
    check_parent,
    default_storage,
    make_sampler,
    make_storage,
    open_study,
    redact,
    study_space,
    wait_for_study,
)
from pipeline.tune.worker import Worker

WORKER_INDEX_ENV = "GCNN_TUNE_WORKER_INDEX"  # set on the processes --workers starts


# --- storage -----------------------------------------------------------------------------


# --- one worker ----------------------------------------------------------------------------


# --- the study -----------------------------------------------------------------------------


def resolve_scores(space_cfg: SpaceConfig, data: Data) -> tuple[str, tuple[str, ...], str]:
    """(scores run id or '', the pacings the study can search, a note on what was left out)."""
    requested = search_space.split_list(space_cfg.pacings)
    ref = space_cfg.scores_run.strip()
    if ref == "auto":
        ref = find_scores_run(data)
    elif ref == "none":
        ref = ""
    if ref:  # check it fits this data before any trial relies on it
        setup = prepare_curriculum(
            DynamicCurriculumConfig(scores_run=ref, pacing="none"), data, TrainConfig(), []
        )
        ref = setup.scores_run_id
    pacings = search_space.restrict_pacings(requested, bool(ref))
    note = ""
    if pacings != requested:
        note = (
            f"no score_difficulty run matches this data (digest {data.digest}), so pacing is fixed to "
            "none; run score_difficulty with the same data options to search curricula"
        )
        if not pacings:
            raise ConfigError(
                f"--pacings {space_cfg.pacings} needs difficulty scores: {note}, or include none"
            )
    return ref, pacings, note


def run_worker_processes(n: int, configs: tuple, storage_url: str) -> list[int]:
    """Start ``n`` worker processes of this study and wait for them; returns their exit codes."""
    data_cfg, train_cfg, space_cfg, study_cfg = configs
    # Each process is a worker of this study only: one process, no parent run of its own.
    study_cfg = dataclasses.replace(study_cfg, storage=storage_url, worker=True, workers=1)
    argv = to_argv(data_cfg, train_cfg, space_cfg, study_cfg)
    return workers.run_worker_processes("pipeline.tune", argv, n, WORKER_INDEX_ENV)


def log_report(study: optuna.Study, parent_run_id: str) -> dict[str, float]:
    """The study report and summary metrics on the parent run."""
    client = mlflow.MlflowClient()
    summary = report.summary(study)
    now = int(time.time() * 1000)
    step = int(summary["study/trials"])
    metrics = [Metric(k, v, now, step) for k, v in summary.items()]
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        metrics.append(Metric("trial/val_acc", float(t.values[0]), now, t.number))
    client.log_batch(parent_run_id, metrics=metrics)
    best = report.best_records(study)
    if best:
        client.set_tag(parent_run_id, "best_trials", ",".join(str(b["number"]) for b in best))
        client.set_tag(parent_run_id, "best_schedule", best[0]["schedule"] or "none")
    with scratch_dir() as tmp:
        report.build_report(study, tmp / "study")
        client.log_artifacts(parent_run_id, str(tmp / "study"), "study")
    return summary


def run(
    data_cfg: DataConfig, train_cfg: TrainConfig, space_cfg: SpaceConfig, study_cfg: StudyConfig
) -> optuna.Study:
    configs = (data_cfg, train_cfg, space_cfg, study_cfg)
    _check_options(*configs)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # each trial prints its own one line
    # Heartbeats, retries and metric names are "experimental" in Optuna 5; we rely on them knowingly.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    url = study_cfg.storage.strip() or default_storage(mlflow.get_tracking_uri())
    if WORKER_INDEX_ENV in os.environ:
        worker_index: int | None = int(os.environ[WORKER_INDEX_ENV])
    else:
        worker_index = None if study_cfg.worker else 0
    if study_cfg.worker:
        return _work_on(url, configs, worker_index)
    data = load_data(data_cfg)  # never the test split
    start = resolve_spec(space_cfg.start_spec, data.input_shape, data.num_classes)
    refuse_without_stem(start, train_cfg.whiten_bias_epochs)  # before a study is created
    study, space, scores_run_id, note = _open_study(url, configs, data, worker_index)
    parent = study.user_attrs.get(STUDY_PARENT)
    if parent:
        check_parent(study)
    # Resuming: reopen the study's parent run, unless `mlflow run` has opened a run for us.
    reopen = parent if parent and not os.environ.get("MLFLOW_RUN_ID") else None
    params = flat_params(*configs)
    params.update(
        storage=redact(url),
        pacings_searched=",".join(space.pacings),
        scores_run_id=scores_run_id or "none",
        start_spec_layers=str(len(start.layers)),
    )
    tags = {"study_name": study_cfg.study_name, "tune_role": "study", "optuna_storage": redact(url)}
    if note:
        tags["pacing_note"] = note
        click.echo(f"note: {note}", err=True)
    with tracked_run(
        ENTRY_POINT,
        params,
        run_name=study_cfg.run_name or f"tune-{study_cfg.study_name}",
        run_id=reopen,
        tags=tags,
        experiment_name=study_cfg.experiment_name,
    ) as active:
        this_run = active.info.run_id
        if not parent:
            study.set_user_attr(STUDY_EXPERIMENT, active.info.experiment_id)
            study.set_user_attr(STUDY_PARENT, this_run)
            parent = this_run
            log_dataset(data, context="tuning")
        elif parent != this_run:  # `mlflow run` resumed the study in a run of its own
            mlflow.set_tags({"tune_role": "resume", "study_parent_run_id": parent})
        click.echo(f"study {study_cfg.study_name!r} in {redact(url)}; parent run {parent}", err=True)
        codes = [0]
        if study_cfg.workers > 1:
            codes = run_worker_processes(study_cfg.workers, configs, url)
            # after workers 0 .. n-1, this process samples as one more, not as worker 0 again
            study.sampler = make_sampler(study_cfg, study_cfg.workers)
        if not any(code > 0 for code in codes):
            # Here, or after the workers: what a killed one left RUNNING is retried once its
            # heartbeat is stale, so the report never rests on trials still RUNNING.
            Worker(data, configs, study).work(study_cfg.n_trials)
        summary = log_report(study, parent)
        best_runs = [b["mlflow_run_id"] for b in report.best_records(study) if b["mlflow_run_id"]]
        champion = register_champion(best_runs, study_cfg.registry_name)
        if champion:
            mlflow.MlflowClient().set_tag(parent, "champion", champion)
            click.echo(f"the best trial's model is {champion}", err=True)
        if parent != this_run:
            mlflow.log_metrics(summary)
        if any(code > 0 for code in codes):  # killed workers (< 0) are what heartbeats are for
            # each failed worker was named above with its code, beside its own error
            failed = sum(code > 0 for code in codes)
            raise click.ClickException(
                f"{failed} of {len(codes)} workers failed; the report covers the trials that finished"
            )
    return study


def _check_options(
    data_cfg: DataConfig, train_cfg: TrainConfig, space_cfg: SpaceConfig, study_cfg: StudyConfig
) -> None:
    """Bad options fail before any trial."""
    train_cfg.validate()
    parse_budget(train_cfg.budget, train_cfg.epochs, run_cost)
    study_cfg.validate()
    if space_cfg.lr_factor < 1:
        raise ConfigError(f"--lr-factor must be >= 1, got {space_cfg.lr_factor}")


def _work_on(url: str, configs: tuple, worker_index: int | None) -> optuna.Study:
    """A worker (``--worker``): trials of a study another process created, in this process or
    in ``--workers`` processes of its own."""
    data_cfg, train_cfg, _, study_cfg = configs
    signal.signal(signal.SIGTERM, raise_terminated)  # a stopped worker closes its trial's run
    study = wait_for_study(url, study_cfg, train_cfg.epochs, worker_index)
    check_definition(study, definition(*configs))
    check_parent(study)
    if study_cfg.workers > 1:
        run_worker_processes(study_cfg.workers, configs, url)
        return study
    data = load_data(data_cfg)
    check_data(study, data)
    Worker(data, configs, study).work(study_cfg.n_trials)
    return study


def _open_study(
    url: str, configs: tuple, data: Data, worker_index: int | None
) -> tuple[optuna.Study, search_space.SearchSpace, str, str]:
    """The study, created with this run's search space and difficulty scores, or reopened with
    the ones it was created with; its space, scores run and pacing note."""
    _, train_cfg, space_cfg, study_cfg = configs
    scores_run_id, pacings, note = resolve_scores(space_cfg, data)
    space = search_space.SearchSpace(
        train_cfg.epochs,
        space_cfg.max_events,
        search_space.split_list(space_cfg.layer_types),
        pacings,
        train_cfg.lr / space_cfg.lr_factor,
        train_cfg.lr * space_cfg.lr_factor,
    ).validate()
    study, created = open_study(make_storage(url, study_cfg), study_cfg, train_cfg.epochs, worker_index)
    mine = definition(*configs)
    if created:
        for key, value in {
            STUDY_DEFINITION: mine,
            STUDY_SPACE: space.to_dict(),
            STUDY_SCORES: scores_run_id,
            STUDY_PACING_NOTE: note,
            "data_digest": data.digest,
        }.items():
            study.set_user_attr(key, value)
        return study, space, scores_run_id, note
    # the study keeps the space and scores it was created with
    check_definition(study, mine)
    check_data(study, data)
    space, scores_run_id = study_space(study), study.user_attrs.get(STUDY_SCORES, "")
    return study, space, scores_run_id, study.user_attrs.get(STUDY_PACING_NOTE, "")


def check_data(study: optuna.Study, data: Data) -> None:
    expected = study.user_attrs.get("data_digest")
    if expected and expected != data.digest:
        raise ConfigError(
            f"this data (digest {data.digest}) is not study {study.study_name!r}'s ({expected}): "
            "the same dataset, subset and split options are needed on every worker"
        )


@click.command(name=ENTRY_POINT, help=help_text(__doc__), cls=GuardedCommand)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    configs = tuple(build_config(cls, values) for cls in CONFIGS)
    study = run(*configs)
    if configs[-1].worker:
        return
    best = report.best_records(study)
    summary = report.summary(study)
    click.echo(
        f"study {study.study_name!r}: {int(summary['study/trials'])} trials "
        f"({int(summary['study/complete'])} complete, {int(summary['study/pruned'])} pruned, "
        f"{int(summary['study/failed'])} failed), {int(summary['study/epochs_trained'])} epochs trained"
    )
    for b in best:
        values_text = ", ".join(f"{k} {v:.4f}" for k, v in b["values"].items())
        click.echo(f"best trial {b['number']}: {values_text}; schedule {b['schedule'] or 'none'}")
