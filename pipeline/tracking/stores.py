"""The tracking and artifact stores: reachable and writable before a run trains, or one line
that says what to do."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import mlflow

from pipeline.tracking.errors import TrackingStoreError, one_line

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


def unwritable(err: BaseException, what: str) -> TrackingStoreError | None:
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
