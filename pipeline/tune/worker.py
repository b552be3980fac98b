"""One tune worker: runs trials of a study in this process on data loaded once, each trial a
nested MLflow run that is closed by how the trial ended."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
import time
import warnings

import click
import mlflow
import optuna
import pandas as pd
import torch
from mlflow.entities import Metric, RunTag
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from models.schedule import GrowthError
from models.spec import resolve_spec
from pipeline.budget.plan import scaled_events
from pipeline.codec import flat_params, non_default_params
from pipeline.curriculum.checks import CurriculumError
from pipeline.curriculum.config import DynamicCurriculumConfig
from pipeline.curriculum.diet import curriculum_pruning
from pipeline.curriculum.pruning import PruningError
from pipeline.data.config import DataConfig
from pipeline.data.dataset import Data
from pipeline.device import pick_device, seed_everything
from pipeline.growth.config import GrowthConfig
from pipeline.run.length import RunLength, resolve_run_length
from pipeline.run.logged_model import log_classifier
from pipeline.run.plan import ExperimentPlan, stages
from pipeline.tracking.artifacts import scratch_dir
from pipeline.tracking.errors import FAILURE_TAG, one_line
from pipeline.tracking.params import log_params_shown
from pipeline.tracking.processes import owner_tags
from pipeline.tracking.runs import CODE_TAG, code_version
from pipeline.training import health
from pipeline.training.config import TrainConfig
from pipeline.training.epoch_loop import fit
from pipeline.training.loop import DivergenceError
from pipeline.training.probes import standard_probes
from pipeline.training.state import FitState, new_state
from pipeline.tune import report, search_space
from pipeline.tune.config import ENTRY_POINT, OBJECTIVES, SpaceConfig
from pipeline.tune.study import (
    STUDY_EXPERIMENT,
    STUDY_PARENT,
    STUDY_SCORES,
    counted,
    study_space,
)


class TrialRun:
    """A trial's MLflow child run, logged through the client so it works in any process.

    As a context manager it ends the run by how the trial ended: FINISHED (complete), FINISHED
    with tags ``trial_state=PRUNED`` and ``pruned`` (the reason, with the epoch; pruning is the
    study working as meant, not a crash), FAILED (an error) or KILLED (interrupted).
    """

    def __init__(
        self, parent_run_id: str, experiment_id: str, trial: optuna.Trial, tags: dict, study_name: str
    ):
        self.client = mlflow.MlflowClient()
        run = self.client.create_run(
            experiment_id,
            run_name=f"tune-{study_name}-trial-{trial.number}",
            tags={
                MLFLOW_PARENT_RUN_ID: parent_run_id,
                "entry_point": ENTRY_POINT,
                "tune_role": "trial",
                "optuna_trial_number": str(trial.number),
                **tags,
            },
        )
        self.run_id = run.info.run_id
        self.trial = trial

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()]
        )

    def log_params(self, params: dict[str, str]) -> None:
        log_params_shown(params, self.run_id)

    def log_model(self, model, data: Data, tta: str) -> None:
        """Log ``model`` as this trial's MLflow Model, so that tune can register the best."""
        # The fluent API logs models into the active run: make it this one (nested under the
        # study's parent when that is open in this process). Leaving the block ends the run
        # FINISHED, which __exit__ then confirms.
        nested = mlflow.active_run() is not None
        with mlflow.start_run(run_id=self.run_id, nested=nested), scratch_dir() as tmp:
            log_classifier(model, data, self.client.get_run(self.run_id).info.run_name, tmp, tta=tta)

    def set_tags(self, tags: dict[str, str]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def __enter__(self) -> TrialRun:
        return self

    def __exit__(self, kind, err, traceback) -> None:
        if err is None:
            state, status, tags = "COMPLETE", "FINISHED", {}
        elif isinstance(err, optuna.TrialPruned):
            # An invalid schedule is pruned before any epoch: pruned_at_epoch 0.
            epoch = self.trial.user_attrs.get(report.ATTR_PRUNED_AT, 0)
            state, status = "PRUNED", "FINISHED"
            tags = {"pruned": str(err), "pruned_reason": str(err), "pruned_at_epoch": str(epoch)}
        elif isinstance(err, Exception):
            state, status, tags = "FAIL", "FAILED", {FAILURE_TAG: one_line(err)}
        else:  # Ctrl-C or SIGTERM: the trial is retried later, not failed for good
            state, status, tags = "FAIL", "KILLED", {FAILURE_TAG: "interrupted"}
        self.set_tags({"trial_state": state, **tags})
        self.client.set_terminated(self.run_id, status)


STALE = (
    "failed as stale (no heartbeat) while this worker was stalled; not counted "
    "(retried while retries are left)"
)


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
        # On the device once for every trial (run_training moves it per run).
        self.on_device = data.to(self.device)
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.code_version = code_version()
        self.orphaned = False  # its trial was failed as stale while it stalled (``objective``)

    def objective(self, trial: optuna.Trial) -> float | tuple[float, float]:
        """``_objective``; a trial failed as stale meanwhile (``still_running``) ends as a prune,
        which Optuna logs without a traceback and cannot tell (``work`` expects that)."""
        try:
            value = self._objective(trial)
        except Exception:  # an error, or a pruned trial (a Ctrl-C leaves it to the stale check)
            self.orphaned = not still_running(self.study, trial)
            if not self.orphaned:
                raise
            raise optuna.TrialPruned(STALE) from None
        self.orphaned = not still_running(self.study, trial)
        if self.orphaned:
            raise optuna.TrialPruned(STALE)
        return value

    def _objective(self, trial: optuna.Trial) -> float | tuple[float, float]:
        frozen = next(
            t
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number == trial.number
        )
        retry_of = RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen)
        candidate = search_space.suggest(trial, self.space)
        train_cfg, growth_cfg, curriculum_cfg = trial_configs(
            self.train_cfg, self.space_cfg, self.scores_run_id, candidate
        )
        options = train_dynamic_options(self.data_cfg, train_cfg, growth_cfg, curriculum_cfg)
        # What a retry copied from the dead trial is overwritten first; the run id, known only
        # once the run exists, follows at once (the stale-trial callback can also find the run
        # by its trial-number tag, should a worker die in between).
        for key, value in {
            report.ATTR_RUN_ID: "",
            report.ATTR_WORKER: self.name,
            report.ATTR_SCHEDULE: candidate.schedule(),
            report.ATTR_TRAIN_OPTIONS: options,
            report.ATTR_EPOCHS: 0,
            report.ATTR_TRAIN_S: 0.0,
            report.ATTR_RETRY_OF: retry_of if retry_of is not None else "",
        }.items():
            trial.set_user_attr(key, value)
        tags = {"worker": self.name, CODE_TAG: self.code_version, **owner_tags()}
        if retry_of is not None:
            tags["retry_of"] = str(retry_of)
        with TrialRun(self.parent_run_id, self.experiment_id, trial, tags, self.study.study_name) as run:
            trial.set_user_attr(report.ATTR_RUN_ID, run.run_id)
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
                trial.set_user_attr(report.ATTR_FAIL, one_line(err))
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
        length = self._run_length(trial, run, candidate, train_cfg, curriculum_cfg)
        train_cfg, events, final, setup = length.train_cfg, length.events, length.final, length.setup
        trial.set_user_attr(report.ATTR_ARCH, search_space.describe(final))
        run.set_tags(
            {"final_spec": final.to_json(), "final_arch": search_space.describe(final), **setup.tags()}
        )
        run.log_params(length.params())
        plan = ExperimentPlan(train_cfg, self.on_device, events, growth_cfg, setup.curriculum, setup.pruner)
        seed_everything(train_cfg.seed, train_cfg.deterministic)
        state = new_state(self.start, train_cfg, self.device)
        val_tiers = setup.val_tiers
        prune = len(self.objectives) == 1

        def on_epoch(epoch: int, metrics: dict, fit_state: FitState) -> None:
            run.log_metrics(metrics, step=epoch)
            trial.set_user_attr(report.ATTR_EPOCHS, epoch + 1)
            trial.set_user_attr(report.ATTR_TRAIN_S, fit_state.cumulative_s)
            if prune:
                trial.report(metrics["val/acc"], epoch + 1)  # step: epochs trained (the resource)
                if trial.should_prune():
                    trial.set_user_attr(report.ATTR_PRUNED_AT, epoch + 1)
                    raise optuna.TrialPruned(
                        f"pruned after epoch {epoch + 1}: val/acc {metrics['val/acc']:.4f}"
                    )

        try:
            fit(
                state,
                self.on_device,
                train_cfg,
                plan,
                val_tiers=val_tiers,
                on_epoch=on_epoch,
                meter=length.meter(),
                probes=standard_probes(self.on_device, train_cfg),
            )
        except DivergenceError as err:  # these choices (typically the lr) cannot train: prune, say where
            reason = f"diverged: {err}"
            trial.set_user_attr(report.ATTR_FAIL, reason)
            trial.set_user_attr(report.ATTR_PRUNED_AT, err.epoch + 1)
            run.set_tags({"diverged_at": f"epoch {err.epoch}, step {err.step}", "health": "diverged"})
            raise optuna.TrialPruned(reason) from None
        finally:  # a pruned trial keeps what it trained: its trace and history so far
            if state.history:
                log_trial_artifacts(run, state, plan)
        _judge(trial, run, state, self.on_device.val.y, train_cfg.dip_margin)
        last = state.history[-1]
        run.log_metrics(
            {"final/val_acc": last["val/acc"], "time/total_s": state.cumulative_s}, step=state.epoch - 1
        )
        run.log_model(state.model, self.data, train_cfg.tta)
        click.echo(
            f"trial {trial.number}: val/acc {last['val/acc']:.4f} in {state.cumulative_s:.1f}s "
            f"[{candidate.schedule() or 'no growth'}; {candidate.pacing}; lr {candidate.lr:.3g}]"
        )
        values = {"val/acc": last["val/acc"], "time/cumulative_s": state.cumulative_s}
        result = tuple(values[name] for name in self.objectives)
        return result[0] if len(result) == 1 else result

    def _run_length(
        self,
        trial: optuna.Trial,
        run: TrialRun,
        candidate: search_space.Candidate,
        train_cfg: TrainConfig,
        curriculum_cfg: DynamicCurriculumConfig,
    ) -> RunLength:
        """The trial's run length with its events and curriculum; choices that cannot train
        (an invalid schedule, curriculum or pruning) prune the trial before it spends anything."""

        # The candidate's events are written for --epochs, like a user's schedule.
        events_at = functools.partial(scaled_events, candidate.events, train_cfg.epochs)
        try:
            built = stages(self.data, self.start, events_at, curriculum_cfg, train_cfg.epochs)
            return resolve_run_length(train_cfg, self.data, self.start, built)
        except (GrowthError, CurriculumError, PruningError) as err:  # never trained: say why, spend nothing
            reason = one_line(err)
            trial.set_user_attr(report.ATTR_INVALID, reason)
            run.set_tags({"invalid_reason": reason})
            raise optuna.TrialPruned(f"invalid: {reason}") from None

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
                try:
                    self.study.optimize(self.objective, n_trials=1)
                except ValueError:  # Optuna cannot tell a trial already failed as stale
                    if not self.orphaned:
                        raise
                    self.orphaned = False
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
    """The ``-P`` options (those off train_dynamic's defaults) that retrain a trial there;
    the machine-local ones left out."""
    options = non_default_params(data_cfg, train_cfg, growth_cfg, curriculum_cfg)
    return {k: v for k, v in options.items() if k not in ("device", "data_dir")}


