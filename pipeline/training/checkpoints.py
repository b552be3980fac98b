"""Checkpoints: the whole training state saved after each epoch, and rebuilt from one so a
resumed run continues bit-exactly."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from models.builder import build_model
from models.errors import UserError
from models.spec import ArchSpec
from pipeline.device import place_model
from pipeline.precision import PrecisionError, grad_scaler, resolve_precision
from pipeline.training.average import WeightAverage
from pipeline.training.config import TrainConfig, grown_parameters, make_optimizer
from pipeline.training.lookahead import Lookahead
from pipeline.training.state import ArchitectureTrace, FitState, RunProgress
from pipeline.training.training_plan import TrainingPlan

CHECKPOINT_FORMAT = 1


def checkpoint_dict(state: FitState, plan: TrainingPlan, cfg: TrainConfig) -> dict:
    """A checkpoint of plain containers and tensors, loadable with ``weights_only=True``."""
    return {
        "format": CHECKPOINT_FORMAT,
        "spec": state.model.spec.to_json(),
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "grown_parameters": grown_parameters(state.optimizer, state.model),
        "epoch": state.epoch,
        "stop_reason": state.stop_reason,  # a run that stopped early stays stopped when resumed
        "global_step": state.global_step,
        "cumulative_s": state.cumulative_s,
        "time_parts": json.dumps(state.time_parts),
        "cumulative_train_flops": state.cumulative_train_flops,
        "history": json.dumps(state.history),
        "trace": json.dumps(state.trace.to_dict()),
        "plan": json.dumps(plan.state_dict()),
        "plan_tensors": plan.tensor_state(),
        "config": json.dumps(asdict(cfg)),
        "precision": state.precision,
        "rng_torch": torch.get_rng_state(),
        "rng_data": state.generator.get_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "average": {} if state.average is None else state.average.state_dict(),
        "lookahead": {} if state.lookahead is None else state.lookahead.state_dict(),
        "scaler": {} if state.scaler is None else state.scaler.state_dict(),
        "progress": json.dumps(state.progress.to_dict() if state.progress is not None else None),
    }


def save_checkpoint(path: Path, state: FitState, plan: TrainingPlan, cfg: TrainConfig) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".partial")
    torch.save(checkpoint_dict(state, plan, cfg), tmp)
    tmp.replace(path)  # a crash mid-write leaves the previous checkpoint intact
    return path


class CheckpointError(UserError):
    """A checkpoint that is missing, truncated or does not fit."""


def load_checkpoint(
    path: Path,
    cfg: TrainConfig,
    plan: TrainingPlan,
    device: torch.device,
    replan: Callable[[int], None] | None = None,
) -> FitState:
    """Rebuild the whole training state from a checkpoint; never unpickles arbitrary objects.

    A seconds run that re-planned its epochs as it trained (``pipeline/budget/replan.py``)
    goes on with the plan it had then: ``replan(epochs)`` gives ``plan`` that many epochs
    before the plan's own state is loaded."""
    from models.io import ModelFileError, check_state_matches

    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated zip, foreign pickle: all mean "not a checkpoint"
        raise CheckpointError(
            f"checkpoint {path} is unreadable or unsafe ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200]})"
        ) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path} is not a checkpoint of this pipeline")
    model = build_model(ArchSpec.from_dict(json.loads(ckpt["spec"])))
    try:
        check_state_matches(model, ckpt["model"], str(path))
    except ModelFileError as err:
        raise CheckpointError(str(err)) from None
    model.load_state_dict(ckpt["model"])
    place_model(model, device)
    optimizer = make_optimizer(model, cfg, ckpt.get("grown_parameters", ()))
    optimizer.load_state_dict(ckpt["optimizer"])
    precision = _resumed_precision(str(ckpt.get("precision", "fp32")), cfg, device, path)
    saved = json.loads(ckpt.get("progress", "null"))  # older checkpoints: the run never re-planned
    progress = RunProgress.from_dict(saved) if saved is not None else None
    if progress is not None and progress.epochs != cfg.epochs:
        if replan is None:
            raise CheckpointError(
                f"checkpoint {path} re-planned its run to {progress.epochs} epochs, "
                f"this run plans {cfg.epochs} and cannot re-plan"
            )
        replan(progress.epochs)
    plan.load_state_dict(json.loads(ckpt["plan"]))
    plan.load_tensor_state(ckpt.get("plan_tensors", {}))
    torch.set_rng_state(ckpt["rng_torch"])
    generator = torch.Generator()
    generator.set_state(ckpt["rng_data"])
    if ckpt["rng_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(ckpt["rng_cuda"])
    # A checkpoint written before --ema-decay existed holds none: the average starts afresh.
    try:
        average = WeightAverage.restore(model, ckpt["average"]) if ckpt.get("average") else None
        lookahead = Lookahead.restore(model, ckpt["lookahead"]) if ckpt.get("lookahead") else None
    except (KeyError, RuntimeError) as err:  # a weight average of another network or format
        raise CheckpointError(
            f"checkpoint {path}: its weight average or lookahead's slow weights do not fit its model ({err})"
        ) from None
    return FitState(
        model=model,
        optimizer=optimizer,
        epoch=ckpt["epoch"],
        stop_reason=str(ckpt.get("stop_reason", "")),
        global_step=ckpt["global_step"],
        cumulative_s=ckpt["cumulative_s"],
        time_parts=json.loads(ckpt.get("time_parts", "{}")),  # older checkpoints: from here on
        cumulative_train_flops=ckpt["cumulative_train_flops"],
        history=json.loads(ckpt["history"]),
        trace=ArchitectureTrace.from_dict(json.loads(ckpt["trace"])),
        generator=generator,
        precision=precision,
        average=average,
        lookahead=lookahead,
        scaler=restored_scaler(ckpt.get("scaler", {}), precision, device),
        progress=progress,
    )


def restored_scaler(saved: dict, precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16's gradient scaler as the checkpoint left it (a fresh one would start at its
    initial scale and skip steps finding the scale again). Older checkpoints hold none."""
    scaler = grad_scaler(precision, device)
    if scaler is not None and saved:
        scaler.load_state_dict(saved)
    return scaler


def _resumed_precision(trained: str, cfg: TrainConfig, device: torch.device, path: Path) -> str:
    """A resumed run continues at the precision it trained at: ``auto`` keeps it (even where
    this machine would resolve auto otherwise), an explicit other precision is refused."""
    if cfg.precision not in ("auto", trained):
        raise CheckpointError(
            f"--precision {cfg.precision}: checkpoint {path} trained at {trained}; "
            f"resume with --precision {trained} or auto"
        )
    try:
        return resolve_precision(trained, device)
    except PrecisionError as err:
        raise CheckpointError(
            f"checkpoint {path} trained at {trained}, which this machine cannot run: {err}"
        ) from None
