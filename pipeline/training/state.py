"""What training carries from epoch to epoch: the model, optimizer, counters, history and the
architecture trace; a fresh state for a new run."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from models.builder import SpecNet, build_model
from models.layers.convbn import dirac_init
from models.spec import ArchSpec
from pipeline.device import place_model
from pipeline.training.average import WeightAverage
from pipeline.training.config import TrainConfig, make_optimizer
from pipeline.training.lookahead import Lookahead


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
class RunProgress:
    """How far through its schedule a run is (0 to 1: what the learning rate follows), as a
    function of the share of its planned ``epochs`` trained. A run of fixed length goes
    straight from 0 to 1; a seconds run that re-plans its length while it trains
    (``pipeline/budget/replan.py``) keeps the progress it had reached at the epoch it
    re-planned at (``anchor_epoch``, ``anchor_progress``) and spreads the rest over its new
    epochs, so its rate goes on from where it was rather than jumping."""

    epochs: int
    anchor_epoch: int = 0
    anchor_progress: float = 0.0

    def at(self, share: float) -> float:
        """The progress at ``share`` of the planned epochs trained (epoch + share of its steps,
        over ``epochs``); exactly ``share`` for a run that never re-planned."""
        start = self.anchor_epoch / self.epochs
        return self.anchor_progress + (1 - self.anchor_progress) * (share - start) / (1 - start)

    def replan(self, next_epoch: int, epochs: int) -> None:
        """From ``next_epoch`` on, the run plans ``epochs`` epochs."""
        self.anchor_progress = self.at(next_epoch / self.epochs)
        self.anchor_epoch, self.epochs = next_epoch, epochs

    def to_dict(self) -> dict:
        return {
            "epochs": self.epochs,
            "anchor_epoch": self.anchor_epoch,
            "anchor_progress": self.anchor_progress,
        }

    @classmethod
    def from_dict(cls, data: dict) -> RunProgress:
        return cls(int(data["epochs"]), int(data["anchor_epoch"]), float(data["anchor_progress"]))


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
    # "epochs": trained them all; "budget": its budget ran out first; "collapsed": it died
    stop_reason: str = ""
    average: WeightAverage | None = None  # with --ema-decay: the averaged weights
    lookahead: Lookahead | None = None  # with --lookahead: the slow weights
    # fp16's gradient scaler: its scale is found by training, so a resumed run keeps it
    scaler: torch.amp.GradScaler | None = None
    # cumulative seconds per part of the epoch loop (pipeline/budget/timing.py)
    time_parts: dict[str, float] = field(default_factory=dict)
    # the run's planned epochs and schedule progress; None until ``fit`` starts it from the
    # config (a seconds run may re-plan its epochs as it trains)
    progress: RunProgress | None = None


def new_state(spec: ArchSpec, cfg: TrainConfig, device: torch.device) -> FitState:
    """A fresh model and optimizer; call after seeding so the initial weights follow the seed."""
    model = build_model(spec)
    if cfg.conv_init == "dirac":
        dirac_init(model)
    model = place_model(model, device)
    generator = torch.Generator().manual_seed(cfg.seed)
    return FitState(
        model=model,
        optimizer=make_optimizer(model, cfg),
        generator=generator,
        precision=cfg.resolved_precision(device),
    )
