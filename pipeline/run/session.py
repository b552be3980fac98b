"""The pieces of one training run under MLflow that ``run_training`` (``request.py``) calls
around ``fit``: its options and size limits; the MLflow run opened (or reopened with
``--resume``); the state started or resumed; each epoch's metrics logged with a checkpoint
artifact after every epoch (rarer where writing one is slow: ``CheckpointPace``); and the final
artifacts: the architecture trace, learning curves, per-epoch history and the model
(safetensors weights + spec).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
import torch

from models.growth import DEFAULT_GROWTH_INIT, stage_exits
from models.io import save_model
from models.schedule import apply_event
from models.spec import SIZE_LIMITS, ArchSpec, SizeLimits, check_size
from pipeline.budget import timing
from pipeline.cli import opt
from pipeline.curriculum.diet import curriculum_pruning
from pipeline.data.dataset import Data
from pipeline.device import pick_device, seed_everything
from pipeline.exits import ExitConfig
from pipeline.run import plots
from pipeline.run.exit_thresholds import set_exit_thresholds
from pipeline.run.length import RunLength
from pipeline.run.logged_model import log_classifier, serving_requirements
from pipeline.run.outcome import log_health
from pipeline.run.resume import check_resumable, resume_checkpoint
from pipeline.tracking.artifacts import log_dataset, log_json
from pipeline.tracking.errors import UpstreamError, interruptions_held
from pipeline.tracking.resume_lock import resume_lock
from pipeline.tracking.runs import current_run_name, tracked_run
from pipeline.training.checkpoints import load_checkpoint, save_checkpoint
from pipeline.training.config import TrainConfig
from pipeline.training.loop import DivergenceError
from pipeline.training.state import FitState, new_state
from pipeline.training.training_plan import TrainingPlan

MODEL_ARTIFACT_DIR = "model"
MODEL_FILE = "model.safetensors"


DEFAULT_MAX_PARAMS = SizeLimits().max_params


@dataclass(frozen=True)
class RunConfig:
    run_name: str = opt("", "MLflow run name; empty: the variant and seed, e.g. static-s0")
    experiment_name: str = opt("", "MLflow experiment of a new run; empty: growing-cnn")
    resume: str = opt("", "run id of an interrupted run of the same entry point to continue in place")
    progress: bool = opt(True, "show a progress bar per epoch")
    max_params: int = opt(
        DEFAULT_MAX_PARAMS, "refuse a network (start, final or any growth stage) with more parameters"
    )
    max_memory_gb: float = opt(
        0.0, "refuse a network whose training step needs more memory; 0: half of the device's"
    )

    def apply_size_limits(self, train_cfg: TrainConfig) -> None:
        """Make every network this process builds answer to these limits (models.spec.SIZE_LIMITS)."""
        max_bytes = self.memory_limit_bytes(pick_device(train_cfg.device))
        SIZE_LIMITS.set(SizeLimits(self.max_params, max_bytes, train_cfg.batch_size))

    def memory_limit_bytes(self, device: torch.device) -> int:
        """``--max-memory-gb`` in bytes; by default half of the training device's memory."""
        if self.max_memory_gb < 0:
            raise UpstreamError(f"--max-memory-gb must be positive (0: automatic), got {self.max_memory_gb}")
        if self.max_memory_gb > 0:
            return int(self.max_memory_gb * 2**30)
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory // 2
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


@dataclass
class TrainingOutcome:
    state: FitState
    total_s: float

    def summary(self) -> str:
        """The one line a training command prints when it finishes."""
        last, events = self.state.history[-1], len(self.state.trace.events)
        grown = f", {events} growth events" if events else ""
        stopped = ", stopped: collapsed" if self.state.stop_reason == "collapsed" else ""
        return (
            f"val/acc {last['val/acc']:.4f} after {self.state.epoch} epochs "
            f"in {self.state.cumulative_s:.1f}s{grown}{stopped}"
        )


@contextlib.contextmanager
def training_run(
    entry_point: str, run_cfg: RunConfig, params: dict[str, str], tags: dict[str, str], data: Data
) -> Iterator[mlflow.ActiveRun]:
    """The MLflow run of a training command: a new one, or with ``--resume`` the interrupted
    one (checked before it is reopened), with the data logged as its input."""
    check_resumable(run_cfg.resume, entry_point, params, tags, data.digest)
    outer_run_id = os.environ.get("MLFLOW_RUN_ID", "")
    if run_cfg.resume and outer_run_id and outer_run_id != run_cfg.resume:
        # `mlflow run` made a fresh run for this step; point it at the run that continues.
        mlflow.MlflowClient().set_tag(outer_run_id, "resumed_run_id", run_cfg.resume)
    # Two resumers of one run would both train it and interleave its metrics: one holds it.
    lock = resume_lock(run_cfg.resume) if run_cfg.resume else contextlib.nullcontext()
    run_name = run_cfg.run_name or default_run_name(tags["variant"], params)
    with (
        lock,
        tracked_run(
            entry_point, params, run_name, run_cfg.resume or None, tags, run_cfg.experiment_name
        ) as active,
    ):
        log_dataset(data)
        yield active


