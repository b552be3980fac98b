"""The Optuna side of tune, shared by every worker process: storages (SQLite, PostgreSQL,
journal files) with heartbeats, samplers and pruners, the study's definition that workers must
agree on, and where the study's parent MLflow run is recorded."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from urllib.parse import urlparse

import click
import mlflow
import optuna
import sqlalchemy
from mlflow.exceptions import MlflowException
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from pipeline.cli import ConfigError, added_at_default, option_name
from pipeline.tracking.errors import FAILURE_TAG, one_line
from pipeline.tune import report, search_space
from pipeline.tune.config import OBJECTIVES, StudyConfig, definition_before_options

DIRECTIONS = {"val/acc": "maximize", "time/cumulative_s": "minimize"}  # per objective metric

# Study user attributes: what every worker must agree on, and where the parent run is.
STUDY_DEFINITION = "tune_definition"
STUDY_SPACE = "search_space"
STUDY_SCORES = "scores_run_id"
STUDY_PACING_NOTE = "pacing_note"
STUDY_PARENT = "mlflow_parent_run_id"
STUDY_EXPERIMENT = "mlflow_experiment_id"


def default_storage(tracking_uri: str) -> str:
    """``optuna.db`` beside the MLflow store: its SQLite file, or its local folder; else here."""
    parsed = urlparse(tracking_uri)
    if tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri[len("sqlite:///") :]).parent
    elif parsed.scheme in ("", "file"):
        folder = Path(parsed.path or tracking_uri).parent
    else:  # a tracking server: its store is elsewhere
        folder = Path.cwd()
    return f"sqlite:///{(folder / 'optuna.db').resolve()}"


def redact(url: str) -> str:
    """The storage URL without its password, for logs and run parameters."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


class StaleTrialCallback:
    """A dead worker's trial: queue a retry (while retries are left), then close its MLflow run as
    FAILED, unless its worker closed it KILLED (stopped by a signal: Optuna never heard)."""

    def __init__(self, max_retry: int):
        self.retry = RetryHeartbeatStaleTrialCallback(max_retry=max_retry)

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        # The retry first: until it is queued the trial is failed with nothing to take its
        # place (a study's seconds cell that looked then would find its reference lost), and a
        # tracking server that does not answer must not lose it.
        waiting = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        self.retry(study, trial)
        retried = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) > waiting
        what = "queued a retry" if retried else "its retries are spent"
        click.echo(f"trial {trial.number}: its worker stopped (no heartbeat); {what}", err=True)
        client = mlflow.MlflowClient()
        why = f"worker lost: no heartbeat within the grace period; {'retried' if retried else what}"
        try:
            for run_id in trial_run_ids(client, study, trial):
                if client.get_run(run_id).info.status == "KILLED":
                    continue  # its worker closed it on a Ctrl-C or SIGTERM: that end stands
                client.set_tag(run_id, "trial_state", "FAIL")
                client.set_tag(run_id, FAILURE_TAG, why)
                client.set_terminated(run_id, "FAILED")
        except (MlflowException, OSError) as err:
            click.echo(f"trial {trial.number}: its run could not be closed ({one_line(err)})", err=True)


def trial_run_ids(
    client: mlflow.MlflowClient, study: optuna.Study, trial: optuna.trial.FrozenTrial
) -> list[str]:
    """The trial's MLflow run: from its attribute, else by tag (a worker that died right after
    creating the run had no time to record its id)."""
    if trial.user_attrs.get(report.ATTR_RUN_ID):
        return [trial.user_attrs[report.ATTR_RUN_ID]]
    if STUDY_PARENT not in study.user_attrs:
        return []
    runs = client.search_runs(
        [study.user_attrs[STUDY_EXPERIMENT]],
        f"tags.optuna_trial_number = '{trial.number}' and "
        f"tags.`mlflow.parentRunId` = '{study.user_attrs[STUDY_PARENT]}' and attributes.status = 'RUNNING'",
    )
    return [run.info.run_id for run in runs]


def make_storage(url: str, cfg: StudyConfig) -> optuna.storages.BaseStorage:
    """An RDB storage with heartbeats (SQLite waits for locks instead of failing), or a journal
    file for ``journal:PATH`` (no heartbeats there: a dead worker's trial stays RUNNING)."""
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url[len("journal:") :]))
    # SQLite serialises writers: wait up to a minute for the lock rather than failing a trial.
    engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    error: Exception | None = None
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # heartbeat_interval is experimental
                return optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=cfg.heartbeat_interval,
                    grace_period=cfg.grace_period,
                    heartbeat_stale_trial_callback=StaleTrialCallback(cfg.max_retry),
                )
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError) as err:
            # Two processes creating the tables of a new database at once (one wins), or a
            # server that is briefly unreachable: try again.
            error = err
            time.sleep(1 + attempt)
        except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError) as err:
            raise ConfigError(f"--storage {redact(url)}: {one_line(err)}") from None
    raise ConfigError(f"--storage {redact(url)}: {one_line(error)}")


