"""MLflow glue: the run context every entry point opens, and helpers that log in one place.

A run ends FINISHED only when its step returned normally. An error ends it FAILED with the
reason in the ``failure_reason`` tag; Ctrl-C or SIGTERM ends it KILLED.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import click
import mlflow
from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.meta_dataset import MetaDataset

from pipeline.data import Data, noise_table

FAILURE_TAG = "failure_reason"
ENTRY_POINT_TAG = "entry_point"
# Which process owns a RUNNING run: so that a run whose process died can be told from a live one.
HOST_TAG = "process_host"
PID_TAG = "process_pid"
PROC_START_TAG = "process_start"  # the process's start time, so a reused pid is not taken as alive


class Terminated(BaseException):
    """SIGTERM, turned into an exception so the run is closed as KILLED like Ctrl-C."""


def raise_terminated(signum, frame):
    """A SIGTERM handler: stop the way Ctrl-C does, so what is open is closed."""
    raise Terminated()


DEFAULT_EXPERIMENT = "growing-cnn"
# MLflow 3's UI opens an experiment without this tag in its GenAI view ("Traces"); this one
# opens on the runs table, as a model-training experiment.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# A parameter longer than this is logged as a short digest, its full text as an artifact
# params/<key>.txt: the UI cuts long values, and a 500-character JSON spec reads as noise.
LONG_PARAM = 100
LONG_PARAM_DIR = "params"


def shown_param(key: str, value: str) -> str:
    """The value logged for a parameter: itself, or for a long one a digest that names where
    its full text is (``sha256:1a2b3c4d5e6f, 496 chars: params/spec.txt``)."""
    value = str(value)
    if len(value) <= LONG_PARAM:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:12]
    return f"sha256:{digest}, {len(value)} chars: {LONG_PARAM_DIR}/{key}.txt"


def log_params_shown(params: dict[str, str], run_id: str | None = None) -> None:
    """Log ``params`` as ``shown_param`` spells them, the full text of long ones as artifacts."""
    client = mlflow.MlflowClient()
    run_id = run_id or mlflow.active_run().info.run_id
    items = [mlflow.entities.Param(k, shown_param(k, v)) for k, v in params.items()]
    for start in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
        client.log_batch(run_id, params=items[start : start + 100])
    for key, value in params.items():
        if len(str(value)) > LONG_PARAM:
            client.log_text(run_id, str(value), f"{LONG_PARAM_DIR}/{key}.txt")


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
    experiment_id = experiment.experiment_id if experiment else mlflow.create_experiment(name)
    mark_model_experiment(experiment_id)
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


def mark_model_experiment(experiment_id: str) -> None:
    """Tag the experiment as model training unless its kind is already set (by a user or MLflow)."""
    client = mlflow.MlflowClient()
    experiment = client.get_experiment(experiment_id)
    if EXPERIMENT_KIND_TAG not in experiment.tags:
        client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)


def current_run_name() -> str:
    """The active run's name as the store has it (``mlflow.active_run()`` keeps the name the run
    had when it was opened, before ``tracked_run`` renamed it)."""
    return mlflow.get_run(mlflow.active_run().info.run_id).info.run_name or ""


def unique_run_name(experiment_id: str, base: str, own_run_id: str = "") -> str:
    """``base``, or ``base-2``, ``base-3``... when another run of the experiment has that name."""
    taken = {
        r.info.run_name
        for r in mlflow.MlflowClient().search_runs(
            [experiment_id], filter_string=f"attributes.run_name LIKE '{base}%'", max_results=5000
        )
        if r.info.run_id != own_run_id
    }
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def code_version() -> str:
    """The commit plus a digest of uncommitted changes to tracked files; 'unknown' outside git.

    main reuses a finished step only when this matches, so an edited working tree never
    passes for the code a run was made with."""
    repo = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
        diff = subprocess.run(
            ["git", "-C", str(repo), "diff", "HEAD"], capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit[:12]}-{hashlib.sha256(diff).hexdigest()[:12]}" if diff else commit[:12]


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
            run = mlflow.start_run(run_name=name)
        else:
            run = mlflow.start_run(run_id=run_id)
            mark_model_experiment(run.info.experiment_id)
            if run_id is None and run_name:  # `mlflow run`'s run, with its generated name
                name = unique_run_name(run.info.experiment_id, run_name, run.info.run_id)
                mlflow.MlflowClient().update_run(run.info.run_id, name=name)
    except mlflow.exceptions.MlflowException as err:
        store_error = _unwritable(err, f"tracking store {mlflow.get_tracking_uri()}")
        if store_error is None:
            raise
        raise store_error from None
    finally:
        quiet.setLevel(level)
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        check_artifact_store(run.info.artifact_uri)
        mlflow.set_tags(
            {ENTRY_POINT_TAG: entry_point, "code_version": code_version(), **owner_tags(), **(tags or {})}
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
        mlflow.end_run("FINISHED")
    finally:
        signal.signal(signal.SIGTERM, previous)


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


def owned_elsewhere(tags: dict[str, str]) -> bool:
    """True when another process (alive, or on another host where that cannot be told) owns the run."""
    pid = tags.get(PID_TAG, "")
    if not pid.isdigit():
        return False
    if tags.get(HOST_TAG) != socket.gethostname():
        return True
    return int(pid) != os.getpid() and _process_alive(int(pid), tags.get(PROC_START_TAG, ""))


# --- one resumer per run -------------------------------------------------------------------
# A run can be reopened by two `--resume` at once; MLflow has no atomic test-and-set, so each
# resumer writes a claim tag (its own key: writes never collide), waits until any claim made
# before it is visible, and the earliest live claim wins. A claim lives until its run closes;
# a heartbeat tag tells a live claimant on another host from a dead one.
CLAIM_PREFIX = "resume_claim."
HEARTBEAT_PREFIX = "resume_heartbeat."
CLAIM_SETTLE_S = 1.0  # claims whose clocks are this close are ordered by the store, not the clock
HEARTBEAT_S = 30.0


def _claim_key(tag: str) -> str:
    return tag.split(".", 1)[1]


def _claim_alive(tags: dict[str, str], key: str) -> bool:
    host, pid, start = [*key.split(":"), "", ""][:3]  # host:pid:process start
    if host == socket.gethostname() and pid.isdigit():
        return _process_alive(int(pid), start)
    try:
        beat = float(tags.get(HEARTBEAT_PREFIX + key, "0"))
    except ValueError:
        return False
    return time.time() - beat < 3 * HEARTBEAT_S


@contextlib.contextmanager
def resume_lock(run_id: str) -> Iterator[None]:
    """Hold ``run_id`` for this process while it resumes the run; refuse if another holds it."""
    client = mlflow.MlflowClient()
    pid = os.getpid()
    me = f"{socket.gethostname()}:{pid}:{_process_start(pid)}"
    claim, beat = CLAIM_PREFIX + me, HEARTBEAT_PREFIX + me
    client.set_tag(run_id, beat, f"{time.time():.3f}")
    client.set_tag(run_id, claim, str(time.time_ns()))
    time.sleep(CLAIM_SETTLE_S)
    tags = client.get_run(run_id).data.tags
    live = sorted(
        (int(value), _claim_key(tag))
        for tag, value in tags.items()
        if tag.startswith(CLAIM_PREFIX) and value.isdigit() and _claim_alive(tags, _claim_key(tag))
    )
    if live and live[0][1] != me:
        _release(client, run_id, claim, beat)
        host, pid_there = [*live[0][1].split(":"), ""][:2]
        since = time.strftime("%H:%M:%S", time.localtime(live[0][0] / 1e9))
        raise UpstreamError(
            f"--resume {run_id}: process {pid_there} on {host} is already resuming this run "
            f"(since {since}); wait for it to end, or stop it first"
        )
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(HEARTBEAT_S):
            with contextlib.suppress(Exception):  # a missed beat only ages the claim
                client.set_tag(run_id, beat, f"{time.time():.3f}")

    beater = threading.Thread(target=heartbeat, name="resume-heartbeat", daemon=True)
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join()
        _release(client, run_id, claim, beat)


def _release(client: mlflow.MlflowClient, run_id: str, *tags: str) -> None:
    for tag in tags:
        with contextlib.suppress(mlflow.exceptions.MlflowException):
            client.delete_tag(run_id, tag)


# --- a step outlives no launcher ----------------------------------------------------------------
SHELLS = ("bash", "sh", "dash", "zsh")
_watching = False


def _launchers() -> list[tuple[int, str]]:
    """This process's parent, and the parent's parent while the parent is a shell: `mlflow run`
    starts a step as ``bash -c "python -m ..."``. Pairs of (pid, start time)."""
    chain, pid = [], os.getppid()
    while pid > 1 and len(chain) < 3:
        chain.append((pid, _process_start(pid)))
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])  # ppid
        except (OSError, ValueError, IndexError):
            break
        if comm not in SHELLS:
            break
    return chain


def watch_launcher(interval_s: float = 1.0) -> None:
    """When the process that launched this step dies, SIGTERM this one.

    SIGTERM to `mlflow run` (or to a main that `mlflow run` started) ends that process without
    passing the signal on, so the step it started trained on as an orphan whose run stayed
    RUNNING. Watching the launcher turns its death into this step's SIGTERM: the run ends
    KILLED with its last checkpoint, as if the signal had been forwarded."""
    global _watching
    chain = _launchers()
    if _watching or not chain:
        return
    _watching = True

    def running(pid: int, start: str) -> bool:  # a zombie (dead, not yet reaped) is gone
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            state = ""
        return state != "Z" and _process_alive(pid, start)

    def watch() -> None:
        while all(running(pid, start) for pid, start in chain):
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def wait_closed(run_id: str, timeout_s: float = 120.0) -> str:
    """Wait until ``run_id`` is no longer RUNNING (a cancelled step closing itself); its status."""
    client = mlflow.MlflowClient()
    deadline = time.monotonic() + timeout_s
    status = client.get_run(run_id).info.status
    while status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
        status = client.get_run(run_id).info.status
    return status


def owner_tags(pid: int | None = None) -> dict[str, str]:
    """Tags naming the process that keeps a run RUNNING (this one by default)."""
    pid = os.getpid() if pid is None else pid
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), PROC_START_TAG: _process_start(pid)}


def _process_start(pid: int) -> str:
    # Field 22 of /proc/PID/stat: start time in clock ticks since boot ('' where there is no /proc).
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _process_alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return not start or _process_start(pid) in ("", start)


def fail_stale_runs(client: mlflow.MlflowClient | None = None) -> list[str]:
    """Mark FAILED every RUNNING run of this tracking store whose owning process, on this host,
    no longer exists (killed with SIGKILL, out of memory, power loss). Returns their ids.

    Runs owned by other hosts are left alone: their liveness cannot be checked from here (a
    killed worker's Optuna trial is retried by heartbeat; its MLflow run stays RUNNING until a
    pipeline starts on its host). Runs without owner tags (not started by this pipeline) too."""
    client = client or mlflow.MlflowClient()
    host = socket.gethostname()
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    if not experiment_ids:
        return []
    stale = []
    for run in client.search_runs(
        experiment_ids,
        filter_string=f"attributes.status = 'RUNNING' and tags.{HOST_TAG} = '{host}'",
        max_results=1000,
    ):
        tags = run.data.tags
        pid = tags.get(PID_TAG, "")
        if not pid.isdigit() or _process_alive(int(pid), tags.get(PROC_START_TAG, "")):
            continue
        client.set_tag(
            run.info.run_id, FAILURE_TAG, f"stale: process {pid} on {host} died while the run was RUNNING"
        )
        client.set_terminated(run.info.run_id, "FAILED")
        stale.append(run.info.run_id)
    return stale


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text[:500]


def failure_reason(err: BaseException) -> str:
    """A failed run's ``failure_reason``: the message of bad input, and for anything else (a
    bug) the exception's type too, so the two never read alike."""
    return one_line(err) if isinstance(err, user_errors()) else f"{type(err).__name__}: {one_line(err)}"


