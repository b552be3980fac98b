"""How a long parameter is logged (a short digest in the run, its full text as an artifact) and read back."""

from __future__ import annotations

import hashlib
import re

import mlflow

from pipeline.tracking.errors import UpstreamError

# A parameter longer than this is logged as a short digest, its full text as an artifact
# params/<key>.txt: the UI cuts long values, and a 500-character JSON spec reads as noise.
LONG_PARAM = 100
LONG_PARAM_DIR = "params"
# shown_param's digest form, read back by full_param
_SHOWN = re.compile(r"sha256:(?P<digest>[0-9a-f]{12}), \d+ chars: params/(?P<key>[^/]+)\.txt")


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


def full_param(run_id: str, key: str, logged: str) -> str:
    """A parameter as the run was given it: ``logged`` itself, or for a long one the full text
    its digest names, read back from the run's artifact and checked against the digest."""
    shown = _SHOWN.fullmatch(logged)
    if shown is None:
        return logged
    where = f"{LONG_PARAM_DIR}/{shown['key']}.txt"
    try:
        text = mlflow.artifacts.load_text(f"runs:/{run_id}/{where}")
    except (mlflow.exceptions.MlflowException, OSError):
        raise UpstreamError(f"run {run_id}: its parameter {key} is in {where}, which it lacks") from None
    if hashlib.sha256(text.encode()).hexdigest()[:12] != shown["digest"]:
        raise UpstreamError(f"run {run_id}: {where} does not match its parameter {key}'s digest")
    return text
