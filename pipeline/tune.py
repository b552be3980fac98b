"""tune: an Optuna study over growth schedules, curriculum pacing and the learning rate.

    python -m pipeline.tune --subset 3000 --epochs 4 --n-trials 20 --workers 2
    mlflow run . -e tune --env-manager local -P n_trials=20 -P objectives=acc+time -P pruner=none

Each trial grows the ``--start-spec`` network by a searched schedule (how many events, the
epoch of each, the layer type each adds: see pipeline/search_space.py), fed by a searched
curriculum pacing at a searched learning rate, and trains ``--epochs`` epochs with
``pipeline.training.fit`` on data loaded once per worker. The test split is never loaded.
Objectives: validation accuracy, pruned per epoch by ``--pruner``, or validation accuracy and
wall-clock time (``--objectives acc+time``), whose Pareto front the report shows. A schedule
that cannot be built is pruned before training, with the reason in the trial's
``invalid_reason`` attribute.

MLflow: one parent run per study (tag ``entry_point=tune``), opened before any trial, and one
child run per trial with the parameters a ``train_dynamic`` run would log, per-epoch metrics
(``val/acc``, ``val/acc_<tier>``, ``time/epoch_s``, ...) and ``architecture_trace.json``. Run
tag ``optuna_trial_number`` and trial attribute ``mlflow_run_id`` link the two; pruned trials
end KILLED with tag ``trial_state=PRUNED``. The study report (``study/report.html``, CSV, PNG)
is logged on the parent.

Storage: ``--storage`` takes an Optuna storage URL; by default ``optuna.db`` (SQLite) next to
the MLflow store. A study of the same ``--study-name`` is resumed: ``--n-trials`` is the total
it should reach. ``--workers N`` runs N worker processes on this machine; ``--worker true``
joins an existing study from any machine that reaches the same storage and tracking server.
With an RDB storage, a worker that dies stops its trial's heartbeat; after ``--grace-period``
seconds another worker fails the trial and queues a retry.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import click
import mlflow
import optuna
import pandas as pd
import sqlalchemy
from mlflow.entities import Metric, Param, RunTag
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from models.growth import GrowthError
from models.spec import resolve_spec
from pipeline import search_space, study_report
from pipeline.cli import build_config, config_options, opt, option_name
from pipeline.curriculum import CurriculumError
from pipeline.data import Data, DataConfig, load_data
from pipeline.loop import DivergenceError, pick_device, seed_everything
from pipeline.plan import DynamicCurriculumConfig, ExperimentPlan, GrowthConfig
from pipeline.session import find_scores_run, prepare_curriculum
from pipeline.tracking import (
    FAILURE_TAG,
    Terminated,
    code_version,
    flat_params,
    log_dataset,
    main_guard,
    one_line,
    owner_tags,
    scratch_dir,
    tracked_run,
)
from pipeline.training import ConfigError, FitState, TrainConfig, fit, new_state

ENTRY_POINT = "tune"
REPO = Path(__file__).resolve().parents[1]
OBJECTIVES = {"acc": ("val/acc",), "acc+time": ("val/acc", "time/cumulative_s")}
DIRECTIONS = {"val/acc": "maximize", "time/cumulative_s": "minimize"}
PRUNERS = ("hyperband", "median", "none")
SAMPLERS = ("tpe", "random")
WORKER_INDEX_ENV = "GCNN_TUNE_WORKER_INDEX"  # set on the processes --workers starts
# Study user attributes: what every worker must agree on, and where the parent run is.
STUDY_DEFINITION = "tune_definition"
STUDY_SPACE = "search_space"
STUDY_SCORES = "scores_run_id"
STUDY_PACING_NOTE = "pacing_note"
STUDY_PARENT = "mlflow_parent_run_id"
STUDY_EXPERIMENT = "mlflow_experiment_id"


@dataclass(frozen=True)
class SpaceConfig:
    start_spec: str = opt("minimal", "architecture every trial starts from (name, JSON file or string)")
    growth_init: str = opt("preserve", "preserve (function-preserving where possible) or random")
    max_events: int = opt(4, "most growth events a trial's schedule may have (0 .. this many)")
    layer_types: str = opt(
        "conv,pool,dropout,fc,batchnorm,residual", "layer types a growth event may add (comma-separated)"
    )
    pacings: str = opt(
        "none,tiers,linear,root", "curriculum pacings to search; without difficulty scores only none is kept"
    )
    scores_run: str = opt("auto", "score_difficulty run id or runs:/ URI; auto: the newest one for this data")
    difficulty_score: str = opt("loss", "scores-table column that orders examples by difficulty")
    lr_factor: float = opt(
        4.0, "learning rate searched log-uniformly in [lr / lr_factor, lr * lr_factor]; 1: fixed"
    )


@dataclass(frozen=True)
class StudyConfig:
    study_name: str = opt("tune", "Optuna study name; an existing study of this name is resumed")
    storage: str = opt(
        "", "Optuna storage URL (sqlite:///f.db, postgresql://...); empty: optuna.db by the MLflow store"
    )
    n_trials: int = opt(20, "trials the study should reach in all, counting other workers' and earlier runs'")
    objectives: str = opt(
        "acc", "acc (validation accuracy, pruned) or acc+time (and wall-clock: Pareto front)"
    )
    pruner: str = opt(
        "hyperband", "hyperband, median or none; acc+time needs none (Optuna prunes one objective)"
    )
    sampler: str = opt("tpe", "tpe or random")
    sampler_seed: int = opt(-1, "sampler seed, -1 for a random one; worker k of --workers uses seed + k")
    workers: int = opt(1, "worker processes on this machine sharing the study")
    worker: bool = opt(False, "join an existing study as worker(s) only: no parent run or report of its own")
    heartbeat_interval: int = opt(20, "seconds between a running trial's heartbeats (RDB storages)")
    grace_period: int = opt(60, "seconds without a heartbeat after which a trial is failed and retried")
    max_retry: int = opt(2, "how often the trial of a worker that died is retried")
    wait_s: int = opt(300, "how long --worker waits for the study and its parent run to appear")
    run_name: str = opt("", "name of the study's parent MLflow run; empty for a generated one")

    def validate(self) -> StudyConfig:
        if self.objectives not in OBJECTIVES:
            raise ConfigError(f"--objectives {self.objectives!r}: use one of {', '.join(OBJECTIVES)}")
        if self.pruner not in PRUNERS:
            raise ConfigError(f"--pruner {self.pruner!r}: use one of {', '.join(PRUNERS)}")
        if self.pruner != "none" and self.objectives != "acc":
            raise ConfigError(
                f"--pruner {self.pruner} needs --objectives acc: Optuna cannot prune a study with "
                "two objectives; pass --pruner none"
            )
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"--sampler {self.sampler!r}: use one of {', '.join(SAMPLERS)}")
        for name in ("workers", "heartbeat_interval", "grace_period"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.grace_period <= self.heartbeat_interval:
            raise ConfigError(
                f"--grace-period {self.grace_period} must exceed --heartbeat-interval "
                f"{self.heartbeat_interval}, or live trials would be failed"
            )
        if self.n_trials < 0 or self.max_retry < 0 or self.wait_s < 0:
            raise ConfigError("--n-trials, --max-retry and --wait-s must be 0 or more")
        if not self.study_name.strip():
            raise ConfigError("--study-name must not be empty")
        return self


CONFIGS = (DataConfig, TrainConfig, SpaceConfig, StudyConfig)


# --- storage -----------------------------------------------------------------------------


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
    """A dead worker's trial: close its MLflow run as FAILED, then queue a retry."""

    def __init__(self, max_retry: int):
        self.retry = RetryHeartbeatStaleTrialCallback(max_retry=max_retry)

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        client = mlflow.MlflowClient()
        for run_id in trial_run_ids(client, study, trial):
            client.set_tag(run_id, "trial_state", "FAIL")
            client.set_tag(run_id, FAILURE_TAG, "worker lost: no heartbeat within the grace period; retried")
            client.set_terminated(run_id, "FAILED")
        click.echo(f"trial {trial.number}: its worker stopped (no heartbeat); queued a retry", err=True)
        self.retry(study, trial)


