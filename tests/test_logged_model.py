"""The logged MLflow Model: loads without unpickling, takes raw uint8 images, predicts what the
network does on the pipeline's normalised images; the registry's champion alias; served over
HTTP (slow) with the same predictions."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch

from models.builder import build_model
from models.spec import resolve_spec
from pipeline.data.config import DataConfig
from pipeline.data.sources import load_raw
from pipeline.run.logged_model import CHAMPION, MODEL_ID_TAG, log_classifier, raw_images, register_champion


def _trained_runs(small_data, tmp_path, accuracies=(0.5,)) -> list[str]:
    """Runs, each with a logged (untrained, seeded) tiny network and a final/val_acc."""
    ids = []
    for i, acc in enumerate(accuracies):
        torch.manual_seed(i)
        model = build_model(resolve_spec("tiny", small_data.input_shape, small_data.num_classes)).eval()
        with mlflow.start_run(run_name=f"static+prune0.3-s{i}") as run:
            log_classifier(model, small_data, f"static+prune0.3-s{i}", tmp_path / str(i))
            mlflow.log_metric("final/val_acc", acc)
        ids.append(run.info.run_id)
    return ids


def _test_images(n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    raw = load_raw(DataConfig().dataset)
    return raw.test_x[:n].numpy(), raw.test_y[:n].numpy()  # (n, 1, 28, 28) uint8


def test_the_logged_model_takes_raw_images_and_predicts_as_the_network_does(tracking, small_data, tmp_path):
    (run_id,) = _trained_runs(small_data, tmp_path)
    model_id = mlflow.get_run(run_id).data.tags[MODEL_ID_TAG]
    assert mlflow.get_logged_model(model_id).name == "static+prune0_3-s0"  # MLflow refuses '.'
    logged = mlflow.pyfunc.load_model(f"models:/{model_id}")
    (spec,) = logged.metadata.signature.inputs.inputs
    assert spec.type == np.dtype(np.uint8) and spec.shape == (-1, *small_data.input_shape)
    # The validation images as the pipeline feeds them, and as raw uint8 through the MLflow Model.
    images = raw_images(small_data, small_data.val.x[:32])
    probabilities = logged.predict(images)
    torch.manual_seed(0)
    network = build_model(resolve_spec("tiny", small_data.input_shape, small_data.num_classes)).eval()
    with torch.no_grad():
        expected = torch.softmax(network(small_data.val.x[:32]), dim=1).numpy()
    assert probabilities.shape == (32, small_data.num_classes) and probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    np.testing.assert_allclose(probabilities.sum(1), 1, atol=1e-5)
    # Nothing to unpickle: the model is code, safetensors and JSON (no python_model.pkl).
    folder = Path(mlflow.artifacts.download_artifacts(f"models:/{model_id}", dst_path=str(tmp_path / "m")))
    suffixes = {p.suffix for p in folder.rglob("*") if p.is_file()}
    assert ".safetensors" in suffixes and not suffixes & {".pkl", ".pickle", ".pt", ".pth"}


def test_the_best_run_by_validation_accuracy_becomes_the_champion(tracking, small_data, tmp_path):
    ids = _trained_runs(small_data, tmp_path, accuracies=(0.61, 0.74, 0.70))
    uri = register_champion(ids, "growing-cnn-test")
    assert uri == f"models:/growing-cnn-test@{CHAMPION}"
    version = mlflow.MlflowClient().get_model_version_by_alias("growing-cnn-test", CHAMPION)
    best = mlflow.get_run(ids[1])
    assert version.run_id == ids[1] and version.tags["run_name"] == "static+prune0.3-s1"
    assert mlflow.get_logged_model(best.data.tags[MODEL_ID_TAG]).model_id in version.source
    images, _ = _test_images(4)
    assert mlflow.pyfunc.load_model(uri).predict(images).shape == (4, small_data.num_classes)
    # A better run later moves the alias; the old version stays registered.
    later = _trained_runs(small_data, tmp_path / "later", accuracies=(0.9,))
    register_champion(ids + later, "growing-cnn-test")
    moved = mlflow.MlflowClient().get_model_version_by_alias("growing-cnn-test", CHAMPION)
    assert moved.run_id == later[0] and int(moved.version) == int(version.version) + 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_champion_served_over_http_predicts_as_in_process(tracking, small_data, tmp_path):
    ids = _trained_runs(small_data, tmp_path)
    uri = register_champion(ids, "growing-cnn-served")
    images, _ = _test_images(16)
    in_process = mlflow.pyfunc.load_model(uri).predict(images)
    port = _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    serve = ["models", "serve", "-m", uri, "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", *serve, "-w", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "serve.log", "w"),  # noqa: SIM115 (closed with the process)
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "the model server did not answer /ping in 120 s"
                time.sleep(1)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations",
            data=json.dumps({"inputs": images.tolist()}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            served = np.asarray(json.loads(response.read())["predictions"], dtype=np.float32)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    np.testing.assert_allclose(served, in_process, atol=1e-6)
    assert (served.argmax(1) == in_process.argmax(1)).all()


def test_serving_pins_take_whichever_mlflow_distribution_is_installed():
    """mlflow-skinny is a supported MLflow: the pins name the distribution that is there, and a
    requirement none of whose distributions is installed fails before training, in one line."""
    from importlib.metadata import version

    from pipeline.run.logged_model import ServingRequirementError, installed_pins, serving_requirements

    assert installed_pins((("no-such-distribution", "pytest"),)) == (f"pytest=={version('pytest')}",)
    with pytest.raises(ServingRequirementError, match="none of no-such-a, no-such-b is installed"):
        installed_pins((("no-such-a", "no-such-b"),))
    assert serving_requirements()[0].startswith(("mlflow==", "mlflow-skinny=="))
