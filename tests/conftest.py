"""Shared fixtures: a temporary MLflow store per test, and small real data subsets; and the
interrupt-then-resume routine the resume tests share."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import torch

from models.schedule import parse_schedule
from models.spec import resolve_spec
from pipeline.data.config import DataConfig
from pipeline.data.splits import load_data
from pipeline.device import seed_everything
from pipeline.growth.config import GrowthConfig
from pipeline.run.plan import ExperimentPlan
from pipeline.training.checkpoints import load_checkpoint, save_checkpoint
from pipeline.training.epoch_loop import fit
from pipeline.training.pace import CheckpointPace
from pipeline.training.state import FitState, new_state

REPO = Path(__file__).resolve().parents[1]
# What MLflow and Optuna write by default, relative to the working directory: a test that runs
# a process from the repository without a store of its own writes here.
DEFAULT_STORES = ("mlruns", "mlflow.db", "optuna.db")


def _stores_signature() -> dict[str, float]:
    """Each default store under the repository, and each folder just inside mlruns (a new
    experiment or run changes one), with its modification time."""
    out = {}
    for name in DEFAULT_STORES:
        path = REPO / name
        if path.exists():
            out[name] = path.stat().st_mtime
            for inner in path.glob("*") if path.is_dir() else ():
                out[f"{name}/{inner.name}"] = inner.stat().st_mtime
    return out


def pytest_configure(config):
    """Under pytest-xdist (``scripts/test`` starts one worker a core), give each worker and the
    processes its tests start an equal share of the cores: torch's default of every core a
    process makes the workers' OpenMP threads spin against each other (up to 10x slower)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[name] = threads
        torch.set_num_threads(int(threads))


@pytest.fixture(scope="session", autouse=True)
def repository_stores_untouched():
    """Fails the session if any test wrote into the repository's default MLflow or Optuna stores
    (they hold a user's own runs; tests use a temporary store)."""
    before = _stores_signature()
    yield
    after = _stores_signature()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"tests wrote into the repository's default stores: {changed}"


@pytest.fixture
def tracking(tmp_path, monkeypatch):
    """A fresh SQLite tracking store and artifact root in tmp_path; never the repo's."""
    # First: the store takes ./mlruns, resolved now, as the root of experiments made later
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.create_experiment("test", artifact_location=(tmp_path / "artifacts").as_uri())
    mlflow.set_experiment(experiment_id=experiment)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment)
    yield uri
    while mlflow.active_run():
        mlflow.end_run()


@pytest.fixture(scope="session")
def small_data():
    """A stratified 2,000-example real Fashion-MNIST subset (train, val and test)."""
    return load_data(DataConfig(subset=2000), include_test=True)


def mlflow_run(
    tracking_uri: str, entry_point: str, *params: str, options: tuple[str, ...] = (), timeout: int = 600
) -> subprocess.CompletedProcess:
    """``mlflow run`` of this project's ``entry_point`` as a user runs it, ``-P`` per param."""
    args = [sys.executable, "-m", "mlflow", "run", str(REPO), "-e", entry_point, "--env-manager", "local"]
    for param in params:
        args += ["-P", param]
    return subprocess.run(
        [*args, *options], env=subprocess_env(tracking_uri), capture_output=True, text=True, timeout=timeout
    )


def subprocess_env(tracking_uri: str) -> dict[str, str]:
    env = dict(os.environ)
    env["MLFLOW_TRACKING_URI"] = tracking_uri
    env["PYTHONPATH"] = str(REPO)
    # `mlflow run --env-manager local` runs `python -m ...` from PATH: make that the venv's.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def fresh_state(data, cfg) -> FitState:
    """A new training state of the tiny spec for ``data``, its weights seeded by ``cfg``."""
    seed_everything(cfg.seed, cfg.deterministic)
    return new_state(resolve_spec("tiny", data.input_shape, data.num_classes), cfg, torch.device("cpu"))


def growing_plan(data, cfg, schedule: str) -> ExperimentPlan:
    """A plan that grows the tiny spec by ``schedule``, with no curriculum."""
    return ExperimentPlan(cfg, data, parse_schedule(schedule, cfg.epochs), GrowthConfig())


def interrupted_then_resumed(fresh, data, cfg, make_plan, path: Path, crash_after: int = 2, resume_cfg=None):
    """Fit ``fresh()`` under ``make_plan()`` with a checkpoint at ``path`` after every epoch,
    interrupt it after epoch ``crash_after``, and resume from that checkpoint with a new plan
    (and ``resume_cfg``, by default ``cfg``) to the end; returns the resumed run's final state."""

    def checkpoint_then_crash(state, plan):
        save_checkpoint(path, state, plan, cfg)
        if state.epoch == crash_after:
            raise KeyboardInterrupt

    every_epoch = CheckpointPace(max_share=math.inf)  # these runs' epochs take milliseconds
    with pytest.raises(KeyboardInterrupt):
        fit(fresh(), data, cfg, make_plan(), checkpoint=checkpoint_then_crash, checkpoint_pace=every_epoch)
    plan, resume_cfg = make_plan(), resume_cfg or cfg
    return fit(load_checkpoint(path, resume_cfg, plan, torch.device("cpu")), data, resume_cfg, plan)