def _judge(
    trial: optuna.Trial, run: TrialRun, state: FitState, val_y: torch.Tensor, dip_margin: float
) -> None:
    """The trial's health verdict, on its run; a dead network is no result: pruned, saying so."""
    verdict = health.judge(state, val_y, dip_margin)
    run.set_tags({**verdict.tags(), "stop_reason": state.stop_reason})
    run.log_metrics(verdict.metrics(), step=state.epoch - 1)
    if verdict.verdict == "collapsed":
        reason = verdict.describe()
        trial.set_user_attr(report.ATTR_FAIL, reason)
        trial.set_user_attr(report.ATTR_PRUNED_AT, state.epoch)
        raise optuna.TrialPruned(reason)


def trial_configs(
    train_cfg: TrainConfig, space_cfg: SpaceConfig, scores_run_id: str, candidate: search_space.Candidate
) -> tuple[TrainConfig, GrowthConfig, DynamicCurriculumConfig]:
    """The train_dynamic configs that train this candidate, so a trial can be rerun there."""
    train = dataclasses.replace(train_cfg, lr=candidate.lr)
    growth = GrowthConfig(
        start_spec=space_cfg.start_spec,
        schedule=candidate.schedule() or "none",
        growth_init=space_cfg.growth_init,
    )
    unused = DynamicCurriculumConfig()  # a pacing that does not use a or b keeps the default
    curriculum = DynamicCurriculumConfig(
        scores_run=scores_run_id or "none",
        pacing=candidate.pacing,
        pacing_a=unused.pacing_a if candidate.pacing_a is None else candidate.pacing_a,
        pacing_b=unused.pacing_b if candidate.pacing_b is None else candidate.pacing_b,
        difficulty_score=space_cfg.difficulty_score,
        prune=curriculum_pruning(candidate.pacing),
    )
    return train, growth, curriculum


def still_running(study: optuna.Study, trial: optuna.Trial) -> bool:
    """Whether ``trial`` is still RUNNING (taken as so where the storage cannot say: the trial's
    own end then stands). If not, it was failed as stale while its worker stalled past the grace
    period (a laptop asleep): said once, and its run closed FAILED, whatever the worker closed it
    as; the stale check queued its retry while retries are left."""
    try:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    except Exception as err:  # the trial's own end is what to report
        click.echo(f"trial {trial.number}: its state could not be read ({one_line(err)})", err=True)
        return True
    if trial.number in {t.number for t in running}:
        return True
    click.echo(f"trial {trial.number}: {STALE}", err=True)
    run_id = trial.user_attrs.get(report.ATTR_RUN_ID)
    try:
        if run_id:
            client = mlflow.MlflowClient()
            client.log_batch(run_id, tags=[RunTag("trial_state", "FAIL"), RunTag(FAILURE_TAG, STALE)])
            client.set_terminated(run_id, "FAILED")
    except MlflowException as err:
        click.echo(f"trial {trial.number}: its run could not be closed ({one_line(err)})", err=True)
    return False