def default_run_name(variant: str, params: dict[str, str]) -> str:
    """Readable (unique once ``tracked_run`` adds a suffix): the variant and the seed,
    ``static-s0``, ``dynamic-default+tiers-s2``; the pruning that goes with the pacing by
    default is left out of the name (the variant tag keeps it), and a growing run whose new
    layers do not start as the default says so (``dynamic-default+tiers+preserve-init-s2``)."""
    pacing, prune = params.get("pacing", "none"), float(params.get("prune", 0) or 0)
    if prune and prune == curriculum_pruning(pacing):
        variant = variant.replace(f"+prune{prune:g}", "")
    init = params.get("growth_init", DEFAULT_GROWTH_INIT)
    if init != DEFAULT_GROWTH_INIT:
        variant += f"+{init}-init"
    return f"{variant}-s{params['seed']}"


def check_network_sizes(
    start: ArchSpec, plan: TrainingPlan, batch_size: int, limits: RunConfig, device: torch.device
) -> None:
    """Refuse, before training, a start spec or any growth stage over the run's size limits:
    ``fc(100000000)`` or ``out_channels`` 10^9 would otherwise fail (or exhaust the machine)
    when allocated, after the epochs before it had trained. With stage exits (``--exits
    stages``) each stage is checked with the exits it carries by then (a copy of each earlier
    stage's classifier path: parameters and training activations too)."""
    max_bytes = limits.memory_limit_bytes(device)
    spec = start
    check_size(spec, limits.max_params, max_bytes, batch_size, f"start spec {start.name}")
    growth = getattr(plan, "growth", None)  # an ExperimentPlan's GrowthPlan; static has none
    events = list(growth.events) if growth is not None else []
    for event in events:
        spec = apply_event(spec, event)
        check_size(spec, limits.max_params, max_bytes, batch_size, f"after growth {event.to_compact()}")
    if growth is not None and growth.stage_exits:
        for epoch in sorted({event.epoch for event in events}):
            staged = stage_exits(start, [event for event in events if event.epoch <= epoch])
            where = f"after growth at epoch {epoch} with its stage exits ({', '.join(staged.exit_ids())})"
            check_size(staged, limits.max_params, max_bytes, batch_size, where)


class CheckpointedLog:
    """An epoch's metrics logged once a checkpoint holds the epoch (every epoch unless writing
    one is slow), so a run interrupted and resumed from its checkpoint logs each epoch it trains
    again once, not a second point at the same step."""

    def __init__(self, path: Path, cfg: TrainConfig):
        self.path, self.cfg = path, cfg
        self.unsaved: list[tuple[int, dict]] = []

    def log_epoch(self, epoch: int, metrics: dict, _state: FitState) -> None:
        self.unsaved.append((epoch, metrics))

    def checkpoint(self, state: FitState, plan: TrainingPlan) -> None:
        with interruptions_held():  # the checkpoint and its epochs' metrics, or neither
            save_checkpoint(self.path, state, plan, self.cfg)
            mlflow.log_artifact(str(self.path), "checkpoints")
            self.flush()

    def flush(self) -> None:
        for epoch, metrics in self.unsaved:
            mlflow.log_metrics(metrics, step=epoch)
        self.unsaved.clear()


def start_training(
    spec: ArchSpec, cfg: TrainConfig, plan: TrainingPlan, run_cfg: RunConfig, length: RunLength, tmp: Path
) -> tuple[FitState, torch.device]:
    """Inside the active MLflow run, before the first epoch: the sizes and the model's serving
    needs checked, every generator seeded, and the state to train (new, or with ``--resume``
    the run's last checkpoint, fetched into ``tmp``); the device it trains on."""
    device = pick_device(cfg.device)
    check_network_sizes(spec, plan, cfg.batch_size, run_cfg, device)
    serving_requirements()  # what logging the model needs at the end, checked before training
    seed_everything(cfg.seed, cfg.deterministic)
    mlflow.set_tag("device", str(device))
    state = _first_state(spec, cfg, plan, device, run_cfg.resume, tmp, length)
    mlflow.set_tag("precision_resolved", state.precision)
    return state, device


