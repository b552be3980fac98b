"""The study's queue on a real Optuna storage (SQLite), with a stand-in for training: a cell the
grid no longer has is not trained, a cell whose trial another worker failed as stale while it
trained does not stop the worker that trained it, nor count, and a dead worker's cell is queued
again whatever it left behind (a deferred mark, a run on a tracking server that does not answer),
its run closed FAILED unless its worker closed it; a worker told to stop (``--stop-after-hours``)
finishes its cell and takes no other, and the study's own process waits for the cells training
elsewhere first; a study whose parent run was deleted is refused."""

from __future__ import annotations

import mlflow
import pytest
from optuna.trial import TrialState

from pipeline.cli import ConfigError
from pipeline.study import grid, queue
from pipeline.study.config import StudyConfig
from pipeline.study.grid import Budget
from pipeline.tracking.errors import FAILURE_TAG
from pipeline.tune.report import ATTR_RUN_ID
from pipeline.tune.study import STUDY_PARENT, StaleTrialCallback, check_parent


def _queue(tmp_path):
    cfg = StudyConfig(study_name="q", heartbeat_interval=1, grace_period=2)
    return queue.open_queue(f"sqlite:///{tmp_path / 'optuna.db'}", cfg, create=True)


def test_a_cell_queued_by_an_earlier_grid_is_not_trained_or_counted(tmp_path):
    study = _queue(tmp_path)
    earlier = grid.cells(grid.parse_arms("static,dynamic"), (Budget("epochs"),), (1,))
    queue.enqueue_missing(study, earlier)
    now = [c for c in earlier if c.arm == "static"]
    trained, said = [], []

    def train(cell, number, reference):
        trained.append(cell.key)
        return f"run-{cell.key}", 0.5

    assert queue.work(study, train, now, poll_s=0.01, log=said.append) == []
    assert trained == ["static@epochs#1"]
    assert queue.finished(study, now) == {"static@epochs#1": "run-static@epochs#1"}
    assert any(line.startswith("cell dynamic@epochs#1: not in this study's grid") for line in said)


def test_a_cell_failed_as_stale_while_it_trained_leaves_its_worker_going(tmp_path):
    study = _queue(tmp_path)
    cells = grid.cells(grid.parse_arms("static"), (Budget("epochs"),), (1, 2))
    queue.enqueue_missing(study, cells)
    said = []

    def train(cell, number, reference):
        if cell.seed == 1:  # meanwhile another worker found its heartbeat stale and failed it
            trial = next(t for t in study.get_trials() if t.number == number)
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        return f"run-{cell.key}", 0.5

    assert queue.work(study, train, cells, poll_s=0.01, log=said.append) == []
    assert queue.finished(study, cells) == {
        "static@epochs#2": "run-static@epochs#2"
    }  # the orphan does not count
    assert any(
        "static@epochs#1: trained (run run-static@epochs#1) after its trial was failed" in s for s in said
    )


def test_a_worker_told_to_stop_finishes_its_cell_and_takes_no_other(tmp_path):
    study = _queue(tmp_path)
    cells = grid.cells(grid.parse_arms("static"), (Budget("epochs"),), (1, 2, 3))
    queue.enqueue_missing(study, cells)
    trained, said = [], []

    def train(cell, number, reference):
        trained.append(cell.key)
        return f"run-{cell.key}", 0.5

    def stop_taking():  # the clock runs out while the first cell trains
        return len(trained) >= 1

    assert queue.work(study, train, cells, poll_s=0.01, log=said.append, stop_taking=stop_taking) == []
    assert trained == ["static@epochs#1"]
    assert queue.queued(study) == {"static@epochs#2", "static@epochs#3"}
    assert [line for line in said if "--stop-after-hours has passed" in line] != []
    assert queue.work(study, train, cells, poll_s=0.01) == []  # without a stop, what is left
    assert sorted(queue.finished(study, cells)) == [c.key for c in cells]
    assert queue.queued(study) == set()


