"""The scores table that score_difficulty writes and train_dynamic and evaluate read.

One row per example of the train, validation and test splits:

    split (str)  index (int64)  label (int64)  score_<name> (float64) ...  tier (str)  tier_id (int64)

``index`` is the example's stable index (``Split.index``), so rows are matched to a split by
index, never by position. The parquet file carries the data digest and scorer settings in its
metadata, so the file alone says what data it belongs to; ``load_scores`` checks that against
the data the consuming step loaded before handing anything over. ``find_scores_run`` finds the
newest table for a data digest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from pipeline.data.dataset import Data, Split
from pipeline.data.tiers import TIER_NAMES
from pipeline.tracking.artifacts import scratch_dir
from pipeline.tracking.errors import UpstreamError
from pipeline.tracking.runs import ENTRY_POINT_TAG

# The entry point that writes this table: pipeline.score_difficulty takes its name from here.
PRODUCER = "score_difficulty"
SCORES_ARTIFACT = "scores/scores.parquet"
SPLITS = ("train", "val", "test")
SCORE_PREFIX = "score_"
META_KEY = b"score_difficulty"


def score_column(scorer: str) -> str:
    return SCORE_PREFIX + scorer


def make_table(
    splits: dict[str, Split], scores: dict[str, dict[str, torch.Tensor]], tiers: dict[str, torch.Tensor]
) -> pd.DataFrame:
    """The table from each split's examples, its (N,) scores per scorer and (N,) tier ids."""
    frames = []
    for name, split in splits.items():
        columns = {
            "split": name,
            "index": split.index.cpu().numpy().astype(np.int64),
            "label": split.y.cpu().numpy().astype(np.int64),
        }
        for scorer, values in scores[name].items():
            columns[score_column(scorer)] = values.double().cpu().numpy()
        tier_id = tiers[name].cpu().numpy().astype(np.int64)
        columns["tier"] = np.asarray(TIER_NAMES, dtype=object)[tier_id]
        columns["tier_id"] = tier_id
        frames.append(pd.DataFrame(columns))
    frame = pd.concat(frames, ignore_index=True)
    frame["split"] = frame["split"].astype(str)
    frame["tier"] = frame["tier"].astype(str)
    return frame


def save_table(frame: pd.DataFrame, path: Path, meta: dict) -> Path:
    """Write ``frame`` as parquet with ``meta`` (data digest, scorers, ...) in its metadata."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    schema_meta = dict(table.schema.metadata or {})
    schema_meta[META_KEY] = json.dumps(meta, sort_keys=True).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata(schema_meta), path)
    return path


def read_table(path: Path) -> tuple[pd.DataFrame, dict]:
    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(META_KEY)
    meta = json.loads(raw) if raw else {}
    return table.to_pandas(), meta


@dataclass
class ScoresTable:
    """A checked scores table; look-ups return tensors in a split's position order."""

    frame: pd.DataFrame
    run_id: str
    data_digest: str
    scorers: tuple[str, ...]
    tier_scorer: str
    _by_split: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    def rows(self, split: Split, split_name: str) -> pd.DataFrame:
        """The rows of ``split``'s examples, in its position order (matched by stable index)."""
        if split_name not in self._by_split:
            part = self.frame[self.frame["split"] == split_name]
            self._by_split[split_name] = part.set_index("index")
        part = self._by_split[split_name]
        wanted = split.index.cpu().numpy()
        missing = ~np.isin(wanted, part.index.to_numpy())
        if missing.any():
            raise UpstreamError(
                f"scores run {self.run_id} has no {split_name} row for index "
                f"{int(wanted[missing][0])} ({int(missing.sum())} missing)"
            )
        return part.loc[wanted]

    def tiers_for(self, split: Split, split_name: str) -> torch.Tensor:
        """(N,) int64 tier ids (0 easy, 1 medium, 2 hard) of ``split``'s examples."""
        return torch.from_numpy(self.rows(split, split_name)["tier_id"].to_numpy(np.int64).copy())

    def scores_for(self, split: Split, split_name: str, scorer: str) -> torch.Tensor:
        """(N,) float32 ``scorer`` scores of ``split``'s examples; higher is harder."""
        if scorer not in self.scorers:
            raise UpstreamError(
                f"scores run {self.run_id} has no {scorer!r} scores (it has: {', '.join(self.scorers)})"
            )
        values = self.rows(split, split_name)[score_column(scorer)].to_numpy(np.float32)
        return torch.from_numpy(values.copy())


def parse_ref(ref: str) -> tuple[str, str]:
    """``RUN_ID`` or ``runs:/RUN_ID[/path]`` -> (run id, artifact path of the table)."""
    ref = ref.strip()
    if ref.startswith("runs:/"):
        run_id, _, path = ref[len("runs:/") :].strip("/").partition("/")
        if not path:
            path = SCORES_ARTIFACT
        elif not path.endswith(".parquet"):
            path = path.rstrip("/") + "/" + Path(SCORES_ARTIFACT).name
        return run_id, path
    return ref, SCORES_ARTIFACT


def find_scores_run(data: Data) -> str:
    """The newest FINISHED score_difficulty run for exactly this data (digest), or '' (what
    ``--scores-run auto`` resolves to)."""
    runs = mlflow.search_runs(
        search_all_experiments=True,
        filter_string=(
            f"tags.{ENTRY_POINT_TAG} = '{PRODUCER}' and params.data_digest = '{data.digest}'"
            " and attributes.status = 'FINISHED'"
        ),
        order_by=["attributes.start_time DESC"],
        max_results=1,
        output_format="list",
    )
    return runs[0].info.run_id if runs else ""


