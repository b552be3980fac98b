"""Reading the training runs a report compares, and the setting each belongs to.

``collect_runs`` reads finished training runs (tags, params, metrics, ``history.csv``,
``architecture_trace.json``) from MLflow. Runs are comparable only when every parameter named in
``COMPARABILITY_KEYS`` is equal (``setting_of``); a run without one of them counts it as "".
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

import mlflow
import pandas as pd

from pipeline.tracking.errors import UpstreamError
from pipeline.tracking.runs import ENTRY_POINT_TAG

HISTORY_ARTIFACT = "history.csv"
TRACE_ARTIFACT = "architecture_trace.json"

# The training recipe (pipeline/training/config.py's options that change what is trained), with
# the default that a run logged before the option existed trained with.
RECIPE_DEFAULTS = {
    "lr": "0.05",
    "momentum": "0.9",
    "weight_decay": "0.0005",
    "warmup": "0.03",
    "lr_schedule": "cosine",
    "batch_size": "128",
    "augment": "none",
    "label_smoothing": "0",
    "mixup": "0",
    "ema_decay": "0",
    "tta": "none",
    "clip_grad": "0",
    "bn_bias_lr_scale": "1",
    "conv_init": "default",
    "bn_scale_frozen": "false",
    "bn_momentum": "0.1",
    "whiten_bias_epochs": "0",
    "lookahead": "0",
}

# Options of one arm only (growth; curriculum options beyond those the variant tag names): runs
# of one variant that differ in them are grouped apart and labelled with what differs.
VARIANT_KEYS = (
    "start_spec",
    "schedule",
    "growth_init",
    "growth_noise",
    "grow_on",
    "plateau_patience",
    "growth_rewarm",
    "growth_lr_scale",
    "pacing_a",
    "pacing_b",
    "tier_boundaries",
    "difficulty_score",
    "prune_anneal",
    "rejoin",
    "prune_from",
    "retire_easy",  # a dynamic run from before the option retired the easy tier: grouped apart
    "exits",
    "exit_weights",
)

# The parameters that must be equal for two runs to be compared or averaged: the data (its
# digest covers dataset, subset, validation size, split seed and label noise; the others are spelled out so
# that the report can say which differ), the training length, and the arithmetic. Extend here.
COMPARABILITY_KEYS = (
    "dataset",
    "data_digest",
    "subset",
    "val_size",
    "split_seed",
    "label_noise",
    "noise_kind",
    "noise_seed",
    "epochs",
    "budget",
    "budget_resolved",
    "precision",  # as resolved (fp32, bf16, fp16: tag precision_resolved), not as asked (auto)
    "device_kind",  # cpu, cuda or mps (tag device): wall-clock and arithmetic differ between them
    # The recipe both arms share: a run of another rate, decay or augmentation is another setting.
    *RECIPE_DEFAULTS,
)

# The keys that say how long a run trained: runs that differ only in them lie on one cost frontier.
LENGTH_KEYS = ("epochs", "budget", "budget_resolved")


def collect_runs(
    run_ids: Iterable[str], client: mlflow.MlflowClient | None = None
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame], dict[str, list]]:
    """Tags, params, metrics and the history and growth events of each training run.

    Returns ``runs_df`` (one row per run: run_id, run_name, entry_point, variant, seed (nullable
    int), final_spec, status, health (the run's verdict tag), setting (the ``COMPARABILITY_KEYS``
    params as canonical JSON), and every metric under its own name, at its last step),
    ``histories`` (run id -> per-epoch history, only for runs that logged ``history.csv``) and
    ``events`` (run id -> growth events from ``architecture_trace.json``; [] when none).
    """
    client = client or mlflow.MlflowClient()
    rows, histories, events = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="gcnn-report-") as tmp:
        for run_id in dict.fromkeys(run_ids):  # de-duplicated, in order
            try:
                run = client.get_run(run_id)
            except mlflow.exceptions.MlflowException:
                raise UpstreamError(f"run {run_id}: no such run in this tracking store") from None
            tags, params = run.data.tags, run.data.params
            rows.append(
                {
                    "run_id": run_id,
                    "run_name": run.info.run_name or "",
                    "entry_point": tags.get(ENTRY_POINT_TAG, ""),
                    "variant": tags.get("variant", ""),
                    "seed": _int_or_none(params.get("seed")),
                    "final_spec": tags.get("final_spec", ""),
                    "status": run.info.status,
                    "health": tags.get("health", ""),  # pipeline/training/health.py; "" before it
                    "setting": setting_of(
                        {
                            **params,
                            "precision": tags.get("precision_resolved", params.get("precision", "")),
                            "device_kind": tags.get("device", "").partition(":")[0],
                        }
                    ),
                    "variant_options": variant_options(params),
                    "budget_reference": budget_reference(params),
                    **run.data.metrics,
                }
            )
            present = {info.path for info in client.list_artifacts(run_id)}
            dest = Path(tmp) / run_id
            dest.mkdir()
            if HISTORY_ARTIFACT in present:
                histories[run_id] = pd.read_csv(
                    client.download_artifacts(run_id, HISTORY_ARTIFACT, str(dest))
                )
            events[run_id] = []
            if TRACE_ARTIFACT in present:
                trace = json.loads(
                    Path(client.download_artifacts(run_id, TRACE_ARTIFACT, str(dest))).read_text()
                )
                events[run_id] = list(trace.get("events", []))
    base = [
        "run_id",
        "run_name",
        "entry_point",
        "variant",
        "seed",
        "final_spec",
        "status",
        "health",
        "setting",
        "variant_options",
        "budget_reference",
    ]
    runs_df = pd.DataFrame(rows, columns=None if rows else base)
    runs_df = runs_df[base + sorted(c for c in runs_df.columns if c not in base)]
    runs_df["seed"] = runs_df["seed"].astype("Int64")
    return runs_df, histories, events


def setting_of(params: dict[str, str]) -> str:
    """The run's ``COMPARABILITY_KEYS`` params as canonical JSON; a missing one is "".

    Numbers are compared as numbers (``mlflow run`` may log ``6.0`` where the CLI logs ``6``).
    Clean labels read as ``CLEAN_DATA`` whatever the unused noise options were, and so does a run
    from before label noise existed. A budget that is another run's cost (``run:ID[:s][*f]``) is
    one setting whatever the run: each seed's run names its own reference
    (``budget_reference``), which pairs it."""
    given = {**RECIPE_DEFAULTS, **params}
    if _canonical(given.get("label_noise", "0")) == "0":
        given.update(CLEAN_DATA)
    values = {key: _canonical(given.get(key, "")) for key in COMPARABILITY_KEYS}
    reference = budget_reference(params)
    if reference:
        values["budget"] = values["budget"].replace(reference, "RUN", 1)
        values["budget_resolved"] = ""
    return json.dumps(values)


# Training options that act only when the network grows: a run that does not grow (it logs no
# start_spec) trained the same whatever they say, so they do not set it apart.
GROWTH_ONLY = ("growth_rewarm", "growth_lr_scale")


def variant_options(params: dict[str, str]) -> str:
    """The run's ``VARIANT_KEYS`` params as canonical JSON (only those it logged, and for a run
    that does not grow, none of ``GROWTH_ONLY``)."""
    keys = VARIANT_KEYS if "start_spec" in params else [k for k in VARIANT_KEYS if k not in GROWTH_ONLY]
    return json.dumps({key: _canonical(params[key]) for key in keys if key in params}, sort_keys=True)


CLEAN_DATA = {"label_noise": "0", "noise_kind": "symmetric", "noise_seed": "0"}


def budget_reference(params: dict[str, str]) -> str:
    """The run id of a ``--budget run:ID...`` (the run whose cost this one was given), or ''."""
    match = re.fullmatch(r"run:([0-9a-f]{32})(:s)?(\*.*)?", _canonical(params.get("budget", "")))
    return match.group(1) if match else ""


def _canonical(value: str) -> str:
    # Not codec.canonical, on purpose: that rule also merges True/true, 1E-3/0.001, 1_000/1000 and
    # Infinity/inf and keeps an unbalanced quote ('x), so moving onto it would regroup stored
    # runs; tests/test_comparability.py pins where the two part.
    text = str(value).strip().strip("'")
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?", text):  # not a number (digests, names)
        return text
    number = float(text)
    return str(int(number)) if number.is_integer() else repr(number)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