def test_the_studys_own_process_told_to_stop_waits_for_cells_training_elsewhere(tmp_path):
    study = _queue(tmp_path)
    cells = grid.cells(grid.parse_arms("static"), (Budget("epochs"),), (1, 2))
    queue.enqueue_missing(study, cells)
    elsewhere = study.ask()  # another worker took the first cell and trains it
    assert elsewhere.user_attrs[queue.CELL_ATTR] == "static@epochs#1"
    polls = []

    def stop_taking():  # stopped from the start; the other worker finishes on the third look
        polls.append(1)
        if len(polls) == 3:
            elsewhere.set_user_attr(ATTR_RUN_ID, "run-elsewhere")
            study.tell(elsewhere, 0.5)
        return True

    def train(cell, number, reference):
        raise AssertionError("told to stop, it takes no cell")

    assert queue.work(study, train, cells, poll_s=0.01, stop_taking=stop_taking, wait_after_stop=True) == []
    assert len(polls) >= 4  # it looked again after the other cell finished, then left
    assert queue.finished(study, cells) == {"static@epochs#1": "run-elsewhere"}
    assert queue.queued(study) == {"static@epochs#2"}


def test_a_retry_that_inherited_a_deferred_mark_counts_when_it_trains(tmp_path):
    # A worker that died between marking its seconds cell deferred and putting it back left
    # the mark on the trial; the stale retry copies the trial's attributes.
    study = _queue(tmp_path)
    cells = grid.cells(grid.parse_arms("static"), (Budget("epochs"),), (1,))
    study.enqueue_trial({}, user_attrs={queue.CELL_ATTR: cells[0].key, queue.DEFERRED_ATTR: True})
    assert queue.work(study, lambda cell, n, ref: (f"run-{cell.key}", 0.5), cells, poll_s=0.01) == []
    assert queue.finished(study, cells) == {"static@epochs#1": "run-static@epochs#1"}


def test_a_dead_workers_cell_is_queued_again_though_its_run_cannot_be_closed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    study = _queue(tmp_path)
    key = "static@epochs#1"
    study.enqueue_trial({}, user_attrs={queue.CELL_ATTR: key, ATTR_RUN_ID: "0123456789abcdef"})
    trial = study.ask()  # its worker takes it, then dies
    study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri("http://127.0.0.1:9")  # a tracking server that does not answer
    try:
        StaleTrialCallback(max_retry=3)(study, study.get_trials()[0])
    finally:
        mlflow.set_tracking_uri(before)
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [t.user_attrs[queue.CELL_ATTR] for t in waiting] == [key]
    said = capsys.readouterr().err
    assert "queued a retry" in said and "its run could not be closed" in said


def test_a_dead_workers_run_is_closed_failed_but_one_its_worker_closed_keeps_its_end(tmp_path, tracking):
    # A worker stopped by a signal closes its run KILLED itself; Optuna leaves its trial RUNNING,
    # so the next worker finds it stale: that must not rewrite the KILLED as FAILED.
    study = _queue(tmp_path)
    client = mlflow.MlflowClient()
    experiment = mlflow.get_experiment_by_name("test").experiment_id
    lost, stopped = (client.create_run(experiment).info.run_id for _ in range(2))
    client.set_terminated(stopped, "KILLED")
    for seed, run_id in ((1, lost), (2, stopped)):
        study.enqueue_trial({}, user_attrs={queue.CELL_ATTR: f"static@epochs#{seed}", ATTR_RUN_ID: run_id})
        trial = study.ask()
        study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)

    callback = StaleTrialCallback(max_retry=3)
    for trial in study.get_trials(states=(TrialState.FAIL,)):
        callback(study, trial)

    assert client.get_run(lost).info.status == "FAILED"
    assert "worker lost" in client.get_run(lost).data.tags[FAILURE_TAG]
    assert (
        client.get_run(stopped).info.status == "KILLED"
        and FAILURE_TAG not in client.get_run(stopped).data.tags
    )


def test_a_study_whose_parent_run_was_deleted_is_refused_in_one_line(tmp_path, tracking):
    study = _queue(tmp_path)
    client = mlflow.MlflowClient()
    parent = client.create_run(mlflow.get_experiment_by_name("test").experiment_id).info.run_id
    study.set_user_attr(STUDY_PARENT, parent)
    assert check_parent(study) == parent
    client.delete_run(parent)
    with pytest.raises(ConfigError, match=f"run {parent}, which is deleted; restore it"):
        check_parent(study)