def log_dataset(data: Data, context: str = "training") -> None:
    """Record the data as a run input (filterable in the UI) and its identity as params."""
    dataset = MetaDataset(CodeDatasetSource({"dataset": data.name}), name=data.name, digest=data.digest)
    mlflow.log_input(dataset, context=context, tags={f"size_{k}": str(v) for k, v in data.sizes().items()})
    mlflow.log_params(
        {
            "data_digest": data.digest,
            "data_source_digest": data.source_digest,
            **{f"data_size_{k}": str(v) for k, v in data.sizes().items()},
        }
    )
    if data.noisy:
        log_label_noise(data)


NOISE_ARTIFACT = "data/label_noise.parquet"


def log_label_noise(data: Data) -> None:
    """The stored mask of flipped labels (``data/label_noise.parquet``), its digest and the
    share of each split that was flipped."""
    mlflow.log_param("data_noise_digest", data.noise_digest)
    for split in ("train", "val"):
        mlflow.log_metric(f"noise/flipped_share_{split}", float(data.split(split).flipped.float().mean()))
    with scratch_dir() as tmp:
        path = tmp / Path(NOISE_ARTIFACT).name
        noise_table(data).to_parquet(path, index=False)
        mlflow.log_artifact(str(path), str(Path(NOISE_ARTIFACT).parent))


