"""Runs are closed honestly: a run whose process died is marked FAILED at the next start; steps
that start together in a new experiment all find it."""

from __future__ import annotations

import subprocess
import sys

import mlflow
import pytest

from pipeline.tracking.errors import FAILURE_TAG
from pipeline.tracking.processes import fail_stale_runs
from pipeline.tracking.runs import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, code_version, tracked_run
from tests.conftest import REPO, subprocess_env

# Opens a run through tracked_run and dies without closing it, as SIGKILL or the OOM killer would.
DIE_WHILE_RUNNING = """
import os, mlflow
from pipeline.tracking.runs import tracked_run
with tracked_run("train_static", {"epochs": "1"}) as run:
    print(run.info.run_id, flush=True)
    os._exit(9)
"""


def test_a_run_left_running_by_a_dead_process_is_failed_at_the_next_start(tracking):
    died = subprocess.run(
        [sys.executable, "-c", DIE_WHILE_RUNNING],
        cwd=REPO,
        env=subprocess_env(tracking),
        capture_output=True,
        text=True,
    )
    assert died.returncode == 9, died.stderr
    dead_id = died.stdout.split()[0]
    assert mlflow.get_run(dead_id).info.status == "RUNNING"

    with tracked_run("evaluate", {}) as live:  # the next start of any step
        # This process's own run is RUNNING and alive: it must be left alone.
        assert fail_stale_runs() == []
        assert mlflow.get_run(live.info.run_id).info.status == "RUNNING"

    dead = mlflow.get_run(dead_id)
    assert dead.info.status == "FAILED"
    assert dead.data.tags[FAILURE_TAG].startswith("stale: process")
    assert mlflow.get_run(live.info.run_id).info.status == "FINISHED"


def test_runs_without_owner_tags_are_not_touched(tracking):
    foreign = mlflow.MlflowClient().create_run(mlflow.get_experiment_by_name("test").experiment_id)
    assert fail_stale_runs() == []
    assert mlflow.get_run(foreign.info.run_id).info.status == "RUNNING"


# A step whose code has a bug that raises ValueError, the type most input checks subclass.
BUG_IN_A_STEP = """
import click, mlflow
from pipeline.tracking.guard import main_guard
from pipeline.tracking.runs import tracked_run

@click.command()
@main_guard
def step():
    with tracked_run("train_static", {"epochs": "1"}) as run:
        print(run.info.run_id, flush=True)
        [][0:1] = None  # replaced by each case's bug
step()
"""


def test_a_bug_keeps_its_traceback_and_does_not_read_as_bad_input(tracking):
    for bug, kind in (("int('twelve')", "ValueError"), ("{}['epochs']", "KeyError")):
        crashed = subprocess.run(
            [sys.executable, "-c", BUG_IN_A_STEP.replace("[][0:1] = None", bug)],
            cwd=REPO,
            env=subprocess_env(tracking),
            capture_output=True,
            text=True,
        )
        assert crashed.returncode == 1, crashed.stderr  # not 2, the exit status of bad input
        assert "Traceback" in crashed.stderr and not crashed.stderr.startswith("error:")
        run = mlflow.get_run(crashed.stdout.split()[0])
        assert run.info.status == "FAILED"
        assert run.data.tags[FAILURE_TAG].startswith(f"{kind}: ")


def test_an_interrupted_step_says_how_to_continue_with_the_options_it_has():
    """Only the training steps have --resume (issue 34, item 3): score_difficulty and evaluate
    say to run again, and the id is the run's, never a placeholder."""
    import click

    from pipeline import evaluate, score_difficulty, train_static
    from pipeline.tracking.guard import _how_to_continue

    for command in (score_difficulty.main, evaluate.main):
        with click.Context(command):
            said = _how_to_continue("a" * 32)
        assert said.endswith("run the step again (it has no --resume)") and "RUN_ID" not in said
    with click.Context(train_static.main):
        said = _how_to_continue("a" * 32)
    assert said.endswith(f"resume it with --resume {said.split()[1]}")


def test_the_code_version_counts_edits_and_new_modules_but_not_other_untracked_files(tmp_path, monkeypatch):
    monkeypatch.delenv("GIT_DIR", raising=False)
    repo, plain = tmp_path / "repo", tmp_path / "plain"
    (repo / "pipeline").mkdir(parents=True), plain.mkdir()

    def git(*args: str) -> None:  # no signing or hooks of this machine's git config
        quiet = ("-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false")
        subprocess.run(["git", "-C", str(repo), *quiet, "-c", "core.hooksPath=/dev/null", *args], check=True)

    git("init", "-q")
    (repo / "pipeline" / "a.py").write_text("x = 1\n")
    git("add", "pipeline/a.py")
    git("commit", "-qm", "a")
    clean = code_version(repo)
    assert len(clean) == 12
    (repo / "notes.txt").write_text("a note, not code")
    (repo / "scratch.py").write_text("print('a script outside the packages')\n")
    (repo / "pipeline" / "dangling.py").symlink_to(repo / "nowhere.py")
    linked = code_version(repo)  # a link counts by its target, as git keeps it
    assert linked.startswith(clean + "-")
    (repo / "pipeline" / "dangling.py").unlink()
    assert code_version(repo) == clean
    (repo / "pipeline" / "b.py").write_text("y = 2\n")  # a new module, not yet added
    with_module = code_version(repo)
    assert with_module.startswith(clean + "-") and with_module != linked
    (repo / "pipeline" / "b.py").write_text("y = 3\n")
    assert code_version(repo) not in (clean, with_module)
    (repo / "pipeline" / "b.py").unlink()
    (repo / "pipeline" / "a.py").write_text("x = 2\n")  # an edit to a tracked file
    assert code_version(repo).startswith(clean + "-")
    assert code_version(plain) == "unknown"


# Waits until every process has imported MLflow, then looks up, creates and tags one new
# experiment at the same moment as the others: what two `mlflow run`s started together do.
TOGETHER = """
import pathlib, sys, time
from pipeline.tracking.runs import use_experiment
gate, n = pathlib.Path(sys.argv[1]), int(sys.argv[2])
(gate / sys.argv[3]).touch()
while len(list(gate.iterdir())) < n:
    time.sleep(0.001)
print(use_experiment("together"))
"""


@pytest.mark.slow
def test_steps_that_start_together_in_a_new_experiment_all_find_it(tracking, tmp_path):
    gate, n = tmp_path / "gate", 6
    gate.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TOGETHER, str(gate), str(n), str(k)],
            cwd=REPO,
            env=subprocess_env(tracking),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(n)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * n, [err[-400:] for _, err in outs]
    (experiment_id,) = {out.strip() for out, _ in outs}
    assert mlflow.get_experiment(experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