def trial_run_ids(
    client: mlflow.MlflowClient, study: optuna.Study, trial: optuna.trial.FrozenTrial
) -> list[str]:
    """The trial's MLflow run: from its attribute, else by tag (a worker that died right after
    creating the run had no time to record its id)."""
    if trial.user_attrs.get(study_report.ATTR_RUN_ID):
        return [trial.user_attrs[study_report.ATTR_RUN_ID]]
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


def definition(
    data_cfg: DataConfig, train_cfg: TrainConfig, space_cfg: SpaceConfig, study_cfg: StudyConfig
) -> dict:
    """The options every worker of a study must share (machine-local ones left out)."""
    local = {"data_dir", "device", "eval_batch_size", "scores_run"}
    shared = {"objectives", "pruner", "sampler"}
    out = {}
    for cfg in (data_cfg, train_cfg, space_cfg):
        out.update({k: v for k, v in dataclasses.asdict(cfg).items() if k not in local})
    out.update({k: v for k, v in dataclasses.asdict(study_cfg).items() if k in shared})
    return out


def check_definition(study: optuna.Study, mine: dict) -> None:
    theirs = study.user_attrs.get(STUDY_DEFINITION, {})
    for key, value in mine.items():
        if key in theirs and theirs[key] != value:
            raise ConfigError(
                f"{option_name(key)} {value} differs from study {study.study_name!r}, which was created "
                f"with {theirs[key]}: pass the study's options or choose another --study-name"
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
        return study_report.ATTR_FAIL in trial.user_attrs
    return True


# --- one worker ----------------------------------------------------------------------------


class TrialRun:
    """A trial's MLflow child run, logged through the client so it works in any process.

    As a context manager it ends the run by how the trial ended: FINISHED (complete), KILLED
    with tag ``trial_state=PRUNED`` (pruned or invalid), FAILED (an error) or KILLED (interrupted).
    """

    def __init__(self, parent_run_id: str, experiment_id: str, trial: optuna.Trial, tags: dict):
        self.client = mlflow.MlflowClient()
        run = self.client.create_run(
            experiment_id,
            run_name=f"trial-{trial.number}",
            tags={
                MLFLOW_PARENT_RUN_ID: parent_run_id,
                "entry_point": ENTRY_POINT,
                "tune_role": "trial",
                "optuna_trial_number": str(trial.number),
                **tags,
            },
        )
        self.run_id = run.info.run_id

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()]
        )

    def log_params(self, params: dict[str, str]) -> None:
        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[start : start + 100])

    def set_tags(self, tags: dict[str, str]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def __enter__(self) -> TrialRun:
        return self

    def __exit__(self, kind, err, traceback) -> None:
        if err is None:
            state, status, tags = "COMPLETE", "FINISHED", {}
        elif isinstance(err, optuna.TrialPruned):
            state, status, tags = "PRUNED", "KILLED", {"pruned_reason": str(err)}
        elif isinstance(err, Exception):
            state, status, tags = "FAIL", "FAILED", {FAILURE_TAG: one_line(err)}
        else:  # Ctrl-C or SIGTERM: the trial is retried later, not failed for good
            state, status, tags = "FAIL", "KILLED", {FAILURE_TAG: "interrupted"}
        self.set_tags({"trial_state": state, **tags})
        self.client.set_terminated(self.run_id, status)


class Worker:
    """Runs trials of one study in this process, on data loaded once."""

    def __init__(self, data: Data, configs: tuple, study: optuna.Study):
        self.data_cfg, self.train_cfg, self.space_cfg, self.study_cfg = configs
        self.study = study
        self.space = study_space(study)
        self.scores_run_id = study.user_attrs.get(STUDY_SCORES, "")
        self.parent_run_id = study.user_attrs[STUDY_PARENT]
        self.experiment_id = study.user_attrs[STUDY_EXPERIMENT]
        self.objectives = OBJECTIVES[self.study_cfg.objectives]
        self.data = data
        self.start = resolve_spec(self.space_cfg.start_spec, data.input_shape, data.num_classes)
        self.device = pick_device(self.train_cfg.device)
        # On the device once for every trial (train_and_log moves it per run).
        self.on_device = Data(
            data.name,
            data.classes,
            data.train.to(self.device),
            data.val.to(self.device),
            None,
            data.source_digest,
            data.digest,
        )
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.code_version = code_version()

    def configs(
        self, candidate: search_space.Candidate
    ) -> tuple[TrainConfig, GrowthConfig, DynamicCurriculumConfig]:
        """The train_dynamic configs that train this candidate, so a trial can be rerun there."""
        train = dataclasses.replace(self.train_cfg, lr=candidate.lr)
        growth = GrowthConfig(
            start_spec=self.space_cfg.start_spec,
            schedule=candidate.schedule() or "none",
            growth_init=self.space_cfg.growth_init,
        )
        unused = DynamicCurriculumConfig()  # a pacing that does not use a or b keeps the default
        curriculum = DynamicCurriculumConfig(
            scores_run=self.scores_run_id or "none",
            pacing=candidate.pacing,
            pacing_a=unused.pacing_a if candidate.pacing_a is None else candidate.pacing_a,
            pacing_b=unused.pacing_b if candidate.pacing_b is None else candidate.pacing_b,
            difficulty_score=self.space_cfg.difficulty_score,
        )
        return train, growth, curriculum

    def objective(self, trial: optuna.Trial) -> float | tuple[float, float]:
        frozen = next(
            t
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number == trial.number
        )
        retry_of = RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen)
        candidate = search_space.suggest(trial, self.space)
        train_cfg, growth_cfg, curriculum_cfg = self.configs(candidate)
        options = train_dynamic_options(self.data_cfg, train_cfg, growth_cfg, curriculum_cfg)
        # What a retry copied from the dead trial is overwritten first; the run id, known only
        # once the run exists, follows at once (the stale-trial callback can also find the run
        # by its trial-number tag, should a worker die in between).
        for key, value in {
            study_report.ATTR_RUN_ID: "",
            study_report.ATTR_WORKER: self.name,
            study_report.ATTR_SCHEDULE: candidate.schedule(),
            study_report.ATTR_TRAIN_OPTIONS: options,
            study_report.ATTR_EPOCHS: 0,
            study_report.ATTR_TRAIN_S: 0.0,
            study_report.ATTR_RETRY_OF: retry_of if retry_of is not None else "",
        }.items():
            trial.set_user_attr(key, value)
        tags = {"worker": self.name, "code_version": self.code_version, **owner_tags()}
        if retry_of is not None:
            tags["retry_of"] = str(retry_of)
        with TrialRun(self.parent_run_id, self.experiment_id, trial, tags) as run:
            trial.set_user_attr(study_report.ATTR_RUN_ID, run.run_id)
            params = flat_params(self.data_cfg, train_cfg, growth_cfg, curriculum_cfg)
            params.update({k: v for k, v in flat_params(trial.params).items() if k not in params})
            params.update(data_digest=self.data.digest, data_size_train=str(len(self.data.train)))
            run.log_params(params)
            try:
                return self._train(trial, run, candidate, train_cfg, growth_cfg, curriculum_cfg)
            except optuna.TrialPruned as pruned:
                click.echo(f"trial {trial.number}: {pruned} [{candidate.schedule() or 'no growth'}]")
                raise
            except Exception as err:  # counts against the budget: the same choices would fail again
                trial.set_user_attr(study_report.ATTR_FAIL, one_line(err))
                raise

    def _train(
        self,
        trial: optuna.Trial,
        run: TrialRun,
        candidate: search_space.Candidate,
        train_cfg: TrainConfig,
        growth_cfg: GrowthConfig,
        curriculum_cfg: DynamicCurriculumConfig,
    ) -> float | tuple[float, float]:
        try:
            final = search_space.check(candidate, self.start, train_cfg.epochs)
            setup = prepare_curriculum(curriculum_cfg, self.data, train_cfg, list(candidate.events))
        except (GrowthError, CurriculumError) as err:  # never trained: say why, spend nothing
            reason = one_line(err)
            trial.set_user_attr(study_report.ATTR_INVALID, reason)
            run.set_tags({"invalid_reason": reason})
            raise optuna.TrialPruned(f"invalid: {reason}") from None
        trial.set_user_attr(study_report.ATTR_ARCH, search_space.describe(final))
        run.set_tags(
            {"final_spec": final.to_json(), "final_arch": search_space.describe(final), **setup.tags()}
        )
        plan = ExperimentPlan(train_cfg, self.on_device, list(candidate.events), growth_cfg, setup.curriculum)
        seed_everything(train_cfg.seed, train_cfg.deterministic)
        state = new_state(self.start, train_cfg, self.device)
        val_tiers = setup.val_tiers
        prune = len(self.objectives) == 1

        def on_epoch(epoch: int, metrics: dict, fit_state: FitState) -> None:
            run.log_metrics(metrics, step=epoch)
            trial.set_user_attr(study_report.ATTR_EPOCHS, epoch + 1)
            trial.set_user_attr(study_report.ATTR_TRAIN_S, fit_state.cumulative_s)
            if prune:
                trial.report(metrics["val/acc"], epoch + 1)  # step: epochs trained (the resource)
                if trial.should_prune():
                    trial.set_user_attr(study_report.ATTR_PRUNED_AT, epoch + 1)
                    raise optuna.TrialPruned(
                        f"pruned after epoch {epoch + 1}: val/acc {metrics['val/acc']:.4f}"
                    )

        try:
            fit(state, self.on_device, train_cfg, plan, val_tiers=val_tiers, on_epoch=on_epoch)
        except DivergenceError as err:  # these choices (typically the lr) cannot train: prune, say where
            reason = f"diverged: {err}"
            trial.set_user_attr(study_report.ATTR_FAIL, reason)
            trial.set_user_attr(study_report.ATTR_PRUNED_AT, err.epoch + 1)
            run.set_tags({"diverged_at": f"epoch {err.epoch}, step {err.step}"})
            raise optuna.TrialPruned(reason) from None
        finally:  # a pruned trial keeps what it trained: its trace and history so far
            if state.history:
                log_trial_artifacts(run, state, plan)
        last = state.history[-1]
        run.log_metrics(
            {"final/val_acc": last["val/acc"], "time/total_s": state.cumulative_s}, step=state.epoch - 1
        )
        click.echo(
            f"trial {trial.number}: val/acc {last['val/acc']:.4f} in {state.cumulative_s:.1f}s "
            f"[{candidate.schedule() or 'no growth'}; {candidate.pacing}; lr {candidate.lr:.3g}]"
        )
        values = {"val/acc": last["val/acc"], "time/cumulative_s": state.cumulative_s}
        result = tuple(values[name] for name in self.objectives)
        return result[0] if len(result) == 1 else result

    def work(self, n_trials: int) -> int:
        """Run trials until the study holds ``n_trials`` counted trials and none is left
        RUNNING by a worker that may have died; returns how many this worker ran."""
        heartbeat = not self.study_cfg.storage.startswith("journal:")  # RDB storages beat
        ran = 0
        while True:
            trials = self.study.get_trials(deepcopy=False)
            waiting = any(t.state == TrialState.WAITING for t in trials)
            if waiting or sum(counted(t) for t in trials) < n_trials:
                # optimize (not ask/tell): it beats the heartbeat and fails stale trials first.
                self.study.optimize(self.objective, n_trials=1)
                ran += 1
                continue
            if heartbeat and any(t.state == TrialState.RUNNING for t in trials):
                # Another worker's trial is running; if that worker died, its heartbeat stops
                # and the trial is retried, so wait for one or the other.
                time.sleep(min(5, self.study_cfg.heartbeat_interval))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    optuna.storages.fail_stale_trials(self.study)
                continue
            return ran


