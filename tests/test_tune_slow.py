"""tune end to end on a small real subset: resuming a study by name, two worker processes on one
SQLite study with one of them killed mid-trial, and the many-machine path (PostgreSQL and an
MLflow tracking server on loopback, through scripts/distributed_tune.sh)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import mlflow
import optuna
import pytest
from click.testing import CliRunner

from pipeline import tune
from pipeline.data.splits import REFUSE_TEST_ENV
from pipeline.tune.study import STUDY_PARENT
from tests.conftest import REPO, subprocess_env

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")]
optuna.logging.set_verbosity(optuna.logging.WARNING)

SMALL = ["--subset", "600", "--epochs", "2", "--max-events", "2", "--sampler-seed", "0"]


def _study(tmp_path) -> optuna.Study:
    return optuna.load_study(study_name="tune", storage=f"sqlite:///{tmp_path / 'optuna.db'}")


def _children(parent_run_id: str) -> list:
    return mlflow.search_runs(
        search_all_experiments=True,
        filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
        output_format="list",
    )


def _assert_each_trial_once_in_mlflow(study: optuna.Study) -> dict:
    """Trial number <-> child run, both ways, exactly once; returns runs by trial number."""
    parent = study.user_attrs[STUDY_PARENT]
    children = _children(parent)
    by_number = {int(run.data.tags["optuna_trial_number"]): run for run in children}
    assert len(children) == len(by_number) == len(study.trials)
    for trial in study.trials:
        assert by_number[trial.number].info.run_id == trial.user_attrs["mlflow_run_id"]
    return by_number


def test_a_study_resumes_by_name_under_its_one_parent_run(tracking, tmp_path, monkeypatch):
    monkeypatch.setenv(REFUSE_TEST_ENV, "1")  # tune must never load the test split: it cannot here
    runner = CliRunner()
    first = runner.invoke(tune.main, [*SMALL, "--n-trials", "2", "--pruner", "none"])
    assert first.exit_code == 0, first.output
    again = runner.invoke(tune.main, [*SMALL, "--n-trials", "3", "--pruner", "none"])
    assert again.exit_code == 0, again.output
    study = _study(tmp_path)
    assert len(study.trials) == 3
    parents = mlflow.search_runs(
        search_all_experiments=True, filter_string="tags.tune_role = 'study'", output_format="list"
    )
    assert [p.info.run_id for p in parents] == [study.user_attrs[STUDY_PARENT]]
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.tags["entry_point"] == "tune"
    assert parent.data.params["pacings_searched"] == "none"  # no score_difficulty run in this store
    assert "no score_difficulty run matches" in parent.data.tags["pacing_note"]
    client = mlflow.MlflowClient()
    report = {a.path for a in client.list_artifacts(parent.info.run_id, "study")}
    assert {"study/report.html", "study/trials.csv", "study/best_trials.json"} <= report
    runs = _assert_each_trial_once_in_mlflow(study)
    for trial in study.trials:
        run = runs[trial.number]
        if trial.state.name == "COMPLETE":
            assert run.info.status == "FINISHED" and run.data.tags["trial_state"] == "COMPLETE"
            assert [m.step for m in client.get_metric_history(run.info.run_id, "val/acc")] == [0, 1]
            assert run.data.params["schedule"] == (trial.user_attrs["schedule"] or "none")
            assert "architecture_trace.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
        else:  # only a schedule that cannot be built may end otherwise, without training
            assert trial.state.name == "PRUNED" and "invalid_reason" in trial.user_attrs
            assert run.data.tags["trial_state"] == "PRUNED" and run.info.status == "FINISHED"
            assert run.data.tags["pruned"].startswith("invalid") and run.data.tags["pruned_at_epoch"] == "0"
    changed = runner.invoke(tune.main, [*SMALL, "--n-trials", "4", "--epochs", "3"])
    assert changed.exit_code == 2
    assert "error: --epochs 3 differs from study 'tune', which was created with 2" in changed.output


def test_a_study_whose_workers_were_all_killed_is_finished_by_its_parent(tracking, tmp_path, monkeypatch):
    """Both workers killed (by the OOM killer, say), one leaving its trial RUNNING with a stopped
    heartbeat: the parent retries it once stale and trains what is missing, so it does not end
    FINISHED on a report with a trial still RUNNING and none to take it."""
    from pipeline.tune import command

    def workers_killed(n, configs, url):
        study = optuna.load_study(study_name="tune", storage=url)
        trial = study.ask()  # taken by a worker, which then died
        study._storage.record_heartbeat(trial._trial_id)
        return [-9] * n

    monkeypatch.setattr(command, "run_worker_processes", workers_killed)
    args = [*SMALL, "--n-trials", "2", "--pruner", "none", "--workers", "2"]
    result = CliRunner().invoke(tune.main, [*args, "--heartbeat-interval", "1", "--grace-period", "2"])

    assert result.exit_code == 0, result.output
    study = _study(tmp_path)
    assert not [t for t in study.trials if t.state.name == "RUNNING"]
    assert study.trials[0].state.name == "FAIL"  # the dead worker's, retried
    assert [t.system_attrs.get("failed_trial") for t in study.trials].count(0) == 1
    assert sum(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials) >= 2
    assert mlflow.get_run(study.user_attrs[STUDY_PARENT]).info.status == "FINISHED"


@pytest.mark.parametrize("stalled_in", ["fit", "log_model"])
def test_a_worker_whose_trial_was_failed_as_stale_while_it_stalled_goes_on(
    tracking, tmp_path, monkeypatch, stalled_in
):
    """A worker that stalled past the grace period (a laptop asleep) finds its trial failed as
    stale by another, while training (its next write to the trial is refused) or after it (its
    value cannot be told): it says so, closes the trial's run FAILED and goes on to the next
    trial instead of a traceback."""
    from pipeline.tune import worker

    owner = worker.TrialRun if stalled_in == "log_model" else worker
    real, failed = getattr(owner, stalled_in), []

    def stalled_then(*args, **kwargs):
        if not failed:  # meanwhile another worker found the heartbeat stale and failed the trial
            study = _study(tmp_path)
            (running,) = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
            study._storage.set_trial_state_values(running._trial_id, optuna.trial.TrialState.FAIL)
            failed.append(running.number)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, stalled_in, stalled_then)
    result = CliRunner().invoke(tune.main, [*SMALL, "--n-trials", "2", "--pruner", "none"])

    assert result.exit_code == 0, result.output
    assert failed, f"no trial reached {stalled_in}: {result.output}"
    assert f"trial {failed[0]}: failed as stale (no heartbeat) while this worker was stalled" in result.stderr
    study = _study(tmp_path)
    orphan = study.trials[failed[0]]
    assert orphan.state.name == "FAIL"
    run = mlflow.get_run(orphan.user_attrs["mlflow_run_id"])
    assert run.info.status == "FAILED" and "while this worker was stalled" in run.data.tags["failure_reason"]
    assert sum(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials) >= 2
    assert mlflow.get_run(study.user_attrs[STUDY_PARENT]).info.status == "FINISHED"


def _mlflow_run_tune(tracking, log, *params: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "mlflow", "run", str(REPO), "-e", "tune", "--env-manager", "local"]
    for p in params:
        args += ["-P", p]
    return subprocess.Popen(args, env=subprocess_env(tracking), stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.timeout(420)
def test_two_workers_share_one_study_and_a_killed_workers_trial_is_retried(tracking, tmp_path):
    n_trials = 5
    with open(tmp_path / "tune.log", "w") as log:
        proc = _mlflow_run_tune(
            tracking, log, "subset=600", "epochs=2", "max_events=2", "sampler_seed=0", f"n_trials={n_trials}",
            "workers=2", "pruner=none", "heartbeat_interval=1", "grace_period=10",
        )  # fmt: skip
        # Watch MLflow (not optuna.db, which the study's first process is creating) for a
        # trial that has trained an epoch and is still running, then kill its worker.
        victim = None
        deadline = time.monotonic() + 240
        while victim is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            running = mlflow.search_runs(
                search_all_experiments=True,
                filter_string="tags.tune_role = 'trial' and attributes.status = 'RUNNING'",
                output_format="list",
            )
            victim = next((run for run in running if "val/acc" in run.data.metrics), None)
        assert victim is not None, "no trial started: " + (tmp_path / "tune.log").read_text()[-3000:]
        os.kill(int(victim.data.tags["worker"].rsplit(":", 1)[1]), signal.SIGKILL)  # mid-trial
        assert proc.wait(timeout=300) == 0, (tmp_path / "tune.log").read_text()[-3000:]
    output = (tmp_path / "tune.log").read_text()
    assert "database is locked" not in output
    study = _study(tmp_path)
    victim = study.trials[int(victim.data.tags["optuna_trial_number"])]
    assert victim.state.name == "FAIL"
    retries = [t for t in study.trials if t.system_attrs.get("failed_trial") == victim.number]
    assert len(retries) == 1 and retries[0].state.name in ("COMPLETE", "PRUNED")
    assert retries[0].params == victim.params and retries[0].user_attrs["retry_of"] == victim.number
    others = [t for t in study.trials if t.number != victim.number]
    assert all(t.state.name == "COMPLETE" or "invalid_reason" in t.user_attrs for t in others)
    assert n_trials <= len(others) <= n_trials + 1  # two workers may both start the last one
    assert len({t.user_attrs["worker"] for t in study.trials}) >= 2
    runs = _assert_each_trial_once_in_mlflow(study)
    dead = runs[victim.number]
    assert dead.info.status == "FAILED" and dead.data.tags["trial_state"] == "FAIL"
    assert "no heartbeat" in dead.data.tags["failure_reason"]
    assert runs[retries[0].number].data.tags["retry_of"] == str(victim.number)
    parent = mlflow.get_run(study.user_attrs[STUDY_PARENT])
    assert parent.info.status == "FINISHED" and parent.data.tags["mlflow.project.entryPoint"] == "tune"
    assert parent.data.metrics["study/trials"] == len(study.trials)


@pytest.mark.timeout(900)
def test_many_machines_share_a_study_through_postgresql_and_an_mlflow_server(tmp_path):
    result = subprocess.run(
        ["bash", "scripts/distributed_tune.sh", *SMALL, "--n-trials", "4"],
        cwd=REPO,
        # The script sets its own tracking server; no MLflow settings of other tests may leak in.
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
            "PYTHON": sys.executable,
        },
        capture_output=True,
        text=True,
        timeout=880,
    )
    # No skip: scripts/test installs PostgreSQL, so its absence is a failure of the set-up.
    assert result.returncode != 77, "PostgreSQL is absent: " + result.stderr.strip().splitlines()[-1]
    assert result.returncode == 0, result.stderr[-12000:]
    assert (
        "distributed tune OK: 4 trials" in result.stdout or "distributed tune OK: 5 trials" in result.stdout
    )
    # the study step on the same servers, its joining worker killed mid-cell
    assert "distributed study OK: 8 cells, each finished once" in result.stdout


def test_a_diverging_trial_is_pruned_with_where_it_diverged(tracking, tmp_path):
    result = CliRunner().invoke(
        tune.main, [*SMALL, "--n-trials", "1", "--lr", "1e6", "--lr-factor", "1", "--pruner", "none"]
    )
    assert result.exit_code == 0, result.output
    (trial,) = _study(tmp_path).trials
    assert trial.state.name == "PRUNED"
    assert trial.user_attrs["fail_reason"].startswith("diverged: loss became")
    assert trial.user_attrs["pruned_at_epoch"] == 1
    run = _assert_each_trial_once_in_mlflow(_study(tmp_path))[trial.number]
    assert run.data.tags["trial_state"] == "PRUNED"
    assert run.data.tags["diverged_at"].startswith("epoch 0, step ")