def make_sampler(cfg: StudyConfig, worker_index: int | None) -> optuna.samplers.BaseSampler:
    """Worker k of --workers samples with seed + k; a worker that joined on its own (index
    None) draws its own seed, or it would propose what the first process already did."""
    seed = cfg.sampler_seed + worker_index if cfg.sampler_seed >= 0 and worker_index is not None else None
    if cfg.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: running trials count as bad, so parallel workers do not all pick one point.
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def make_pruner(cfg: StudyConfig, epochs: int) -> optuna.pruners.BasePruner:
    if cfg.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=epochs, reduction_factor=3)
    if cfg.pruner == "median":
        # Steps are epochs trained. Not after the first: every trial is still the start network.
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=2)
    return optuna.pruners.NopPruner()


def check_definition(study: optuna.Study, mine: dict) -> None:
    """Refuse to work on ``study`` with other options than it was created with. An option the
    study's record lacks was added to tune since: the study is the same only at the value it
    trained with then (``added_at_default``). A study recorded with no definition is not checked."""
    theirs = study.user_attrs.get(STUDY_DEFINITION, {})
    defaults = definition_before_options()
    added = added_at_default(mine, theirs, defaults)
    for key, value in mine.items():
        if key in theirs and theirs[key] != value:
            raise ConfigError(
                f"{option_name(key)} {value} differs from study {study.study_name!r}, which was created "
                f"with {theirs[key]}: pass the study's options or choose another --study-name"
            )
        if theirs and key not in theirs and key in defaults and key not in added:
            raise ConfigError(
                f"{option_name(key)} {value}: study {study.study_name!r} was created before tune had "
                f"{option_name(key)}, so its trials trained with {defaults[key]}: pass that "
                "or choose another --study-name"
            )


def study_space(study: optuna.Study) -> search_space.SearchSpace:
    raw = study.user_attrs[STUDY_SPACE]
    return search_space.SearchSpace(
        raw["epochs"],
        raw["max_events"],
        tuple(raw["layer_types"]),
        tuple(raw["pacings"]),
        raw["lr_low"],
        raw["lr_high"],
    )


def counted(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a trial uses up the budget: all but those that died with their worker (their
    retry counts instead) or were interrupted."""
    if trial.state == TrialState.FAIL:
        return report.ATTR_FAIL in trial.user_attrs
    return True


def open_study(
    storage: optuna.storages.BaseStorage, study_cfg: StudyConfig, epochs: int, worker_index: int | None = 0
) -> tuple[optuna.Study, bool]:
    """Create the study, or load the existing one of that name; True when created here."""
    names = OBJECTIVES[study_cfg.objectives]
    kwargs = {
        "storage": storage,
        "study_name": study_cfg.study_name,
        "sampler": make_sampler(study_cfg, worker_index),
        "pruner": make_pruner(study_cfg, epochs),
    }
    try:
        study = optuna.create_study(directions=[DIRECTIONS[n] for n in names], **kwargs)
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(**kwargs)
        if len(study.directions) != len(names):
            raise ConfigError(
                f"study {study_cfg.study_name!r} has {len(study.directions)} objective(s), --objectives "
                f"{study_cfg.objectives} has {len(names)}: choose another --study-name"
            ) from None
        return study, False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # set_metric_names is experimental
        study.set_metric_names(list(names))
    return study, True


def wait_for_study(url: str, study_cfg: StudyConfig, epochs: int, worker_index: int | None) -> optuna.Study:
    """A worker's study, once it exists with a parent run (the first process creates both)."""
    storage = make_storage(url, study_cfg)
    deadline = time.monotonic() + study_cfg.wait_s
    while True:
        try:
            study = optuna.load_study(
                study_name=study_cfg.study_name,
                storage=storage,
                sampler=make_sampler(study_cfg, worker_index),
                pruner=make_pruner(study_cfg, epochs),
            )
            if STUDY_PARENT in study.user_attrs:
                return study
        except KeyError:  # no such study yet
            pass
        if time.monotonic() > deadline:
            raise ConfigError(
                f"study {study_cfg.study_name!r} did not appear with a parent run in {redact(url)} within "
                f"--wait-s {study_cfg.wait_s}: start `python -m pipeline.tune` (without --worker) first"
            )
        time.sleep(2)


def check_parent(study: optuna.Study) -> str:
    """The study's parent run, refused in one line where it is not in this tracking store or
    was deleted (MLflow would not reopen it: a traceback, or after every trial a report that
    cannot be logged)."""
    parent = study.user_attrs[STUDY_PARENT]
    try:
        run = mlflow.MlflowClient().get_run(parent)
    except mlflow.exceptions.MlflowException:
        raise ConfigError(
            f"study {study.study_name!r} logs to MLflow run {parent}, which is not in tracking store "
            f"{redact(mlflow.get_tracking_uri())}: use the study's tracking store or another --study-name"
        ) from None
    if run.info.lifecycle_stage == "deleted":
        raise ConfigError(
            f"study {study.study_name!r} logs to MLflow run {parent}, which is deleted; restore it "
            "(mlflow runs restore) or choose another --study-name"
        )
    return parent