def log_trial_artifacts(run: TrialRun, state: FitState, plan: ExperimentPlan) -> None:
    run.client.log_text(
        run.run_id, json.dumps(state.trace.to_dict(), indent=2, sort_keys=True), "architecture_trace.json"
    )
    run.client.log_text(run.run_id, json.dumps(plan.to_dict(), indent=2, sort_keys=True), "plan.json")
    with scratch_dir() as tmp:
        pd.DataFrame(state.history).to_csv(tmp / "history.csv", index=False)
        run.client.log_artifact(run.run_id, str(tmp / "history.csv"))


def train_dynamic_options(
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    growth_cfg: GrowthConfig,
    curriculum_cfg: DynamicCurriculumConfig,
) -> dict[str, str]:
    """The ``-P`` options (those off train_dynamic's defaults) that retrain a trial there."""
    options = {}
    for cfg in (data_cfg, train_cfg, growth_cfg, curriculum_cfg):
        default = type(cfg)()
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            if value != getattr(default, f.name) and f.name not in ("device", "data_dir"):
                options[f.name] = str(value).lower() if isinstance(value, bool) else str(value)
    return options


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
    parent = study.user_attrs[STUDY_PARENT]
    try:
        mlflow.MlflowClient().get_run(parent)
    except mlflow.exceptions.MlflowException:
        raise ConfigError(
            f"study {study.study_name!r} logs to MLflow run {parent}, which is not in tracking store "
            f"{redact(mlflow.get_tracking_uri())}: use the study's tracking store or another --study-name"
        ) from None
    return parent


