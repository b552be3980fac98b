"""The run context every entry point opens: experiment, name, code version, and an honest end.

A run ends FINISHED only when its step returned normally. An error ends it FAILED with the
reason in the ``failure_reason`` tag; Ctrl-C or SIGTERM ends it KILLED.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

import click
import mlflow

from pipeline.tracking.errors import FAILURE_TAG, Terminated, UpstreamError, failure_reason, raise_terminated
from pipeline.tracking.filters import clause
from pipeline.tracking.params import log_params_shown
from pipeline.tracking.processes import HOST_TAG, PID_TAG, fail_stale_runs, owned_elsewhere, owner_tags
from pipeline.tracking.stores import check_artifact_store, unwritable

ENTRY_POINT_TAG = "entry_point"
CODE_TAG = "code_version"  # the code a run ran with (code_version below)
RESUMED_AFTER_TAG = "resumed_after"  # a finished run's failure_reason from before its resume
DEFAULT_EXPERIMENT = "growing-cnn"
# MLflow 3's UI opens an experiment without this tag in its GenAI view ("Traces"); this one
# opens on the runs table, as a model-training experiment.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"

# Tags every run this process opens carries besides its own: a study's cells set their parent
# run (``mlflow.parentRunId``, which nests them in the MLflow UI) and their cell here, so the
# training and evaluate steps they call need no option for it.
RUN_TAGS: ContextVar[dict[str, str]] = ContextVar("run_tags", default={})  # noqa: B039 (never mutated)


def use_experiment(name: str = "") -> str:
    """Make ``name`` the active experiment (created, as a model-training one, if missing) and
    return its id. Empty: $MLFLOW_EXPERIMENT_ID or $MLFLOW_EXPERIMENT_NAME when set, else
    ``growing-cnn``."""
    if not name:
        env_id = os.environ.get("MLFLOW_EXPERIMENT_ID", "")
        if env_id:
            mark_model_experiment(env_id)
            return env_id
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "") or DEFAULT_EXPERIMENT
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is None:
        try:
            experiment = mlflow.get_experiment(mlflow.create_experiment(name))
        except mlflow.exceptions.MlflowException:  # another step starting beside this one made it
            experiment = mlflow.get_experiment_by_name(name)
            if experiment is None:
                raise
    experiment_id = experiment.experiment_id
    mark_model_experiment(experiment_id)
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


def mark_model_experiment(experiment_id: str) -> None:
    """Tag the experiment as model training unless its kind is already set (by a user or MLflow)."""
    client = mlflow.MlflowClient()
    if EXPERIMENT_KIND_TAG in client.get_experiment(experiment_id).tags:
        return
    try:
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    except mlflow.exceptions.MlflowException:
        # Two steps starting at once in a new experiment both find it untagged, and the SQL
        # store refuses the second insert: the tag is there, which is all this wants.
        if EXPERIMENT_KIND_TAG not in client.get_experiment(experiment_id).tags:
            raise


def current_run_name() -> str:
    """The active run's name as the store has it (``mlflow.active_run()`` keeps the name the run
    had when it was opened, before ``tracked_run`` renamed it)."""
    return mlflow.get_run(mlflow.active_run().info.run_id).info.run_name or ""


def unique_run_name(experiment_id: str, base: str, own_run_id: str = "") -> str:
    """``base``, or ``base-2``, ``base-3``... when another run of the experiment has that name."""
    # LIKE's wildcards in the name (% _) only widen the search; the names are compared below
    like = clause("attributes.run_name", "LIKE", f"{base}%") or ""
    taken = {
        r.info.run_name
        for r in mlflow.MlflowClient().search_runs([experiment_id], filter_string=like, max_results=50000)
        if r.info.run_id != own_run_id and (r.info.run_name or "").startswith(base)
    }
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


REPO = Path(__file__).resolve().parents[2]
# Where the steps' code lives: a Python file added here runs as much as an edited one does.
CODE_PACKAGES = ("pipeline", "models")


def code_version(repo: Path = REPO) -> str:
    """The commit plus a digest of uncommitted changes: to tracked files, and Python files of
    the code's packages not yet added (other untracked files, notes, outputs, a virtual
    environment, do not count); 'unknown' outside git.

    main reuses a finished step only when this matches, so an edited working tree never
    passes for the code a run was made with."""

    def git(*args: str) -> bytes:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, timeout=30)
        return done.stdout

    try:
        commit = git("rev-parse", "HEAD").decode().strip()
        changes = git("diff", "HEAD")
        added = git(
            "ls-files", "--others", "--exclude-standard", "-z", "--", *(f"{p}/*.py" for p in CODE_PACKAGES)
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    for name in sorted(n for n in added.split(b"\0") if n):  # as a diff shows a new file
        changes += b"\0" + name + b"\0" + _file_text(repo / os.fsdecode(name))
    return f"{commit[:12]}-{hashlib.sha256(changes).hexdigest()[:12]}" if changes else commit[:12]


def _file_text(path: Path) -> bytes:
    """A file's bytes, a link's target as git keeps it, or nothing for one that cannot be read
    (it still counts by its name)."""
    try:
        return os.fsencode(os.readlink(path)) if path.is_symlink() else path.read_bytes()
    except OSError:
        return b""


@contextlib.contextmanager
def tracked_run(
    entry_point: str,
    params: dict[str, str],
    run_name: str | None = None,
    run_id: str | None = None,
    tags: dict[str, str] | None = None,
    experiment_name: str = "",
) -> Iterator[mlflow.ActiveRun]:
    """Open (or, under ``mlflow run`` or ``--resume``, reopen) the step's run and close it honestly.

    A new run goes into ``experiment_name`` (see ``use_experiment``); under ``mlflow run`` the
    run already has its experiment. ``run_name`` (made unique in the experiment) replaces the
    generated name ``mlflow run`` gave its run; a resumed run keeps its own name."""
    # MLflow logs a store error with its whole traceback before raising it; a read-only store
    # is said in one line below, and any other error is raised with its traceback anyway.
    quiet = logging.getLogger("mlflow.store.db.utils")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        for stale in fail_stale_runs():
            click.echo(f"marked run {stale} FAILED: its process died while it was RUNNING", err=True)
        outer = os.environ.get("MLFLOW_RUN_ID", "")
        if run_id is None:  # MLflow would reopen the run MLFLOW_RUN_ID names, whatever it is
            check_outer_run(entry_point)
        if run_id is None and not outer:
            experiment_id = use_experiment(experiment_name)
            name = unique_run_name(experiment_id, run_name) if run_name else None
            # a study's cells open theirs while the study's parent run is active here: nested
            run = mlflow.start_run(run_name=name, nested=mlflow.active_run() is not None)
        else:
            run = mlflow.start_run(run_id=run_id)
            mark_model_experiment(run.info.experiment_id)
            if run_id is None and run_name:  # `mlflow run`'s run, with its generated name
                name = unique_run_name(run.info.experiment_id, run_name, run.info.run_id)
                mlflow.MlflowClient().update_run(run.info.run_id, name=name)
    except mlflow.exceptions.MlflowException as err:
        store_error = unwritable(err, f"tracking store {mlflow.get_tracking_uri()}")
        if store_error is None:
            raise
        raise store_error from None
    finally:
        quiet.setLevel(level)
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    previous_int = signal.getsignal(signal.SIGINT)  # ignored while an interrupted run closes
    try:
        check_artifact_store(run.info.artifact_uri)
        mlflow.set_tags(
            {
                ENTRY_POINT_TAG: entry_point,
                CODE_TAG: code_version(),
                **owner_tags(),
                **RUN_TAGS.get(),
                **(tags or {}),
            }
        )
        # `mlflow run` has already logged the parameters it passed (in its own spelling, and
        # MLflow refuses to change a logged value); log only the ones still missing.
        logged = mlflow.get_run(run.info.run_id).data.params
        missing = {k: v for k, v in params.items() if k not in logged}
        if missing:
            log_params_shown(missing, run.info.run_id)
        yield run
    except (KeyboardInterrupt, Terminated):
        # A second signal (Ctrl-C reaches the whole process group, then main cancels the step
        # with SIGTERM) must not cut the closing short and leave the run RUNNING.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        mlflow.set_tag(FAILURE_TAG, "interrupted")
        mlflow.end_run("KILLED")
        raise
    except BaseException as err:
        mlflow.set_tag(FAILURE_TAG, failure_reason(err))
        mlflow.end_run("FAILED")
        raise
    else:
        _retire_failure(run.info.run_id)
        mlflow.end_run("FINISHED")
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _retire_failure(run_id: str) -> None:
    """A resumed run that finished: why it had stopped is history (``resumed_after``), not its
    failure reason."""
    stale = mlflow.get_run(run_id).data.tags.get(FAILURE_TAG)
    if stale is not None:
        mlflow.set_tag(RESUMED_AFTER_TAG, stale)
        mlflow.MlflowClient().delete_tag(run_id, FAILURE_TAG)


def check_outer_run(entry_point: str) -> None:
    """Refuse an ``MLFLOW_RUN_ID`` that is not a fresh run made for this step.

    ``mlflow run`` sets it to the RUNNING run it has just created for the step; a stray one
    left in the environment would make the step train inside a finished run, or another
    live step's run. Only ``mlflow run`` and ``--resume`` (which checks its run) reopen runs."""
    run_id = os.environ.get("MLFLOW_RUN_ID", "")
    if not run_id:
        return
    reason = _not_ours(run_id, entry_point)
    if reason:
        raise UpstreamError(
            f"MLFLOW_RUN_ID {run_id} {reason}; only `mlflow run` sets it, for the run it makes: "
            "unset it (use --resume RUN_ID to continue a run)"
        )


def _not_ours(run_id: str, entry_point: str) -> str:
    """Why the run ``run_id`` is not a fresh run of ``entry_point`` for this process ('' if it is)."""
    try:
        run = mlflow.MlflowClient().get_run(run_id)
    except mlflow.exceptions.MlflowException:
        return "names no run in this tracking store"
    if run.info.status != "RUNNING":
        return f"names a {run.info.status} run"
    tags = run.data.tags
    kind = tags.get(ENTRY_POINT_TAG) or tags.get("mlflow.project.entryPoint")
    if kind and kind != entry_point:
        return f"names a run of {kind}, not {entry_point}"
    if owned_elsewhere(tags):
        return f"names a run of process {tags[PID_TAG]} on {tags.get(HOST_TAG)}, which is still RUNNING"
    return ""


def wait_closed(run_id: str, timeout_s: float = 120.0) -> str:
    """Wait until ``run_id`` is no longer RUNNING (a cancelled step closing itself); its status."""
    client = mlflow.MlflowClient()
    deadline = time.monotonic() + timeout_s
    status = client.get_run(run_id).info.status
    while status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
        status = client.get_run(run_id).info.status
    return status
