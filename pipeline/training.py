"""The epoch loop shared by train_static and train_dynamic, with checkpoints; no MLflow inside.

What differs between the two entry points is a ``TrainingPlan``: whether the model grows before
an epoch, and which training examples the epoch uses (the curriculum). A static run is the
default plan: no growth, every example, every epoch.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from models.builder import SpecNet, build_model, count_parameters
from models.flops import flops_per_example
from models.spec import ArchSpec
from pipeline.cli import opt
from pipeline.data.augment import AUGMENTATIONS
from pipeline.data.dataset import Data, Split
from pipeline.exits import all_exit_logits
from pipeline.loop import EvalResult, cosine_lr, evaluate, pick_device, place_model, train_one_epoch
from pipeline.precision import PRECISIONS, PrecisionError, grad_scaler, resolve_precision

CHECKPOINT_FORMAT = 1
TIER_NAMES = ("easy", "medium", "hard")


class ConfigError(ValueError):
    """An option value that cannot work; the message names the option."""


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = opt(12, "training epochs")
    batch_size: int = opt(128, "training batch size")
    # SGD with Nesterov momentum and a cosine schedule: on these small CNNs it matches Adam's
    # accuracy with one fewer hyperparameter that interacts with growth (Adam's second moments).
    lr: float = opt(0.05, "peak learning rate of the cosine schedule")
    momentum: float = opt(0.9, "SGD momentum (Nesterov)")
    weight_decay: float = opt(5e-4, "L2 weight decay")
    warmup: float = opt(0.03, "fraction of training spent warming the learning rate up")
    seed: int = opt(0, "seed of weights, data order and dropout")
    device: str = opt("auto", "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    deterministic: bool = opt(False, "deterministic kernels: bit-identical reruns, somewhat slower")
    augment: str = opt("none", "batch augmentation: none, flip, shift or flip+shift")
    label_smoothing: float = opt(0.0, "label smoothing of the training loss (0: none)")
    growth_rewarm: float = opt(
        0.0,
        "fraction of training over which the learning rate climbs back to the schedule's after "
        "each growth event (0: no re-warm)",
    )
    eval_batch_size: int = opt(1024, "batch size for evaluation passes")
    precision: str = opt(
        "auto",
        "autocast precision: auto (bf16 where this hardware runs it fast, else fp32), fp32, bf16 or "
        "fp16 (CUDA only); weights and optimizer state stay fp32",
    )
    compile: bool = opt(False, "torch.compile the model (recompiled after each growth); see README")
    budget: str = opt(
        "",
        "training budget: empty for --epochs, or 24ep, 3.2e14flops, 600s, run:RUN_ID (its FLOPs; "
        "run:RUN_ID:s its seconds), optionally *factor; schedules written for --epochs scale to it",
    )

    def validate(self) -> TrainConfig:
        for name in ("epochs", "batch_size", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ConfigError(f"--lr must be positive, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise ConfigError(f"--weight-decay must be non-negative, got {self.weight_decay}")
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"--label-smoothing must be a fraction in [0, 1), got {self.label_smoothing}")
        if not 0 <= self.growth_rewarm < 1:
            raise ConfigError(f"--growth-rewarm must be a fraction in [0, 1), got {self.growth_rewarm}")
        if not 0 <= self.warmup < 1:
            raise ConfigError(f"--warmup must be a fraction in [0, 1), got {self.warmup}")
        if self.augment not in AUGMENTATIONS:
            raise ConfigError(f"--augment {self.augment!r}: use one of {', '.join(AUGMENTATIONS)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"--precision {self.precision!r}: use one of {', '.join(PRECISIONS)}")
        resolve_precision(self.precision, pick_device(self.device))
        return self

    def resolved_precision(self, device: torch.device) -> str:
        return resolve_precision(self.precision, device)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """One parameter group in ``model.parameters()`` order, so a checkpoint's optimizer state
    always maps back onto a model rebuilt from the checkpoint's spec."""
    return torch.optim.SGD(
        model.parameters(),
        lr=cfg.lr,
        momentum=cfg.momentum,
        weight_decay=cfg.weight_decay,
        nesterov=cfg.momentum > 0,
    )