def worker_args(configs: tuple) -> list[str]:
    """Command-line arguments that give a worker process the same options, as a worker."""
    args = []
    for cfg in configs:
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            if f.name == "worker":
                value = True
            elif f.name == "workers":
                value = 1
            args += [option_name(f.name), str(value).lower() if isinstance(value, bool) else str(value)]
    return args


def run_worker_processes(n: int, configs: tuple, storage_url: str) -> list[int]:
    """Start ``n`` worker processes of this study and wait for them; returns their exit codes.
    Ctrl-C or SIGTERM here stops them (their running trials end KILLED and are retried later)."""
    data_cfg, train_cfg, space_cfg, study_cfg = configs
    study_cfg = dataclasses.replace(study_cfg, storage=storage_url)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_RUN_ID"}
    env["MLFLOW_TRACKING_URI"] = mlflow.get_tracking_uri()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    command = [
        sys.executable,
        "-m",
        "pipeline.tune",
        *worker_args((data_cfg, train_cfg, space_cfg, study_cfg)),
    ]
    # Share the cores rather than oversubscribe them: n workers each with every core thrash.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // n)))
    procs = [subprocess.Popen(command, env={**env, WORKER_INDEX_ENV: str(k)}) for k in range(n)]
    try:
        codes = [p.wait() for p in procs]
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    for p, code in zip(procs, codes):
        if code < 0:
            click.echo(
                f"worker {p.pid} was killed by signal {-code}; a trial it left running is retried "
                "once its heartbeat is stale",
                err=True,
            )
    return codes


