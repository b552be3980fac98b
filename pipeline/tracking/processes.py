"""Which process owns a RUNNING run: owner tags, liveness, stale runs, and a step that dies
with its launcher."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import mlflow

from pipeline.tracking.errors import FAILURE_TAG

# Which process owns a RUNNING run: so that a run whose process died can be told from a live one.
HOST_TAG = "process_host"
PID_TAG = "process_pid"
PROC_START_TAG = "process_start"  # the process's start time, so a reused pid is not taken as alive
BOOT_TAG = "process_boot"  # the machine's boot: a host name can outlive the machine (a VM, a container)


def owner_tags(pid: int | None = None) -> dict[str, str]:
    """Tags naming the process that keeps a run RUNNING (this one by default)."""
    pid = os.getpid() if pid is None else pid
    return {
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(pid),
        PROC_START_TAG: process_start(pid),
        BOOT_TAG: boot_id(),
    }


def boot_id() -> str:
    """This machine's boot (Linux's random boot id, new at every boot); '' where there is none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str:
    """When process ``pid`` started, as field 22 of /proc/PID/stat (clock ticks since boot); ''
    where there is no /proc. With the pid it names a process that a reused pid cannot pass for."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def process_alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` is alive and, where ``start`` is known, the one that started then."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return not start or process_start(pid) in ("", start)


def owned_elsewhere(tags: dict[str, str]) -> bool:
    """True when another process (alive, or on another host where that cannot be told) owns the run."""
    pid = tags.get(PID_TAG, "")
    if not pid.isdigit():
        return False
    if tags.get(HOST_TAG) != socket.gethostname():
        return True
    return int(pid) != os.getpid() and process_alive(int(pid), tags.get(PROC_START_TAG, ""))


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
        if not pid.isdigit() or process_alive(int(pid), tags.get(PROC_START_TAG, "")):
            continue
        client.set_tag(
            run.info.run_id, FAILURE_TAG, f"stale: process {pid} on {host} died while the run was RUNNING"
        )
        client.set_terminated(run.info.run_id, "FAILED")
        stale.append(run.info.run_id)
    return stale


# --- a step outlives no launcher ----------------------------------------------------------------
SHELLS = ("bash", "sh", "dash", "zsh")
_watching = False


def _launchers() -> list[tuple[int, str]]:
    """This process's parent, and the parent's parent while the parent is a shell: `mlflow run`
    starts a step as ``bash -c "python -m ..."``. Pairs of (pid, start time)."""
    chain, pid = [], os.getppid()
    while pid > 1 and len(chain) < 3:
        chain.append((pid, process_start(pid)))
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
        return state != "Z" and process_alive(pid, start)

    def watch() -> None:
        while all(running(pid, start) for pid, start in chain):
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()