def rebuild_optimizer(
    old: torch.optim.Optimizer, model: nn.Module, cfg: TrainConfig
) -> torch.optim.Optimizer:
    """A fresh optimizer over ``model``'s current parameters that keeps the state (momentum
    buffers) of every parameter the old one already had; new parameters start with none."""
    new = make_optimizer(model, cfg)
    for param in model.parameters():
        if param in old.state:
            new.state[param] = old.state[param]
    return new


class TrainingPlan:
    """Static training: no growth, every training example each epoch.

    Subclasses override ``before_epoch`` to grow the model and ``positions`` to choose the
    epoch's examples; their state must be JSON-serialisable so checkpoints can hold it.
    """

    # The run's resolved precision, set by ``fit``: what the plan's own measurements (growth
    # probes) run at, so they see the network as training does.
    precision: str = "fp32"
    # Deep supervision (pipeline/exits.py): the loss weight of each early exit, or None to
    # train the head alone even where the spec has exits.
    exit_weights: tuple[float, ...] | None = None

    def weights_for(self, model: SpecNet) -> tuple[float, ...] | None:
        """The early exits' loss weights for ``model`` (a growing one gains exits), or None."""
        n = len(model.spec.exits)
        return tuple(self.exit_weights[:n]) if n and self.exit_weights is not None else None

    def before_epoch(
        self,
        epoch: int,
        model: SpecNet,
        optimizer: torch.optim.Optimizer,
    ) -> tuple[SpecNet, torch.optim.Optimizer, list[dict]]:
        return model, optimizer, []

    def positions(self, epoch: int, model: SpecNet, data: Data) -> torch.Tensor:
        return torch.arange(len(data.train))

    def example_weights(self, epoch: int) -> torch.Tensor | None:
        """(N,) loss weight per training position for the epoch ``positions`` chose; None: all 1."""
        return None

    def wants_example_losses(self, epoch: int) -> bool:
        """Whether ``record_losses`` should see each example's loss of this epoch."""
        return False

    def record_losses(self, order: torch.Tensor, losses: torch.Tensor) -> None:
        """Each trained position (P,) and its loss (P,) in its step, when asked for."""

    def after_epoch(self, epoch: int, metrics: dict) -> None:
        """Sees each finished epoch's metrics (a plateau trigger decides here)."""

    def epoch_info(self, epoch: int) -> dict[str, float]:
        """Extra per-epoch metrics, e.g. the share of data in use."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def tensor_state(self) -> dict[str, torch.Tensor]:
        """State too large for JSON (per-example losses); checkpoints hold it as tensors."""
        return {}

    def load_tensor_state(self, state: dict[str, torch.Tensor]) -> None:
        pass

    def to_dict(self) -> dict:
        """A description for the run's artifacts."""
        return {"kind": "static"}


@dataclass
class ArchitectureTrace:
    """The spec at every epoch and each change to it; JSON-serialisable."""

    specs: dict[str, dict] = field(default_factory=dict)  # spec key -> spec
    epochs: list[dict] = field(default_factory=list)  # per epoch: spec key, params, flops
    events: list[dict] = field(default_factory=list)  # growth events, as the plan reports them

    def record_epoch(self, epoch: int, spec: ArchSpec, params: int, flops: dict) -> None:
        key = f"spec{len(self.specs)}"
        for existing, value in self.specs.items():
            if value == spec.to_dict():
                key = existing
                break
        self.specs.setdefault(key, spec.to_dict())
        self.epochs.append(
            {
                "epoch": epoch,
                "spec": key,
                "params": params,
                "flops_forward": flops["forward"],
                "flops_train": flops["train"],
            }
        )

    def to_dict(self) -> dict:
        return {"specs": self.specs, "epochs": self.epochs, "events": self.events}

    @classmethod
    def from_dict(cls, data: dict) -> ArchitectureTrace:
        return cls(dict(data["specs"]), list(data["epochs"]), list(data["events"]))


