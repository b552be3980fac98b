"""One resumer per run: a claim tag per ``--resume``, the earliest live claim wins."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator

import mlflow

from pipeline.tracking.errors import UpstreamError
from pipeline.tracking.processes import process_alive, process_start

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
        return process_alive(int(pid), start)
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
    me = f"{socket.gethostname()}:{pid}:{process_start(pid)}"
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
