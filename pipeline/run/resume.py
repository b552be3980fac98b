"""Resuming an interrupted run in place (``--resume RUN_ID``): the checks that it is the same
run (its entry point, options, data, resolved networks and device) before it is reopened, and
its last checkpoint fetched."""

from __future__ import annotations

from pathlib import Path

import click
import mlflow

from pipeline.cli import option_name
from pipeline.codec import same_param
from pipeline.device import pick_device
from pipeline.tracking.errors import UpstreamError, one_line
from pipeline.tracking.params import shown_param
from pipeline.tracking.processes import HOST_TAG, PID_TAG, owned_elsewhere
from pipeline.tracking.runs import CODE_TAG, code_version

CHECKPOINT_ARTIFACT = "checkpoints/last.pt"

# Options that may differ when a run is resumed, because they do not change what it trains:
# the resume id itself, the progress bar, the run name (a reopened run keeps its own), where
# the data files live (the data they hold must still have the run's digest) and the size
# limits (they only refuse networks, and the run's network is what it was). Every other
# option, the device included (wall-clock is one of the study's results, and a run timed on two
# devices measures neither), must equal the run's.
RESUME_MAY_DIFFER = (
    "resume",
    "progress",
    "run_name",
    "experiment_name",
    "data_dir",
    "max_params",
    "max_memory_gb",
)
# Tags that the options resolve to and that must not change either: a named spec or
# `--scores-run auto` that now resolves to something else would train another run.
RESUME_SAME_TAGS = ("final_spec", "scores_run_id", "variant")


def check_resumable(
    run_id: str,
    entry_point: str,
    params: dict[str, str] | None = None,
    tags: dict[str, str] | None = None,
    data_digest: str = "",
) -> None:
    """Refuse a run that does not exist, is of another entry point or has finished, and options
    or code that would make the resumed run another run than it was (each named with both values).

    Called before the run is reopened: reopening would retag it (and a failure would mark
    another step's run FAILED)."""
    if not run_id:
        return
    run = run_to_resume(run_id)
    kind = run.data.tags.get("entry_point")
    if kind != entry_point:
        raise UpstreamError(f"--resume {run_id} is a {kind or 'untagged'} run, not {entry_point}")
    if run.info.status == "FINISHED":
        raise UpstreamError(f"--resume {run_id} already FINISHED; there is nothing to continue")
    if run.info.lifecycle_stage == "deleted":
        raise UpstreamError(f"--resume {run_id} is deleted; restore it (mlflow runs restore) to continue it")
    if run.info.status == "RUNNING" and owned_elsewhere(run.data.tags):
        raise UpstreamError(
            f"--resume {run_id} is RUNNING in process {run.data.tags.get(PID_TAG)} on "
            f"{run.data.tags.get(HOST_TAG)}; wait for it to end, or stop it first"
        )
    logged, logged_tags = run.data.params, run.data.tags
    # A parameter the run never logged (an option added since) is taken as it is now.
    for key, value in (params or {}).items():
        if key in RESUME_MAY_DIFFER or key not in logged or same_param(logged[key], shown_param(key, value)):
            continue
        if _is_option(key):
            raise UpstreamError(
                f"--resume {run_id}: {option_name(key)} {value} differs from the run's {logged[key]}; a "
                f"resumed run keeps its options (pass {option_name(key)} {logged[key]}, or start a new run)"
            )
        raise UpstreamError(  # a value the options resolve to (e.g. a budget in epochs)
            f"--resume {run_id}: these options give {key} {value}, the run had {logged[key]}; "
            "a resumed run keeps what it trained with (pass the run's options, or start a new run)"
        )
    if data_digest and logged.get("data_digest", data_digest) != data_digest:
        raise UpstreamError(
            f"--resume {run_id}: the data now has digest {data_digest}, the run trained on "
            f"{logged['data_digest']}; the data files changed"
        )
    for key in RESUME_SAME_TAGS:
        # An empty one (a run without scores, `--scores-run auto` before any existed) has
        # nothing to keep: without a curriculum, scores only add per-tier validation metrics.
        new, old = (tags or {}).get(key), logged_tags.get(key)
        if new is not None and old and new != old:
            raise UpstreamError(
                f"--resume {run_id}: its {key} is {_short(old)}, these options give {_short(new)}; "
                "a resumed run keeps what it trained with (pass the run's options, or start a new run)"
            )
    then, now = logged_tags.get(CODE_TAG, "unknown"), code_version()
    if "unknown" not in (then, now) and then != now:
        raise UpstreamError(
            f"--resume {run_id}: the run trained with code {then}, this checkout is {now}; a resumed "
            f"run keeps its code (check out commit {then.split('-')[0]} with its changes, or start a new run)"
        )
    device = (params or {}).get("device")
    if device and logged_tags.get("device") and str(pick_device(device)) != logged_tags["device"]:
        raise UpstreamError(
            f"--resume {run_id}: the run trained on {logged_tags['device']}, --device {device} gives "
            f"{pick_device(device)}; resume it on {logged_tags['device']} (its wall-clock is a result)"
        )
    if not _has_checkpoint(run_id):  # here, so that the run it refuses stays KILLED, not FAILED
        raise _no_checkpoint(run_id)


def run_to_resume(run_id: str) -> mlflow.entities.Run:
    """``--resume``'s run; one that does not exist is bad input."""
    try:
        return mlflow.MlflowClient().get_run(run_id)
    except mlflow.exceptions.MlflowException:
        raise UpstreamError(f"--resume {run_id}: no such run in this tracking store") from None


def _has_checkpoint(run_id: str) -> bool:
    folder = CHECKPOINT_ARTIFACT.rpartition("/")[0]
    try:
        listed = mlflow.MlflowClient().list_artifacts(run_id, folder)
    except (mlflow.exceptions.MlflowException, OSError) as err:
        raise UpstreamError(f"--resume {run_id}: its artifacts cannot be listed ({one_line(err)})") from None
    return any(f.path == CHECKPOINT_ARTIFACT for f in listed)


def _no_checkpoint(run_id: str) -> UpstreamError:
    return UpstreamError(
        f"--resume {run_id}: the run has no checkpoint yet (it stopped "
        "before finishing its first epoch); start it again instead"
    )


def _is_option(key: str) -> bool:
    """Whether ``key`` is an option of the running click command (outside one: assume so)."""
    ctx = click.get_current_context(silent=True)
    return ctx is None or key in {param.name for param in ctx.command.params}


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resume_checkpoint(run_id: str, dest: Path) -> Path:
    """Download the last checkpoint of ``run_id``, a run ``check_resumable`` accepted."""
    try:
        path = mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=CHECKPOINT_ARTIFACT, dst_path=str(dest)
        )
    except (mlflow.exceptions.MlflowException, OSError):  # gone since check_resumable looked
        raise _no_checkpoint(run_id) from None
    return Path(path)