def log_report(study: optuna.Study, parent_run_id: str) -> dict[str, float]:
    """The study report and summary metrics on the parent run."""
    client = mlflow.MlflowClient()
    summary = study_report.summary(study)
    now = int(time.time() * 1000)
    step = int(summary["study/trials"])
    metrics = [Metric(k, v, now, step) for k, v in summary.items()]
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        metrics.append(Metric("trial/val_acc", float(t.values[0]), now, t.number))
    client.log_batch(parent_run_id, metrics=metrics)
    best = study_report.best_records(study)
    if best:
        client.set_tag(parent_run_id, "best_trials", ",".join(str(b["number"]) for b in best))
        client.set_tag(parent_run_id, "best_schedule", best[0]["schedule"] or "none")
    with scratch_dir() as tmp:
        study_report.build_report(study, tmp / "study")
        client.log_artifacts(parent_run_id, str(tmp / "study"), "study")
    return summary


def _raise_terminated(signum, frame):
    raise Terminated()


def run(
    data_cfg: DataConfig, train_cfg: TrainConfig, space_cfg: SpaceConfig, study_cfg: StudyConfig
) -> optuna.Study:
    train_cfg.validate()
    study_cfg.validate()
    if space_cfg.lr_factor < 1:
        raise ConfigError(f"--lr-factor must be >= 1, got {space_cfg.lr_factor}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # each trial prints its own one line
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # scores load per trial
    # Heartbeats, retries and metric names are "experimental" in Optuna 5; we rely on them knowingly.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    url = study_cfg.storage.strip() or default_storage(mlflow.get_tracking_uri())
    if WORKER_INDEX_ENV in os.environ:
        worker_index: int | None = int(os.environ[WORKER_INDEX_ENV])
    else:
        worker_index = None if study_cfg.worker else 0
    configs = (data_cfg, train_cfg, space_cfg, study_cfg)
    if study_cfg.worker:
        signal.signal(signal.SIGTERM, _raise_terminated)  # a stopped worker closes its trial's run
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

    data = load_data(data_cfg)  # never the test split
    start = resolve_spec(space_cfg.start_spec, data.input_shape, data.num_classes)
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
    else:  # the study keeps the space and scores it was created with
        check_definition(study, mine)
        check_data(study, data)
        space, scores_run_id = study_space(study), study.user_attrs.get(STUDY_SCORES, "")
        note = study.user_attrs.get(STUDY_PACING_NOTE, "")
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
        ENTRY_POINT, params, run_name=study_cfg.run_name or None, run_id=reopen, tags=tags
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
        if study_cfg.workers > 1:
            codes = run_worker_processes(study_cfg.workers, configs, url)
        else:
            Worker(data, configs, study).work(study_cfg.n_trials)
            codes = [0]
        summary = log_report(study, parent)
        if parent != this_run:
            mlflow.log_metrics(summary)
        if any(code > 0 for code in codes):  # killed workers (< 0) are what heartbeats are for
            raise click.ClickException(f"a worker failed (exit codes {codes}); its error is printed above")
    return study


def check_data(study: optuna.Study, data: Data) -> None:
    expected = study.user_attrs.get("data_digest")
    if expected and expected != data.digest:
        raise ConfigError(
            f"this data (digest {data.digest}) is not study {study.study_name!r}'s ({expected}): "
            "the same dataset, subset and split options are needed on every worker"
        )


@click.command(name=ENTRY_POINT, help=__doc__)
@config_options(*CONFIGS)
@main_guard
def main(**values) -> None:
    configs = tuple(build_config(cls, values) for cls in CONFIGS)
    study = run(*configs)
    if configs[-1].worker:
        return
    best = study_report.best_records(study)
    summary = study_report.summary(study)
    click.echo(
        f"study {study.study_name!r}: {int(summary['study/trials'])} trials "
        f"({int(summary['study/complete'])} complete, {int(summary['study/pruned'])} pruned, "
        f"{int(summary['study/failed'])} failed), {int(summary['study/epochs_trained'])} epochs trained"
    )
    for b in best:
        values_text = ", ".join(f"{k} {v:.4f}" for k, v in b["values"].items())
        click.echo(f"best trial {b['number']}: {values_text}; schedule {b['schedule'] or 'none'}")


if __name__ == "__main__":
    main()