@dataclass
class FitState:
    """Everything needed to continue training exactly where it stopped."""

    model: SpecNet
    optimizer: torch.optim.Optimizer
    epoch: int = 0  # the next epoch to run
    global_step: int = 0
    cumulative_s: float = 0.0
    cumulative_train_flops: float = 0.0
    history: list[dict] = field(default_factory=list)
    trace: ArchitectureTrace = field(default_factory=ArchitectureTrace)
    generator: torch.Generator = field(default_factory=torch.Generator)
    precision: str = "fp32"  # resolved (fp32, bf16 or fp16); a resumed run keeps its own
    stop_reason: str = ""  # "epochs": trained them all; "budget": its budget ran out first


def tier_accuracies(result: EvalResult, tiers: torch.Tensor | None, prefix: str) -> dict[str, float]:
    """Accuracy per difficulty tier (0 easy, 1 medium, 2 hard) of an evaluation."""
    if tiers is None:
        return {}
    out = {}
    for t, name in enumerate(TIER_NAMES):
        mask = tiers == t
        if mask.any():
            out[f"{prefix}/acc_{name}"] = float(result.correct[mask].float().mean())
    return out


def exit_accuracies(model: SpecNet, val: Split, batch_size: int) -> dict[str, float]:
    """``val/acc_<exit id>``: each early exit's accuracy on its own."""
    logits = all_exit_logits(model, val.x, batch_size)  # (K+1, N, classes)
    y = val.y.cpu()
    return {
        f"val/acc_{eid}": float((logits[k].argmax(1) == y).float().mean())
        for k, eid in enumerate(model.spec.exit_ids())
    }


def learning_rate(cfg: TrainConfig, trace: ArchitectureTrace, progress: float) -> float:
    """The cosine schedule's rate at ``progress``; with ``--growth-rewarm w``, the rate after
    each growth event (at its epoch's start) climbs linearly from near zero back to the
    schedule's over a fraction ``w`` of training, so the new layers' first steps do not
    take the full rate."""
    lr = cosine_lr(cfg.lr, progress, cfg.warmup)
    if cfg.growth_rewarm > 0:
        for grown_at in {event["epoch"] / cfg.epochs for event in trace.events}:
            if grown_at <= progress < grown_at + cfg.growth_rewarm:
                lr *= (progress - grown_at + 1e-3) / cfg.growth_rewarm
    return lr


