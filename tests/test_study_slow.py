"""The study step end to end on a small real subset: a screen whose cells are child runs and
whose second run trains nothing; a confirmation that refuses screened seeds, preregisters before
training and reads the test split once per run; a worker killed mid-cell whose cell trains
again elsewhere, every cell finished exactly once; and a study stopped by the clock that the
same command finishes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import optuna
import pytest
from click.testing import CliRunner

from pipeline import score_difficulty, study
from pipeline.data.splits import REFUSE_TEST_ENV
from pipeline.study import queue
from pipeline.study.protocol import Preregistration
from pipeline.tracking.errors import FAILURE_TAG
from pipeline.tracking.runs import CODE_TAG
from pipeline.tune.study import STUDY_PARENT
from tests.conftest import subprocess_env

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")]

SMALL = ["--subset", "300", "--epochs", "3", "--arms", "static,dynamic"]


def _children(parent: str) -> list:
    return mlflow.search_runs(
        search_all_experiments=True,
        filter_string=f"tags.`mlflow.parentRunId` = '{parent}'",
        output_format="list",
    )


def _trials(tmp_path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'optuna.db'}")


def _as_if_recorded_without(parent: str, trials: optuna.Study, option: str) -> None:
    """Rewrite a confirmation's records (its definition, its preregistration and the tag of its
    digest) as a study step that did not have ``option`` yet would have written them."""
    definition = dict(trials.user_attrs[study.command.DEFINITION_ATTR])
    del definition[option]
    trials.set_user_attr(study.command.DEFINITION_ATTR, definition)
    client = mlflow.MlflowClient()
    prereg = json.loads(mlflow.artifacts.load_text(f"runs:/{parent}/study/preregistration.json"))
    del prereg["grid"][option]
    client.log_text(parent, json.dumps(prereg, indent=2), "study/preregistration.json")
    client.set_tag(parent, study.command.PREREGISTRATION_TAG, Preregistration(**prereg).digest())


def test_a_screen_trains_its_grid_as_child_runs_once(tracking, tmp_path, monkeypatch):
    runner = CliRunner()
    # Under a named recipe: its options on both arms, and its growing arms' on those alone
    args = [*SMALL, "--seeds", "50,51", "--budgets", "epochs,flops:0.5,seconds", "--recipe"]
    args += ["erase+wd1e-3+growth-lr0.5", "--study-name", "scr"]
    scores = runner.invoke(score_difficulty.main, ["--subset", "300", "--epochs", "1"])
    assert scores.exit_code == 0, scores.output  # it scores the test split to cut its tiers
    monkeypatch.setenv(REFUSE_TEST_ENV, "1")  # a screen never reads the test split
    first = runner.invoke(study.main, args)
    assert first.exit_code == 0, first.output
    trials = _trials(tmp_path, "scr")
    parent = trials.user_attrs[STUDY_PARENT]
    cells = {r.data.tags["study_cell"]: r for r in _children(parent) if "study_cell" in r.data.tags}
    assert sorted(cells) == sorted(
        f"{arm}@{budget}#{seed}"
        for seed in (50, 51)
        for arm, budget in [("static", "epochs"), ("static", "flops:0.5")]
        + [("dynamic", b) for b in ("epochs", "flops:0.5", "seconds")]
    )
    assert all(r.info.status == "FINISHED" for r in cells.values())
    assert (
        cells["dynamic@seconds#50"].data.params["budget"] == f"run:{cells['static@epochs#50'].info.run_id}:s"
    )
    assert queue.finished(trials) == {k: r.info.run_id for k, r in cells.items()}
    static_params, dynamic_params = (
        cells["static@epochs#50"].data.params,
        cells["dynamic@epochs#50"].data.params,
    )
    assert static_params["weight_decay"] == dynamic_params["weight_decay"] == "0.001"
    assert static_params["augment"] == dynamic_params["augment"] == "erase"
    assert (static_params["growth_lr_scale"], dynamic_params["growth_lr_scale"]) == ("1.0", "0.5")
    assert "dynamic@seconds vs static@epochs" in first.output and "exploratory" in first.output
    client = mlflow.MlflowClient()
    artifacts = {a.path for a in client.list_artifacts(parent, "study")}
    assert {"study/report.md", "study/comparisons.csv", "study/frontier.png"} <= artifacts
    assert client.get_run(parent).data.tags["study_label"] == "exploratory"

    again = runner.invoke(study.main, args)
    assert again.exit_code == 0, again.output
    assert "10 finished, 0 under way, 0 queued" in again.output
    assert len([r for r in _children(parent) if "study_cell" in r.data.tags]) == len(cells)

    changed = runner.invoke(study.main, [*args[:-2], "--study-name", "scr", "--lr", "0.1"])
    assert changed.exit_code == 2 and "created with other options (--lr)" in changed.output


def test_a_confirmation_refuses_screened_seeds_and_preregisters_before_training(tracking, tmp_path):
    runner = CliRunner()
    screen = runner.invoke(study.main, [*SMALL, "--seeds", "60", "--budgets", "epochs", "--study-name", "s"])
    assert screen.exit_code == 0, screen.output
    refused = runner.invoke(
        study.main, [*SMALL, "--seeds", "60,61", "--budgets", "epochs", "--phase", "confirm"]
    )
    assert refused.exit_code == 2
    assert "seed 60 trained in screen study 's'" in refused.output
    assert refused.output.strip().endswith("confirm on seeds that no other study used")
    gated = runner.invoke(study.main, [*SMALL, "--seeds", "722", "--budgets", "epochs", "--phase", "confirm"])
    assert gated.exit_code == 2 and "seed 722 gated a choice" in gated.output

    args = [*SMALL, "--seeds", "61,62", "--budgets", "epochs", "--phase", "confirm", "--study-name", "c"]
    confirmed = runner.invoke(study.main, args)
    assert confirmed.exit_code == 0, confirmed.output
    parent = _trials(tmp_path, "c").user_attrs[STUDY_PARENT]
    client = mlflow.MlflowClient()
    path = client.download_artifacts(parent, "study/preregistration.json", str(tmp_path))
    prereg = json.loads(Path(path).read_text())
    assert client.get_run(parent).data.tags["preregistration"]
    assert prereg["seeds"] == [61, 62] and prereg["metric"] == "test/acc" and prereg["correction"] == "holm"
    assert prereg["comparisons"] == ["dynamic@epochs vs static@epochs"]
    cells = [r for r in _children(parent) if "study_cell" in r.data.tags]
    assert len(cells) == 4
    # Each cell read its test split as it finished, once (a study cut off keeps what finished)
    evaluate_runs = {
        r.info.run_id: r for r in _children(parent) if r.data.tags.get("entry_point") == "evaluate"
    }
    assert len(evaluate_runs) == len(cells)
    for run in cells:
        assert "test/acc" in run.data.metrics
        by = evaluate_runs[run.data.tags["evaluated_by"]]
        assert by.info.run_name == f"c-evaluate-{run.data.tags['study_cell']}"
        assert by.data.tags["study_readout_cell"] == run.data.tags["study_cell"]
        assert by.data.tags["study_readout_trial"] == run.data.tags["optuna_trial_number"]
        # preregistered before any cell trained: the tag's artifact was written first
        assert run.info.start_time > client.get_run(parent).info.start_time
    assert client.get_run(parent).data.tags["study_label"] == "confirmatory"
    # each arm's mean test accuracy with its interval and whole-run minutes, read from the runs
    text = Path(client.download_artifacts(parent, "study/report.md", str(tmp_path))).read_text()
    n = r"-?[0-9]+\.[0-9]+"
    means = rf"\| static@epochs \| 2 \| {n} \({n} to {n}\) \| [0-9]+ \| {n} \({n}\) \| 3 \|"
    assert re.search(means, text), text
    (version,) = {run.data.tags[CODE_TAG] for run in cells}  # this checkout's, as the cells recorded it
    assert f"Code the cells trained with: {version} (4 cells)." in text
    again = runner.invoke(study.main, args)  # nothing to train, nothing to evaluate again
    assert again.exit_code == 0, again.output
    assert len([r for r in _children(parent) if r.data.tags.get("entry_point") == "evaluate"]) == len(cells)
    # Created by an earlier version of the step, which had no --lr-schedule: the study is
    # finished now under its default (what trained then), refused under another value
    _as_if_recorded_without(parent, _trials(tmp_path, "c"), "lr_schedule")
    older = runner.invoke(study.main, args)
    assert older.exit_code == 0 and "4 finished, 0 under way, 0 queued" in older.output, older.output
    other_value = runner.invoke(study.main, [*args, "--lr-schedule", "triangular"])
    assert other_value.exit_code == 2 and "created with other options (--lr-schedule)" in other_value.output
    # A seed a confirmation spent (its test split read) confirms nothing else, under any name
    other = [*SMALL, "--seeds", "62,63", "--budgets", "epochs", "--phase", "confirm", "--study-name", "c2"]
    spent = runner.invoke(study.main, other)
    assert spent.exit_code == 2 and "seed 62 trained in confirm study 'c'" in spent.output
    # ... nor the same study's name in another storage (a new study, its test splits read again)
    elsewhere = runner.invoke(study.main, [*args, "--storage", f"sqlite:///{tmp_path / 'other.db'}"])
    assert elsewhere.exit_code == 2 and "seed 61 trained in confirm study 'c'" in elsewhere.output
    # Deleting the screen's runs does not make its seed fresh again
    screened = mlflow.search_runs(
        search_all_experiments=True, filter_string="tags.study_name = 's'", output_format="list"
    )
    for run in screened:
        client.delete_run(run.info.run_id)
    deleted = runner.invoke(study.main, [*other[:-1], "c4", "--seeds", "60"])
    assert deleted.exit_code == 2 and "seed 60 trained in screen study 's'" in deleted.output
    # Bad input is refused before a study or run is made, so the name stays free
    typo = runner.invoke(study.main, [*other[:-1], "c3", "--seeds", "64", "--scores-run", "nosuchrun"])
    assert typo.exit_code == 2 and "--scores-run 'nosuchrun': no such run" in typo.output
    assert "c3" not in optuna.get_all_study_names(f"sqlite:///{tmp_path / 'optuna.db'}")
    # tune shares the storage: its study is not taken over as a grid
    tuned = optuna.create_study(study_name="t", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    tuned.set_user_attr(STUDY_PARENT, "a tune parent run")  # what tune leaves on its study
    taken = runner.invoke(study.main, [*SMALL, "--seeds", "65", "--budgets", "epochs", "--study-name", "t"])
    assert taken.exit_code == 2 and "is a tune study, not a study's grid" in taken.output


def test_a_worker_killed_mid_cell_loses_nothing_and_no_cell_counts_twice(tracking, tmp_path):
    env = {**subprocess_env(tracking), "OMP_NUM_THREADS": "1"}
    args = [
        *SMALL, "--subset", "600", "--seeds", "70,71", "--budgets", "epochs,flops:0.5",
        "--study-name", "k", "--heartbeat-interval", "1", "--grace-period", "10",
    ]  # fmt: skip
    command = [sys.executable, "-m", "pipeline.study", *args]
    coordinator = subprocess.Popen([*command, "--experiment-name", "k-exp"], env=env, cwd=tmp_path,
                                   stderr=subprocess.PIPE, text=True)  # fmt: skip
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    deadline = time.monotonic() + 300
    while True:  # the worker joins once the study exists
        try:
            if STUDY_PARENT in optuna.load_study(study_name="k", storage=storage).user_attrs:
                break
        except KeyError:
            pass
        assert time.monotonic() < deadline and coordinator.poll() is None
        time.sleep(0.5)
    # Told no experiment, a worker puts its cells where the study's parent run is. It starts at
    # once: on a fast machine the coordinator trains every cell while another process starts.
    worker = subprocess.Popen([*command, "--worker", "true"], env=env, cwd=tmp_path)
    running = []
    while not running:  # kill it in the middle of its first cell
        running = mlflow.search_runs(
            search_all_experiments=True,
            filter_string=f"tags.process_pid = '{worker.pid}' and attributes.status = 'RUNNING'",
            output_format="list",
        )
        assert time.monotonic() < deadline and worker.poll() is None
        time.sleep(0.2)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    elsewhere = subprocess.run([*command, "--worker", "true", "--experiment-name", "other"], env=env,
                               cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert elsewhere.returncode == 2 and "records its runs in experiment 'k-exp'" in elsewhere.stderr
    _, err = coordinator.communicate(timeout=600)
    assert coordinator.returncode == 0, err
    trials = optuna.load_study(study_name="k", storage=storage)
    complete = [t.user_attrs["study_cell"] for t in queue.cell_trials(trials) if t.state.name == "COMPLETE"]
    assert sorted(complete) == sorted(set(complete)) and len(complete) == 2 * 4
    killed = mlflow.MlflowClient().get_run(running[0].info.run_id)
    assert killed.info.status == "FAILED"
    (experiment,) = {r.info.experiment_id for r in _children(trials.user_attrs[STUDY_PARENT])}
    assert mlflow.get_experiment(experiment).name == "k-exp"
    assert killed.data.tags["study_cell"] in complete  # trained again, to completion, once


def test_a_study_told_when_to_stop_keeps_what_is_left_queued_for_the_same_command(tracking, tmp_path):
    runner = CliRunner()
    assert runner.invoke(score_difficulty.main, ["--subset", "300", "--epochs", "1"]).exit_code == 0
    args = [*SMALL, "--seeds", "75", "--budgets", "epochs", "--study-name", "paused"]
    stopped = runner.invoke(study.main, [*args, "--stop-after-hours", "1e-9"])  # past before any cell
    assert stopped.exit_code == 1
    assert (
        "2 cell(s) left queued by --stop-after-hours 1e-09 (static@epochs#75, dynamic@epochs#75); "
        "run the study again to train them"
    ) in stopped.output
    assert "Traceback" not in stopped.output
    trials = _trials(tmp_path, "paused")
    assert [t.state.name for t in queue.cell_trials(trials)] == ["WAITING", "WAITING"]
    parent = trials.user_attrs[STUDY_PARENT]
    halted = mlflow.get_run(parent)
    assert halted.info.status == "FAILED" and "left queued" in halted.data.tags[FAILURE_TAG]
    report = mlflow.artifacts.load_text(f"runs:/{parent}/study/report.md")  # empty, not an error
    assert "Missing, reported as missing and not replaced: 2 cell(s)" in report
    resumed = runner.invoke(study.main, args)
    assert resumed.exit_code == 0, resumed.output
    assert "2 cells, 0 finished, 0 under way, 2 queued" in resumed.output  # still waiting, not under way
    assert sorted(queue.finished(_trials(tmp_path, "paused"))) == ["dynamic@epochs#75", "static@epochs#75"]
    assert mlflow.get_run(parent).info.status == "FINISHED"