def log_json(obj, artifact_file: str) -> None:
    mlflow.log_text(json.dumps(obj, indent=2, sort_keys=True), artifact_file)


def log_file(path: Path, artifact_path: str | None = None) -> None:
    mlflow.log_artifact(str(path), artifact_path)


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="gcnn-") as tmp:
        yield Path(tmp)


# Errors that are the user's to fix: they get one line and exit code 2, never a traceback.
# Only the project's own types, raised where input is checked: a ValueError from anywhere else
# is a bug and keeps its traceback (exit 1).
def user_errors() -> tuple[type[BaseException], ...]:
    from models.io import ModelFileError
    from models.schedule import GrowthError
    from models.spec import SpecError
    from pipeline.curriculum.checks import CurriculumError
    from pipeline.data import DataError
    from pipeline.loop import DeviceError, DivergenceError
    from pipeline.precision import PrecisionError
    from pipeline.pruning import PruningError
    from pipeline.training import CheckpointError, ConfigError

    return (
        DataError,
        SpecError,
        GrowthError,
        ConfigError,  # BudgetError too
        CurriculumError,
        PruningError,
        CheckpointError,
        ModelFileError,
        DivergenceError,
        DeviceError,
        PrecisionError,
        UpstreamError,
    )


class UpstreamError(ValueError):
    """An upstream run or artifact that is missing or does not fit this step's data."""


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


