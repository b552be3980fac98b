"""What a run records beside its metrics: the dataset as an input, the label-noise mask, JSON and
files, and a scratch folder to write them from."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import mlflow
from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.meta_dataset import MetaDataset

from pipeline.data.dataset import Data
from pipeline.data.label_noise import noise_table


def log_dataset(data: Data, context: str = "training") -> None:
    """Record the data as a run input (filterable in the UI), its identity as params, and where
    a folder dataset was read from (its resolved path, an archive's sha256) as tags."""
    dataset = MetaDataset(CodeDatasetSource({"dataset": data.name}), name=data.name, digest=data.digest)
    mlflow.log_input(dataset, context=context, tags={f"size_{k}": str(v) for k, v in data.sizes().items()})
    mlflow.log_params(
        {
            "data_digest": data.digest,
            "data_source_digest": data.source_digest,
            **{f"data_size_{k}": str(v) for k, v in data.sizes().items()},
        }
    )
    # Tags, not params: a resumed run may read the same files from another path.
    if data.source:
        mlflow.set_tag("data_source", data.source)
    if data.source_sha256:
        mlflow.set_tag("data_source_sha256", data.source_sha256)
    if data.image_rule:
        mlflow.set_tag("data_images", data.image_rule)
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


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="gcnn-") as tmp:
        yield Path(tmp)
