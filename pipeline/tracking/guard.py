"""The guard around every entry point's command: bad input is one line and exit status 2, an
interruption exit 130, a bug keeps its traceback; a run ``mlflow run`` made ends with the reason."""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from pathlib import Path

import click
import mlflow

from pipeline.tracking.errors import (
    FAILURE_TAG,
    Terminated,
    TrackingStoreError,
    failure_reason,
    one_line,
    raise_terminated,
    user_errors,
)
from pipeline.tracking.processes import owned_elsewhere, watch_launcher
from pipeline.tracking.stores import check_tracking_store


class GuardedCommand(click.Command):
    """The click command class of every entry point: when click itself rejects the command line
    (``-P epochs=2.5`` under ``mlflow run``, which types integers as floats; an unknown
    choice), the error is one line and exit status 2 like any bad input, and the run that
    ``mlflow run`` made for the step ends FAILED with the reason. This happens before
    ``main_guard``'s body could see it."""

    def make_context(self, info_name, args, parent=None, **extra):
        outer_run_id = os.environ.get("MLFLOW_RUN_ID", "")
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as err:
            reason = f"{err.format_message()} (see --help)"
            _fail_outer_run(click.UsageError(reason), outer_run_id)
            click.echo(f"error: {reason}", err=True)
            sys.exit(2)


def main_guard(fn):
    """Wrap a click command body: user errors become one line on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # Read now: MLflow clears the variable when a run ends, and with --resume the run
        # that ends is not the one `mlflow run` made for this step.
        outer_run_id = os.environ.get("MLFLOW_RUN_ID", "")
        # MLflow draws a "Downloading artifacts" bar for every artifact a step reads (a scores
        # table, a model): three per run under `main`, burying its one line per run. A user who
        # wants them sets the variable.
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        if not os.environ.get("MLFLOW_LOGGING_LEVEL"):  # "Validating input example" per model
            logging.getLogger("mlflow.pyfunc").setLevel(logging.WARNING)
        # SIGTERM before the run is open (data loading) is an interruption too, not a silent death.
        previous = signal.signal(signal.SIGTERM, raise_terminated)
        # A step that `mlflow run` started: python -m pipeline.<step> runs pipeline/<step>.py or
        # pipeline/<step>/__main__.py.
        if outer_run_id and Path(__file__).resolve().parents[1] in Path(sys.argv[0]).resolve().parents:
            watch_launcher()
        try:
            check_tracking_store()
        except TrackingStoreError as err:  # nothing can be recorded: no run to fail
            click.echo(f"error: {one_line(err)}", err=True)
            sys.exit(2)
        try:
            return fn(*args, **kwargs)
        except user_errors() as err:
            _fail_outer_run(err, outer_run_id)
            click.echo(f"error: {one_line(err)}", err=True)
            sys.exit(2)
        except (KeyboardInterrupt, Terminated) as err:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            _fail_outer_run(err, outer_run_id, "KILLED")  # interrupted before its run was open
            click.echo(f"interrupted: {_how_to_continue(outer_run_id)}", err=True)
            sys.exit(130)
        except Exception as err:  # a bug: the run says which exception, the traceback stays
            _fail_outer_run(err, outer_run_id)
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)

    return wrapper


def _how_to_continue(outer_run_id: str) -> str:
    """What an interrupted step's user can do next: --resume with the run's id where the command
    has that option (training), else run it again."""
    try:
        last = mlflow.last_active_run()
    except mlflow.exceptions.MlflowException:  # the store cannot be read: fall back on the outer id
        last = None
    run_id = last.info.run_id if last is not None else outer_run_id
    ctx = click.get_current_context(silent=True)
    command = ctx.command if ctx is not None else None
    killed = f"run {run_id} is marked KILLED" if run_id else "the run is marked KILLED"
    if command is not None and any(param.name == "resume" for param in command.params) and run_id:
        return f"{killed}; resume it with --resume {run_id}"
    if command is not None and command.name == "main":
        return f"{killed}; run main again: the steps that finished are reused"
    return f"{killed}; run the step again (it has no --resume)"


def _fail_outer_run(err: BaseException, run_id: str, status: str = "FAILED") -> None:
    """Under ``mlflow run`` the run exists before our code; mark it FAILED with the reason
    even when the error came before ``tracked_run`` opened it."""
    if not run_id:
        return
    client = mlflow.MlflowClient()
    try:
        check_tracking_store()
        run = client.get_run(run_id)
    except (mlflow.exceptions.MlflowException, TrackingStoreError):
        return
    # Never another live step's run (a stray MLFLOW_RUN_ID): that run's process closes it.
    if run.info.status == "RUNNING" and not owned_elsewhere(run.data.tags):
        try:
            client.set_tag(run_id, FAILURE_TAG, failure_reason(err) if status == "FAILED" else "interrupted")
            client.set_terminated(run_id, status)
        except mlflow.exceptions.MlflowException:
            pass  # a read-only store: the error line is all that can be said