class TrackingStoreError(UpstreamError):
    """The tracking store cannot be reached or written; the message says what to do."""


PROBE_TIMEOUT_S = 5.0  # MLflow's own retries take about 4 minutes before a traceback
_UNWRITABLE = ("readonly", "read-only", "permission denied", "not permitted")


def check_tracking_store() -> None:
    """Fail fast when the tracking server does not answer: connect to it once, briefly."""
    uri = mlflow.get_tracking_uri()
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname or "localhost", port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as err:
        raise TrackingStoreError(
            f"tracking server {uri} is unreachable ({err.strerror or err}): start it, or point "
            "MLFLOW_TRACKING_URI at a running server or a local store (sqlite:///mlflow.db)"
        ) from None


def _unwritable(err: BaseException, what: str) -> TrackingStoreError | None:
    """A TrackingStoreError for ``err`` when it says the store is read-only, else None."""
    lines = [
        line.strip()
        for e in (err, err.__cause__, err.__context__)
        if e is not None
        for line in str(e).splitlines()
        if any(word in line.lower() for word in _UNWRITABLE)
    ]
    if not lines and not isinstance(err, PermissionError):
        return None
    return TrackingStoreError(
        f"{what} cannot be written ({(lines or [one_line(err)])[0][:120]}): make it writable, or "
        "point MLFLOW_TRACKING_URI at a writable store"
    )


def check_artifact_store(artifact_uri: str) -> None:
    """Write and remove a probe file where a local run's artifacts go, before any training."""
    parsed = urlparse(artifact_uri)
    if parsed.scheme not in ("", "file"):
        return  # remote artifact stores answer for themselves
    folder = Path(parsed.path if parsed.scheme else artifact_uri)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-"):
            pass
    except OSError as err:
        raise TrackingStoreError(
            f"artifact store {folder} cannot be written ({err.strerror or err}): make it writable, "
            "or create the experiment with a writable --artifact-location"
        ) from None


def main_guard(fn):
    """Wrap a click command body: user errors become one line on stderr and exit status 2."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # Read now: MLflow clears the variable when a run ends, and with --resume the run
        # that ends is not the one `mlflow run` made for this step.
        outer_run_id = os.environ.get("MLFLOW_RUN_ID", "")
        # SIGTERM before the run is open (data loading) is an interruption too, not a silent death.
        previous = signal.signal(signal.SIGTERM, raise_terminated)
        # A step that `mlflow run` started: python -m pipeline.<step> runs pipeline/<step>.py or
        # pipeline/<step>/__main__.py.
        if outer_run_id and Path(__file__).resolve().parent in Path(sys.argv[0]).resolve().parents:
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
            click.echo("interrupted: the run is marked KILLED; resume it with --resume RUN_ID", err=True)
            sys.exit(130)
        except Exception as err:  # a bug: the run says which exception, the traceback stays
            _fail_outer_run(err, outer_run_id)
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)

    return wrapper


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