def fit(
    state: FitState,
    data: Data,
    cfg: TrainConfig,
    plan: TrainingPlan,
    *,
    val_tiers: torch.Tensor | None = None,
    on_epoch: Callable[[int, dict, FitState], None] | None = None,
    checkpoint: Callable[[FitState, TrainingPlan], None] | None = None,
    progress_bar: bool = False,
    meter=None,
) -> FitState:
    """Run epochs ``state.epoch .. cfg.epochs-1``; ``data`` must already be on the device.

    ``on_epoch(epoch, metrics, state)`` sees every epoch's metrics (logging, pruning);
    ``checkpoint`` is called after each finished epoch. A ``meter`` (``budget.BudgetMeter``)
    ends training before a step its FLOPs or seconds budget cannot pay for.
    """
    lr_at = functools.partial(learning_rate, cfg, state.trace)
    flops = flops_per_example(state.model, data.input_shape)
    device = data.train.x.device
    scaler = grad_scaler(state.precision, device)
    forward = _compiled(state.model, cfg)
    plan.precision = state.precision
    noise_probe = noise_probe_positions(data.train) if data.noisy else None
    for epoch in range(state.epoch, cfg.epochs):
        epoch_start = time.perf_counter()
        model, optimizer, events = plan.before_epoch(epoch, state.model, state.optimizer)
        if model is not state.model:
            place_model(model, device)  # new layers take the layout of the old ones
            flops = flops_per_example(model, data.input_shape)
            forward = _compiled(model, cfg)
        state.model, state.optimizer = model, optimizer
        state.trace.events.extend(events)
        positions = plan.positions(epoch, state.model, data)
        weights = plan.example_weights(epoch)
        allows = None
        if meter is not None:
            meter.spent = state.cumulative_train_flops if meter.budget.unit == "flops" else state.cumulative_s
            meter.spent += time.perf_counter() - epoch_start if meter.budget.unit == "seconds" else 0.0
            allows = functools.partial(_budget_allows, meter, flops["train"])
        stats = train_one_epoch(
            forward,
            state.optimizer,
            data.train,
            positions,
            batch_size=cfg.batch_size,
            lr_at=lr_at,
            epoch=epoch,
            epochs=cfg.epochs,
            global_step=state.global_step,
            generator=state.generator,
            augment=cfg.augment,
            progress_bar=progress_bar,
            weights=None if weights is None else weights.to(data.train.x.device),
            example_losses=plan.wants_example_losses(epoch),
            precision=state.precision,
            scaler=scaler,
            allows=allows,
            label_smoothing=cfg.label_smoothing,
            exit_weights=plan.weights_for(state.model),
        )
        if stats.examples == 0:  # the budget could not pay for a single step of this epoch
            state.stop_reason = "budget"
            break
        if stats.losses is not None:
            plan.record_losses(stats.order, stats.losses)
        val_start = time.perf_counter()
        val = evaluate(forward, data.val, cfg.eval_batch_size, precision=state.precision)
        if meter is not None:
            meter.reserve_s = time.perf_counter() - val_start
        state.global_step += stats.steps
        state.cumulative_train_flops += flops["train"] * stats.examples
        params = count_parameters(state.model)
        state.trace.record_epoch(epoch, state.model.spec, params, flops)
        epoch_s = time.perf_counter() - epoch_start
        state.cumulative_s += epoch_s
        metrics = {
            "train/loss": stats.loss,
            "train/acc": stats.acc,
            "val/loss": val.loss,
            "val/acc": val.acc,
            **tier_accuracies(val, val_tiers, "val"),
            "train/lr": stats.lr,
            "train/examples": stats.examples,
            "time/train_s": stats.seconds,
            "time/epoch_s": epoch_s,
            "time/cumulative_s": state.cumulative_s,
            "throughput/samples_per_s": stats.examples / max(stats.seconds, 1e-9),
            "model/params": params,
            "model/flops_per_example": flops["forward"],
            "train/flops_cumulative": state.cumulative_train_flops,
            **plan.epoch_info(epoch),
        }
        if state.model.spec.exits:  # outside the epoch's time too: a probe of each exit
            metrics.update(exit_accuracies(state.model, data.val, cfg.eval_batch_size))
        if data.noisy:  # measured outside the epoch's time: a probe, not part of training
            metrics.update(noise_metrics(forward, data, positions, val, noise_probe, cfg, state.precision))
        state.history.append({"epoch": epoch, **metrics})
        state.epoch = epoch + 1
        plan.after_epoch(epoch, metrics)
        if on_epoch is not None:
            on_epoch(epoch, metrics, state)
        if checkpoint is not None:
            checkpoint(state, plan)
        if meter is not None and meter.exhausted:
            state.stop_reason = "budget"
            break
    else:
        state.stop_reason = "epochs"
    return state


# Examples of each kind (flipped, clean) the memorisation probe evaluates per epoch: enough for
# a standard error under 0.8 points, few enough to cost a fraction of an epoch.
NOISE_PROBE_SIZE = 4000


def noise_probe_positions(train: Split, size: int = NOISE_PROBE_SIZE) -> torch.Tensor:
    """Fixed training positions (P,): up to ``size`` flipped and ``size`` clean examples, the
    same every epoch and on resume (a generator of their own, not the run's)."""
    generator = torch.Generator().manual_seed(0)
    flipped = train.flipped.cpu()
    picks = []
    for mask in (flipped, ~flipped):
        members = torch.nonzero(mask).flatten()
        picks.append(members[torch.randperm(len(members), generator=generator)[:size]])
    return torch.cat(picks).sort().values