@contextlib.contextmanager
def logged_epochs(tmp: Path, cfg: TrainConfig) -> Iterator[CheckpointedLog]:
    """Where ``fit`` logs its epochs and checkpoints (``CheckpointedLog``); its epochs' metrics
    not yet logged are logged when training ends or fails (an interruption leaves them to the
    resumed run, which trains those epochs again)."""
    epochs = CheckpointedLog(tmp / "last.pt", cfg)
    try:
        yield epochs
    except DivergenceError as err:  # the run fails with one line; its health says why too
        epochs.flush()
        mlflow.set_tags({"health": "diverged", "health_detail": f"diverged: {err}"})
        raise
    except Exception:  # a failure (not an interruption, which resumes): show what it reached
        epochs.flush()
        raise
    epochs.flush()


def finish_training(
    state: FitState,
    data: Data,
    on_device: Data,
    cfg: TrainConfig,
    plan: TrainingPlan,
    tmp: Path,
    exit_cfg: ExitConfig,
    val_tiers: torch.Tensor | None,
) -> str:
    """After the last epoch (``data`` on the CPU, ``on_device`` what trained): the run's health;
    a model with exits gets its thresholds (``exit_cfg``: given, or calibrated on the validation
    split); the final artifacts and the logged model, whose id it returns."""
    verdict = log_health(state, data, cfg)
    if state.model.spec.exits:
        set_exit_thresholds(state.model, on_device.val, exit_cfg, cfg.eval_batch_size, val_tiers)
    run_name = current_run_name()
    # the figure says what health says: a dip or a collapse is seen, not only tagged
    health_line = "" if verdict.verdict == "ok" else f"\nhealth {verdict.describe()}"
    log_final_artifacts(state, plan, tmp, title=run_title(run_name) + health_line)
    return log_classifier(state.model, data, run_name, tmp, tta=cfg.tta)


def _first_state(
    spec: ArchSpec,
    cfg: TrainConfig,
    plan: TrainingPlan,
    device: torch.device,
    resume_run_id: str,
    tmp: Path,
    length: RunLength | None,
) -> FitState:
    """A new state of ``spec``, or with ``--resume`` the run's last checkpoint, with the plan it
    had re-planned to. A run stopped after its last epoch's checkpoint (while its model was
    logged) trains no epoch: ``fit`` returns at once and the run is finished from there."""
    if not resume_run_id:
        return new_state(spec, cfg, device)
    planner = length.planner if length is not None else None

    def replan(epochs: int) -> None:
        plan.adopt(epochs, *planner.pieces(epochs))

    path = resume_checkpoint(resume_run_id, tmp / "resume")
    return load_checkpoint(path, cfg, plan, device, replan if planner is not None else None)


def log_run_metrics(state: FitState, total_s: float, model_id: str) -> None:
    """The run's totals: its seconds by part and its final validation figures, linked to the
    logged model too (the UI's Models tab shows them beside it)."""
    mlflow.log_metrics(
        {
            "time/total_s": state.cumulative_s,
            "time/this_process_s": total_s,
            **timing.run_metrics(state.time_parts),
            "final/val_acc": state.history[-1]["val/acc"],
            "final/val_loss": state.history[-1]["val/loss"],
        },
        model_id=model_id,
    )


def run_title(run_name: str) -> str:
    """A figure's title naming the active run, its variant and seed: a name may be the user's."""
    run = mlflow.get_run(mlflow.active_run().info.run_id)
    variant, seed = run.data.tags.get("variant", "?"), run.data.params.get("seed", "?")
    return f"{run_name}: variant {variant}, seed {seed}"


def log_final_artifacts(state: FitState, plan: TrainingPlan, tmp: Path, title: str) -> None:
    log_json(state.trace.to_dict(), "architecture_trace.json")
    log_json(plan.to_dict(), "plan.json")
    history = pd.DataFrame(state.history)
    history_path = tmp / "history.csv"
    history.to_csv(history_path, index=False)
    mlflow.log_artifact(str(history_path))
    curves = plots.learning_curves(
        state.history, tmp / "learning_curves.png", state.trace.events, title, plan.to_dict()
    )
    mlflow.log_artifact(str(curves))
    model_dir = tmp / MODEL_ARTIFACT_DIR
    save_model(state.model, model_dir / MODEL_FILE)
    (model_dir / "spec.json").write_text(json.dumps(state.model.spec.to_dict(), indent=2))
    mlflow.log_artifacts(str(model_dir), MODEL_ARTIFACT_DIR)
