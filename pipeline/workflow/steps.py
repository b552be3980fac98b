"""main's steps: each one launched through ``mlflow run`` as a child of main's run, or a FINISHED
run with the same entry point, parameters (compared as values), code version and data digest
reused instead.
"""

from __future__ import annotations

import signal
from pathlib import Path

import click
import mlflow

from pipeline.codec import default_params, flat_params, same_param
from pipeline.tracking.errors import FAILURE_TAG, Terminated, UpstreamError, one_line
from pipeline.tracking.params import shown_param
from pipeline.tracking.runs import CODE_TAG, code_version, unique_run_name, wait_closed

REPO = Path(__file__).resolve().parents[2]


def same_params(wanted: dict, logged: dict) -> bool:
    """Whether a run logged these parameters (its name aside: a rerun may be ``static-s0-2``)."""
    return all(
        k in logged and same_param(shown_param(k, v), logged[k]) for k, v in wanted.items() if k != "run_name"
    )


def find_reusable(entry_point: str, params: dict, data_digest: str) -> str:
    """A FINISHED run of ``entry_point`` with these parameters, code and data, or ''."""
    version = code_version()
    if version == "unknown":
        return ""
    runs = mlflow.search_runs(
        search_all_experiments=True,
        output_format="list",
        order_by=["attributes.start_time DESC"],
        filter_string=(
            f"tags.entry_point = '{entry_point}' and attributes.status = 'FINISHED' "
            f"and tags.{CODE_TAG} = '{version}'"
        ),
    )
    for run in runs:
        if data_digest and run.data.params.get("data_digest") != data_digest:
            continue
        if same_params(params, run.data.params):
            return run.info.run_id
    return ""


class StepRunner:
    """Runs steps through ``mlflow run``, reusing finished runs with the same inputs."""

    def __init__(self, env_manager: str, experiment_id: str, parent_run_id: str, data_digest: str):
        self.env_manager, self.experiment_id = env_manager, experiment_id
        self.parent_run_id, self.data_digest = parent_run_id, data_digest
        self.log: list[dict] = []

    def __call__(self, entry_point: str, **overrides) -> str:
        params = {**default_params(entry_point), **flat_params(overrides)}
        digest = self.data_digest if entry_point != "evaluate" else ""
        run_id = find_reusable(entry_point, params, digest)
        reused = bool(run_id)
        if reused:
            click.echo(f"main: reusing {entry_point} run {run_id}", err=True)
        else:
            name = unique_run_name(self.experiment_id, params.get("run_name") or entry_point)
            params["run_name"] = name
            click.echo(f"main: running {entry_point} as {name}", err=True)
            # The step's run is made here, named and under main, rather than by `mlflow run`,
            # which would log every parameter shell-quoted ('' for an empty one, the spec JSON
            # in quotes) and refuse the step's plain values afterwards.
            step_run = mlflow.MlflowClient().create_run(
                self.experiment_id,
                run_name=name,
                tags={
                    "mlflow.parentRunId": self.parent_run_id,
                    "mlflow.project.entryPoint": entry_point,
                    "mlflow.source.type": "PROJECT",
                    "mlflow.source.name": str(REPO),
                },
            )
            try:
                submitted = mlflow.projects.run(
                    str(REPO),
                    entry_point=entry_point,
                    parameters=params,
                    env_manager=self.env_manager,
                    experiment_id=self.experiment_id,
                    synchronous=False,
                    run_id=step_run.info.run_id,
                )
            except Exception as err:  # the step never started: its run must not stay RUNNING
                reason = f"step {entry_point} could not be launched: {one_line(err)}"
                _close(step_run.info.run_id, reason)
                raise UpstreamError(f"{reason} (is MLflow's `mlflow` command on PATH?)") from None
            try:
                succeeded = submitted.wait()
            except (KeyboardInterrupt, Terminated):
                # Pass the signal on and wait: the step ends KILLED with its checkpoint, then main.
                # A second Ctrl-C meanwhile is ignored; after, the handlers are given back (a
                # process that goes on, a notebook or a test suite, would keep ignoring it).
                signals = (signal.SIGINT, signal.SIGTERM)
                previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
                try:
                    submitted.cancel()
                    # `bash -c` may stand between: the step then sees its launcher gone, within a second.
                    wait_closed(submitted.run_id)
                finally:
                    for sig, handler in previous.items():
                        signal.signal(sig, handler)
                raise
            if not succeeded:
                # A step that died before closing its own run (killed, out of memory) leaves it RUNNING.
                _close(
                    submitted.run_id,
                    f"step {entry_point}'s process exited without closing its run or saying why",
                )
                raise UpstreamError(
                    f"step {entry_point} (run {submitted.run_id}) failed: "
                    "see that run's failure_reason tag and log"
                )
            run_id = submitted.run_id
        self.log.append(
            {
                "entry_point": entry_point,
                "run_id": run_id,
                "reused": reused,
                **flat_params(overrides),
                "run_name": mlflow.MlflowClient().get_run(run_id).info.run_name,
            }
        )
        return run_id


def _close(run_id: str, reason: str) -> None:
    """A failed step's run ends FAILED and says why: ``reason`` where its own process (dead
    before it could) recorded none."""
    client = mlflow.MlflowClient()
    run = client.get_run(run_id)
    if FAILURE_TAG not in run.data.tags:
        client.set_tag(run_id, FAILURE_TAG, reason)
    if run.info.status == "RUNNING":
        client.set_terminated(run_id, "FAILED")
