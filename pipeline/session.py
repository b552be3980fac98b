"""One training run under MLflow, shared by train_static and train_dynamic.

It loads the data, builds or resumes the training state, runs ``fit`` with per-epoch metrics
and a checkpoint artifact after every epoch, and logs the final artifacts: the architecture
trace, learning curves, per-epoch history and the model (safetensors weights + spec).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
import torch

from models.io import save_model
from models.spec import ArchSpec
from pipeline import plots
from pipeline.data import Data
from pipeline.loop import pick_device, seed_everything
from pipeline.tracking import UpstreamError, log_json, scratch_dir
from pipeline.training import (
    FitState,
    TrainConfig,
    TrainingPlan,
    fit,
    load_checkpoint,
    new_state,
    save_checkpoint,
)

CHECKPOINT_ARTIFACT = "checkpoints/last.pt"
MODEL_ARTIFACT_DIR = "model"
MODEL_FILE = "model.safetensors"


@dataclass
class TrainingOutcome:
    state: FitState
    total_s: float


def resume_checkpoint(run_id: str, entry_point: str, dest: Path) -> Path:
    """Download the last checkpoint of ``run_id``, refusing a run of another entry point."""
    client = mlflow.MlflowClient()
    try:
        run = client.get_run(run_id)
    except mlflow.exceptions.MlflowException:
        raise UpstreamError(f"--resume {run_id}: no such run in this tracking store") from None
    kind = run.data.tags.get("entry_point")
    if kind != entry_point:
        raise UpstreamError(f"--resume {run_id} is a {kind or 'untagged'} run, not {entry_point}")
    if run.info.status == "FINISHED":
        raise UpstreamError(f"--resume {run_id} already FINISHED; there is nothing to continue")
    try:
        path = mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=CHECKPOINT_ARTIFACT, dst_path=str(dest)
        )
    except (mlflow.exceptions.MlflowException, OSError):
        raise UpstreamError(
            f"--resume {run_id}: the run has no checkpoint yet (it stopped "
            "before finishing its first epoch); start it again instead"
        ) from None
    return Path(path)


def train_and_log(
    data: Data,
    spec: ArchSpec,
    cfg: TrainConfig,
    plan: TrainingPlan,
    *,
    resume_run_id: str = "",
    entry_point: str,
    val_tiers: torch.Tensor | None = None,
    progress_bar: bool = True,
) -> TrainingOutcome:
    """Train inside the active MLflow run; ``data`` on the CPU, moved to the device here."""
    device = pick_device(cfg.device)
    seed_everything(cfg.seed, cfg.deterministic)
    mlflow.set_tag("device", str(device))
    with scratch_dir() as tmp:
        if resume_run_id:
            ckpt = resume_checkpoint(resume_run_id, entry_point, tmp / "resume")
            state = load_checkpoint(ckpt, cfg, plan, device)
            if state.epoch >= cfg.epochs:
                raise UpstreamError(
                    f"--resume {resume_run_id}: its checkpoint is at epoch {state.epoch}"
                    f" of {cfg.epochs}; nothing is left to train"
                )
        else:
            state = new_state(spec, cfg, device)
        train_split, val_split = data.train.to(device), data.val.to(device)
        on_device = Data(
            data.name, data.classes, train_split, val_split, None, data.source_digest, data.digest
        )
        ckpt_path = tmp / "last.pt"

        def log_epoch(epoch: int, metrics: dict, _state: FitState) -> None:
            mlflow.log_metrics(metrics, step=epoch)

        def checkpoint(fit_state: FitState, fit_plan: TrainingPlan) -> None:
            save_checkpoint(ckpt_path, fit_state, fit_plan, cfg)
            mlflow.log_artifact(str(ckpt_path), "checkpoints")

        start = time.perf_counter()
        state = fit(
            state,
            on_device,
            cfg,
            plan,
            val_tiers=val_tiers,
            on_epoch=log_epoch,
            checkpoint=checkpoint,
            progress_bar=progress_bar,
        )
        total_s = time.perf_counter() - start
        log_final_artifacts(state, plan, tmp, title=f"{entry_point}: {spec.name}")
    mlflow.log_metrics(
        {
            "time/total_s": state.cumulative_s,
            "time/this_process_s": total_s,
            "final/val_acc": state.history[-1]["val/acc"],
        }
    )
    return TrainingOutcome(state, total_s)


def log_final_artifacts(state: FitState, plan: TrainingPlan, tmp: Path, title: str) -> None:
    log_json(state.trace.to_dict(), "architecture_trace.json")
    log_json(plan.to_dict(), "plan.json")
    history = pd.DataFrame(state.history)
    history_path = tmp / "history.csv"
    history.to_csv(history_path, index=False)
    mlflow.log_artifact(str(history_path))
    curves = plots.learning_curves(state.history, tmp / "learning_curves.png", state.trace.events, title)
    mlflow.log_artifact(str(curves))
    model_dir = tmp / MODEL_ARTIFACT_DIR
    save_model(state.model, model_dir / MODEL_FILE)
    (model_dir / "spec.json").write_text(json.dumps(state.model.spec.to_dict(), indent=2))
    mlflow.log_artifacts(str(model_dir), MODEL_ARTIFACT_DIR)