def noise_metrics(
    model: nn.Module,
    data: Data,
    positions: torch.Tensor,
    val: EvalResult,
    probe: torch.Tensor,
    cfg: TrainConfig,
    precision: str,
) -> dict[str, float]:
    """How much of the label noise the network has learned (memorisation) and met.

    On the probe's training examples: accuracy on the clean ones, and on the flipped ones
    against their original label (what it should say) and against the noisy label it was
    taught (what memorising says). ``trained_flipped_share``: flipped examples among those
    the epoch trained (a curriculum that holds noisy examples back keeps it below the rate).
    ``val_acc_original``: validation accuracy against the original labels."""
    train = data.train
    idx = probe.to(train.y.device)
    sample = Split(train.x[idx], train.y[idx], train.index[idx], train.y_clean[idx])
    pred = evaluate(model, sample, cfg.eval_batch_size, precision=precision).predictions
    y, clean, flipped = sample.y.cpu(), sample.y_clean.cpu(), sample.flipped.cpu()
    out = {"noise/trained_flipped_share": float(train.flipped.cpu()[positions.cpu()].float().mean())}
    if (~flipped).any():
        out["noise/train_acc_clean"] = float((pred[~flipped] == y[~flipped]).float().mean())
    if flipped.any():
        out["noise/train_acc_flipped_original"] = float((pred[flipped] == clean[flipped]).float().mean())
        out["noise/train_acc_flipped_noisy"] = float((pred[flipped] == y[flipped]).float().mean())
    if data.val.y_clean is not None:
        out["noise/val_acc_original"] = float((val.predictions == data.val.y_clean.cpu()).float().mean())
    return out


def _budget_allows(meter, flops_per_train_example: float, done: int, batch: int, elapsed: float) -> bool:
    return meter.allows(done, batch, flops_per_train_example, elapsed)


def _compiled(model: SpecNet, cfg: TrainConfig) -> nn.Module:
    """What ``fit`` calls for forward passes: ``model`` itself, or with ``--compile`` a compiled
    wrapper that shares its parameters (so checkpoints and growth see the plain module)."""
    return torch.compile(model) if cfg.compile else model


# --- checkpoints -------------------------------------------------------------------------


def checkpoint_dict(state: FitState, plan: TrainingPlan, cfg: TrainConfig) -> dict:
    """A checkpoint of plain containers and tensors, loadable with ``weights_only=True``."""
    return {
        "format": CHECKPOINT_FORMAT,
        "spec": state.model.spec.to_json(),
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "epoch": state.epoch,
        "global_step": state.global_step,
        "cumulative_s": state.cumulative_s,
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
    }


def save_checkpoint(path: Path, state: FitState, plan: TrainingPlan, cfg: TrainConfig) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".partial")
    torch.save(checkpoint_dict(state, plan, cfg), tmp)
    tmp.replace(path)  # a crash mid-write leaves the previous checkpoint intact
    return path


class CheckpointError(ValueError):
    """A checkpoint that is missing, truncated or does not fit."""


def load_checkpoint(path: Path, cfg: TrainConfig, plan: TrainingPlan, device: torch.device) -> FitState:
    """Rebuild the whole training state from a checkpoint; never unpickles arbitrary objects."""
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
    optimizer = make_optimizer(model, cfg)
    optimizer.load_state_dict(ckpt["optimizer"])
    precision = _resumed_precision(str(ckpt.get("precision", "fp32")), cfg, device, path)
    plan.load_state_dict(json.loads(ckpt["plan"]))
    plan.load_tensor_state(ckpt.get("plan_tensors", {}))
    torch.set_rng_state(ckpt["rng_torch"])
    generator = torch.Generator()
    generator.set_state(ckpt["rng_data"])
    if ckpt["rng_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(ckpt["rng_cuda"])
    return FitState(
        model=model,
        optimizer=optimizer,
        epoch=ckpt["epoch"],
        global_step=ckpt["global_step"],
        cumulative_s=ckpt["cumulative_s"],
        cumulative_train_flops=ckpt["cumulative_train_flops"],
        history=json.loads(ckpt["history"]),
        trace=ArchitectureTrace.from_dict(json.loads(ckpt["trace"])),
        generator=generator,
        precision=precision,
    )


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


def new_state(spec: ArchSpec, cfg: TrainConfig, device: torch.device) -> FitState:
    """A fresh model and optimizer; call after seeding so the initial weights follow the seed."""
    model = place_model(build_model(spec), device)
    generator = torch.Generator().manual_seed(cfg.seed)
    return FitState(
        model=model,
        optimizer=make_optimizer(model, cfg),
        generator=generator,
        precision=cfg.resolved_precision(device),
    )
