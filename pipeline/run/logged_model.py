"""A trained network as an MLflow Model (models/served.py), and the registry's champion.

The logged model is a pyfunc made from code around the safetensors weights (spec in their
metadata) and the training split's normalisation, so ``mlflow.pyfunc.load_model``,
``mlflow models serve`` and the Model Registry can use it and nothing is unpickled. Its
signature says what it takes: uint8 images (N, C, H, W); what it returns: class probabilities.
"""

from __future__ import annotations

import functools
import json
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import click
import mlflow
import numpy as np
import torch
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.types import Schema, TensorSpec
from mlflow.utils.validation import _validate_model_name

from models.builder import SpecNet
from models.errors import UserError
from models.io import PREPROCESS, WEIGHTS, save_model
from pipeline.data.dataset import Data
from pipeline.tracking.errors import one_line

REPO = Path(__file__).resolve().parents[2]
MODEL_ID_TAG = "logged_model_id"  # on a training run: its MLflow Model (models:/<id>)
CHAMPION = "champion"
# What serving needs, pinned to what trained the model; listed rather than inferred, which
# would import the model in a subprocess at every log. Each entry names the distributions that
# provide it, in order of preference: MLflow also ships as mlflow-skinny (a small image's).
REQUIREMENTS = (("mlflow", "mlflow-skinny"), ("torch",), ("numpy",), ("safetensors",))


class ServingRequirementError(UserError, RuntimeError):
    """An installed package the logged model must pin cannot be found; raised before training."""


@functools.cache
def serving_requirements() -> tuple[str, ...]:
    """The logged model's pip pins, from the installed distributions. Called before a run trains
    (``session.start_training``), so a missing one fails then, not after the last epoch."""
    return installed_pins(REQUIREMENTS)


def installed_pins(requirements: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """``name==version`` of the first installed distribution of each requirement's names."""
    pins = []
    for names in requirements:
        for name in names:
            try:
                pins.append(f"{name}=={version(name)}")
                break
            except PackageNotFoundError:
                continue
        else:
            raise ServingRequirementError(
                f"none of {', '.join(names)} is installed as a distribution, so the run's model "
                "could not name what serving it needs; install it with pip"
            )
    return tuple(pins)


def raw_images(data: Data, x: torch.Tensor) -> np.ndarray:
    """Normalised images back to the uint8 the dataset stores: (N, C, H, W)."""
    mean = torch.tensor(data.mean).view(1, -1, 1, 1)
    std = torch.tensor(data.std).view(1, -1, 1, 1)
    return (x.cpu().float() * std + mean).mul(255).round().clamp(0, 255).to(torch.uint8).numpy()


def signature(data: Data) -> ModelSignature:
    channels, height, width = data.input_shape
    return ModelSignature(
        # Unnamed: predict gets one array, and a request is just {"inputs": images}.
        inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, channels, height, width))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, data.num_classes))]),
    )


def log_classifier(model: SpecNet, data: Data, name: str, tmp: Path, tta: str = "none") -> str:
    """Log ``model`` as an MLflow Model of the active run, tag the run with its id; the id. The
    served model reads images as ``tta`` says (``--tta``), as validation and evaluate did."""
    if not data.mean:
        raise ValueError("the data carries no normalisation statistics (Data.mean, Data.std)")
    folder = tmp / "mlflow-model"
    weights = save_model(model, folder / "model.safetensors")
    preprocess = folder / "preprocess.json"
    preprocess.write_text(
        json.dumps(
            {
                "input_shape": list(data.input_shape),
                "mean": list(data.mean),
                "std": list(data.std),
                "classes": list(data.classes),
                "dataset": data.name,
                "data_digest": data.digest,
                "tta": tta,
            },
            indent=2,
        )
    )
    # Named after its run; MLflow refuses / : . % and quotes in a model's name (prune0.3).
    model_name = re.sub(r"[/:.%\"']", "_", name) or "model"
    info = _log(model_name=model_name, weights=weights, preprocess=preprocess, data=data)
    mlflow.set_tag(MODEL_ID_TAG, info.model_id)
    _drop_earlier_attempts(keep=info.model_id)
    return info.model_id


def _drop_earlier_attempts(keep: str) -> None:
    """Delete the active run's models but ``keep``, the one it was just tagged with: an attempt
    stopped by a Ctrl-C while MLflow wrote its model, and resumed (``--resume``), would otherwise
    show two, one of them half-written. A run logs one model, so any other is such an attempt's.
    Deleted only once the new one is logged and tagged, so the tag never names a deleted model;
    a store that cannot search or delete them leaves them, said in one line (the run is sound)."""
    run = mlflow.active_run()
    try:
        models = mlflow.search_logged_models(
            experiment_ids=[run.info.experiment_id],
            filter_string=f"source_run_id = '{run.info.run_id}'",
            output_format="list",
        )
        client = mlflow.MlflowClient()
        for model in models:
            if model.model_id != keep:
                client.delete_logged_model(model.model_id)
    except MlflowException as err:
        click.echo(f"note: an earlier attempt's model of this run was left ({one_line(err)})", err=True)


def _log(model_name: str, weights: Path, preprocess: Path, data: Data):
    return mlflow.pyfunc.log_model(
        name=model_name,
        python_model=str(REPO / "models" / "served.py"),
        artifacts={WEIGHTS: str(weights), PREPROCESS: str(preprocess)},
        code_paths=[str(REPO / "models")],
        signature=signature(data),
        input_example=raw_images(data, data.val.x[:2]),
        pip_requirements=list(serving_requirements()),
        metadata={"classes": list(data.classes), "dataset": data.name},
    )


def registry_name_problem(name: str) -> str:
    """Why the Model Registry would refuse ``name`` (MLflow's own check), or '' where it takes
    it: asked before a step trains, not after, when the champion is registered."""
    try:
        _validate_model_name(name)
    except MlflowException as err:
        return err.message
    return ""


def register_champion(run_ids: list[str], registered_name: str, metric: str = "final/val_acc") -> str:
    """Register the logged model of the run with the highest ``metric`` (validation, never test)
    and point alias ``champion`` at that version; returns ``models:/<name>@champion``, or ''
    when no run has a logged model (runs made before models were logged)."""
    client = mlflow.MlflowClient()
    runs = [client.get_run(r) for r in run_ids]
    candidates = [r for r in runs if MODEL_ID_TAG in r.data.tags and metric in r.data.metrics]
    if not candidates:
        return ""
    best = max(candidates, key=lambda r: r.data.metrics[metric])
    registered = mlflow.register_model(
        f"models:/{best.data.tags[MODEL_ID_TAG]}",
        registered_name,
        tags={"run_name": best.info.run_name or "", metric: f"{best.data.metrics[metric]:.4f}"},
    )
    client.set_registered_model_alias(registered_name, CHAMPION, registered.version)
    client.set_tag(best.info.run_id, "registered_as", f"{registered_name} v{registered.version} @{CHAMPION}")
    return f"models:/{registered_name}@{CHAMPION}"