# Tables read, by (tracking store, run id, artifact): a FINISHED run's artifacts do not change,
# and tune's trials and evaluate's runs would otherwise download the same table again. Every
# call still checks the table against the data it is given.
_READ: dict[tuple[str, str, str], tuple[pd.DataFrame, dict]] = {}


def load_scores(ref: str, data: Data) -> ScoresTable:
    """The scores table of a FINISHED score_difficulty run, checked against ``data``.

    Refuses, with one line naming the cause, a run that does not exist, a run of another
    entry point, a table for other data (digest, split or size), and missing or NaN rows for
    any example of the splits ``data`` holds.
    """
    run_id, artifact = parse_ref(ref)
    if not run_id:
        raise UpstreamError(f"scores reference {ref!r} names no run")
    client = mlflow.MlflowClient()
    try:
        run = client.get_run(run_id)
    except mlflow.exceptions.MlflowException:
        raise UpstreamError(f"scores run {run_id}: no such run in this tracking store") from None
    kind = run.data.tags.get(ENTRY_POINT_TAG)
    if kind != PRODUCER:
        raise UpstreamError(f"run {run_id} is a {kind or 'untagged'} run, not {PRODUCER}")
    if run.info.status != "FINISHED":
        raise UpstreamError(f"scores run {run_id} is {run.info.status}; use a FINISHED {PRODUCER} run")
    if run.info.lifecycle_stage == "deleted":  # still readable until garbage-collected: refuse it
        raise UpstreamError(
            f"scores run {run_id} is deleted; restore it (mlflow runs restore) or score again"
        )
    _check_digest(run_id, run.data.params.get("data_digest"), data)
    key = (mlflow.get_tracking_uri(), run_id, artifact)
    if key not in _READ:
        _READ[key] = _download_table(run_id, artifact)
    frame, meta = _READ[key]
    _check_digest(run_id, meta.get("data_digest"), data)
    table = ScoresTable(
        frame, run_id, data.digest, tuple(meta.get("scorers", ())), meta.get("tier_scorer", "")
    )
    check_table(table, data)
    return table


def _download_table(run_id: str, artifact: str) -> tuple[pd.DataFrame, dict]:
    with scratch_dir() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path=artifact, dst_path=str(tmp)
            )
        except (mlflow.exceptions.MlflowException, OSError):
            raise UpstreamError(f"scores run {run_id} has no artifact {artifact}") from None
        try:
            return read_table(Path(path))
        except (pa.ArrowException, OSError, ValueError) as err:
            raise UpstreamError(
                f"scores run {run_id}: {artifact} is not a readable parquet file ({type(err).__name__})"
            ) from None


def _check_digest(run_id: str, digest: str | None, data: Data) -> None:
    if digest != data.digest:
        raise UpstreamError(
            f"scores run {run_id} is for data digest {digest}, this run loaded "
            f"{data.digest} (different dataset, subset or split seed)"
        )


def check_table(table: ScoresTable, data: Data) -> None:
    """Columns as the schema says; every example of every split ``data`` holds has exactly one
    row with finite scores and a valid tier; no split has rows for examples it lacks."""
    frame, run_id = table.frame, table.run_id
    if not table.scorers or table.tier_scorer not in table.scorers:
        raise UpstreamError(f"scores run {run_id}: the table does not say its scorers and tier scorer")
    required = ["split", "index", "label", *map(score_column, table.scorers), "tier", "tier_id"]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise UpstreamError(f"scores run {run_id}: the table lacks column(s) {', '.join(missing)}")
    for name, size in data.sizes().items():
        part = frame[frame["split"] == name]
        if len(part) != size:
            raise UpstreamError(
                f"scores run {run_id} has {len(part)} {name} rows, this run loaded "
                f"{size} {name} examples (different subset or split)"
            )
        if part["index"].duplicated().any():
            raise UpstreamError(f"scores run {run_id} has duplicate {name} rows")
        rows = table.rows(data.split(name), name)  # raises on an index it lacks
        if not np.array_equal(rows["label"].to_numpy(), data.split(name).y.cpu().numpy()):
            raise UpstreamError(f"scores run {run_id}: {name} labels differ from the data loaded")
        values = rows[[score_column(s) for s in table.scorers]].to_numpy(np.float64)
        bad = ~np.isfinite(values).all(axis=1)
        tier_ok = rows["tier_id"].isin(range(len(TIER_NAMES))).to_numpy()
        if bad.any() or not tier_ok.all():
            first = int(rows.index[bad | ~tier_ok][0])
            raise UpstreamError(
                f"scores run {run_id} has NaN scores or no tier for {name} index {first} "
                f"({int((bad | ~tier_ok).sum())} such rows)"
            )


def tier_metrics(table: pd.DataFrame, tier_scorer: str) -> dict[str, float]:
    """Each tier's share of each split and its mean tier score."""
    out = {}
    column = score_column(tier_scorer)
    for name, part in table.groupby("split"):
        for tier_id, tier in enumerate(TIER_NAMES):
            rows = part[part["tier_id"] == tier_id]
            out[f"tiers/{name}_share_{tier}"] = len(rows) / max(len(part), 1)
            if len(rows):
                out[f"tiers/{name}_{tier_scorer}_{tier}"] = float(rows[column].mean())
    return out


def tier_counts(table: pd.DataFrame, classes: list[str]) -> pd.DataFrame:
    """Examples per (split, class) and tier."""
    counts = table.groupby(["split", "label", "tier_id"]).size().unstack("tier_id", fill_value=0)
    counts = counts.reindex(columns=range(len(TIER_NAMES)), fill_value=0)
    counts.columns = list(TIER_NAMES)
    counts = counts.reset_index()
    counts.insert(2, "class", [classes[i] for i in counts["label"]])
    return counts.set_index(["split", "label", "class"])
