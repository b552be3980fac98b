"""train_dynamic end to end: through `mlflow run` with a real score_difficulty run, and resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from models.io import load_model
from models.spec import ArchSpec
from tests.conftest import mlflow_run, subprocess_env

pytestmark = pytest.mark.slow
DATA = ["--subset", "2000"]


def _python(tracking, module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=subprocess_env(tracking),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _runs(entry_point: str):
    return mlflow.search_runs(
        search_all_experiments=True, output_format="list", filter_string=f"tags.entry_point = '{entry_point}'"
    )


def test_train_dynamic_through_mlflow_run_grows_and_follows_the_curriculum(tracking, tmp_path):
    scored = _python(tracking, "pipeline.score_difficulty", *DATA, "--folds", "2", "--epochs", "1")
    assert scored.returncode == 0, scored.stderr[-3000:]
    # 12 epochs: the default schedule grows at epoch 3, so epochs 0-2 walk through the tiers.
    result = mlflow_run(tracking, "train_dynamic", "subset=2000", "epochs=12", "progress=false")
    assert result.returncode == 0, result.stderr[-3000:]
    run = _runs("train_dynamic")[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["variant"] == "dynamic-default+tiers+prune0.3"
    assert run.data.tags["scores_run_id"] == _runs("score_difficulty")[0].info.run_id
    client = mlflow.MlflowClient()
    examples = [m.value for m in client.get_metric_history(run.info.run_id, "train/examples")]
    params = [m.value for m in client.get_metric_history(run.info.run_id, "model/params")]
    assert params[2] < params[3] == params[-1]  # the model grew once, at epoch 3
    local = Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(tmp_path)))
    plan = json.loads((local / "plan.json").read_text())
    schedule = plan["curriculum_schedule"]
    assert [row["tiers_present"] for row in schedule[:4]] == [
        "easy",
        "easy+medium",
        "easy+medium+hard",
        "easy+medium+hard",  # every example stays after the growth (--retire-easy false)
    ]
    assert {row["tiers_present"] for row in schedule[2:]} == {"easy+medium+hard"}
    counts = [row["count"] for row in schedule]
    assert counts[0] < counts[1] < counts[2] == counts[-1]
    # Pruning (0.3 from the epoch after the growth on) trains on fewer examples than the
    # curriculum offers, except in the annealing tail, the last epoch, which uses them all.
    assert plan["pruning"]["start"] == 4
    assert examples[:4] == counts[:4]
    assert all(used < offered for used, offered in zip(examples[4:-1], counts[4:-1]))
    assert examples[-1] == counts[-1]
    for key in (
        "val/acc_easy",
        "val/acc_medium",
        "val/acc_hard",
        "curriculum/fraction",
        "train/lr",
        "train/flops_cumulative",
        "time/cumulative_s",
    ):
        assert key in run.data.metrics, key
    trace = json.loads((local / "architecture_trace.json").read_text())
    assert len(trace["events"]) == 3 and len(trace["epochs"]) == 12
    assert {"probe_loss_before", "probe_acc_after", "flops_before", "flops_after", "seconds"} <= trace[
        "events"
    ][0].keys()
    assert (local / "architecture_evolution.png").stat().st_size > 0
    model = load_model(local / "model" / "model.safetensors")
    assert model.spec.layers == ArchSpec.from_dict(json.loads(run.data.tags["final_spec"])).layers


def test_interrupted_run_resumes_to_exactly_the_uninterrupted_metrics(tracking, tmp_path):
    args = [
        *DATA,
        "--epochs",
        "4",
        "--pacing",
        "none",
        "--deterministic",
        "true",
        "--progress",
        "false",
        "--schedule",
        "1:conv(16)@after:pool1;2:residual;3:dropout(0.2)",
        "--start-spec",
        "tiny",
    ]
    whole = _python(tracking, "pipeline.train_dynamic", *args, "--run-name", "whole")
    assert whole.returncode == 0, whole.stderr[-3000:]

    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.train_dynamic", *args, "--run-name", "cut"],
        env=subprocess_env(tracking),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while (
        time.time() < deadline
        and not list((tmp_path / "artifacts").glob("*/artifacts/checkpoints/last.pt"))[1:]
    ):  # the second run's first checkpoint
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0, "the run finished before it could be interrupted"
    cut = next(r for r in _runs("train_dynamic") if r.info.run_name == "cut")
    assert cut.info.status == "KILLED"
    assert (
        f"interrupted: run {cut.info.run_id} is marked KILLED; resume it with --resume {cut.info.run_id}"
        in stderr
    )

    resumed = _python(tracking, "pipeline.train_dynamic", *args, "--resume", cut.info.run_id)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    client = mlflow.MlflowClient()
    runs = {r.info.run_name: r for r in _runs("train_dynamic")}
    assert runs["cut"].info.status == "FINISHED"
    for key in ("val/loss", "val/acc", "train/loss", "model/params"):
        want = [m.value for m in client.get_metric_history(runs["whole"].info.run_id, key)]
        got = {m.step: m.value for m in client.get_metric_history(runs["cut"].info.run_id, key)}
        assert [got[step] for step in range(4)] == want, key
