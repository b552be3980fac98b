"""The experiment plan: growth events and a curriculum, as a ``TrainingPlan`` for ``fit``; and
the growth options it applies (``GrowthConfig``: the start network, the schedule, how new layers
start, when to grow). The curriculum's options live with the curriculum
(``pipeline/curriculum/config.py``).

``train_static`` uses it with no growth (a curriculum alone), ``train_dynamic`` with both, so
data order and model growth can be compared separately. No MLflow inside.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass

import torch

from models.builder import SpecNet
from models.flops import flops_per_example
from models.growth import (
    DEFAULT_GROWTH_INIT,
    GROWTH_INITS,
    PlateauTrigger,
    calibrate,
    carry_stage_head,
    events_due,
    grow,
    probe_jump,
)
from models.schedule import GrowthError, GrowthEvent, final_spec, schedule_to_json
from pipeline.cli import opt
from pipeline.curriculum.base import Curriculum
from pipeline.curriculum.pruning import LossPruner
from pipeline.data.dataset import Data
from pipeline.precision import autocast
from pipeline.training.config import TrainConfig, rebuild_optimizer
from pipeline.training.epoch_loop import TrainingPlan

PROBE_SIZE = 512  # validation examples of the fixed probe batch that measures growth jumps
GROW_ON = ("schedule", "plateau")


@dataclass(frozen=True)
class GrowthConfig:
    start_spec: str = opt("minimal", "architecture the run starts from (name, JSON file or string)")
    schedule: str = opt(
        "default", "growth schedule: a name, JSON, or compact like '3:conv(64)@after:pool1;6:residual'"
    )
    growth_init: str = opt(
        DEFAULT_GROWTH_INIT,
        "what new layers start as: random (a fresh layer's init, then the re-warm) or preserve (an "
        "identity where possible: the grown network computes the same function at first)",
    )
    growth_noise: float = opt(
        0.0,
        "with preserve: add this multiple of a new layer's random init to the weights its identity "
        "set (0: an exact identity)",
    )
    grow_on: str = opt(
        "schedule", "schedule: at the events' epochs; plateau: also earlier when val/acc stalls"
    )
    plateau_patience: int = opt(
        2, "epochs without val/acc improvement that trigger the next growth (plateau)"
    )

    def validate(self) -> GrowthConfig:
        if self.growth_init not in GROWTH_INITS:
            raise GrowthError(f"--growth-init {self.growth_init!r}: use one of {', '.join(GROWTH_INITS)}")
        if self.growth_noise < 0:
            raise GrowthError(f"--growth-noise must be non-negative, got {self.growth_noise}")
        if self.growth_noise > 0 and self.growth_init != "preserve":
            raise GrowthError("--growth-noise perturbs a preserved identity: it needs --growth-init preserve")
        if self.grow_on not in GROW_ON:
            raise GrowthError(f"--grow-on {self.grow_on!r}: use one of {', '.join(GROW_ON)}")
        if self.plateau_patience < 1:
            raise GrowthError(f"--plateau-patience must be positive, got {self.plateau_patience}")
        return self


class ExperimentPlan(TrainingPlan):
    """Grows the model by ``events`` and feeds it the ``curriculum``'s examples each epoch."""

    def __init__(
        self,
        train_cfg: TrainConfig,
        data: Data,
        events: list[GrowthEvent] | None = None,
        growth: GrowthConfig | None = None,
        curriculum: Curriculum | None = None,
        pruner: LossPruner | None = None,
        exit_weights: tuple[float, ...] | None = None,
        stage_exits: bool = False,
    ):
        """``exit_weights``: deep supervision of the model's exits (None: the head alone);
        ``stage_exits``: before each growth, the stage's head becomes an exit."""
        self.cfg = train_cfg
        self.exit_weights = exit_weights
        self.stage_exits = stage_exits
        self.events = list(events or [])
        self.growth = growth or GrowthConfig()
        self.curriculum = curriculum
        self.pruner = pruner
        self.weights: torch.Tensor | None = None  # (N,) loss weights of this epoch, from pruning
        self.applied = 0  # how many events have been applied
        self.trigger = (
            PlateauTrigger(self.growth.plateau_patience) if self.growth.grow_on == "plateau" else None
        )
        self.plateau = False
        # A fixed probe batch (the first validation examples) measures each growth's jump.
        self.probe = (data.val.x[:PROBE_SIZE], data.val.y[:PROBE_SIZE])
        # and a fixed training batch fits a new layer's normalisation (models.growth.calibrate)
        self.calibration_x = data.train.x[:PROBE_SIZE]

    def before_epoch(self, epoch, model: SpecNet, optimizer):
        due = events_due(self.events, self.applied, epoch, self.plateau)
        self.plateau = False
        reports = []
        carried = None
        if due and self.stage_exits:
            model, carried = carry_stage_head(model, final_spec(model.spec, due))
        for event in due:
            start = time.perf_counter()
            input_shape = model.spec.input_shape
            flops_before = flops_per_example(model, input_shape)["forward"]
            grown, info = grow(model, event, self.growth.growth_init, self.growth.growth_noise)
            optimizer = rebuild_optimizer(optimizer, grown, self.cfg)
            x, y = (t.to(next(grown.parameters()).device) for t in self.probe)
            if info["preserved"]:  # a preserving identity fits its normalisation to training data
                info["calibrated"] = calibrate(grown, info["layer_id"], self.calibration_x.to(x.device))
            with autocast(self.precision, x.device):  # the jump as training sees it
                jump = probe_jump(model, grown, x, y)
            flops_after = flops_per_example(grown, input_shape)["forward"]
            reports.append(
                {
                    **info,
                    "applied_at_epoch": epoch,
                    "scheduled_epoch": event.epoch,
                    "trigger": "schedule" if event.epoch <= epoch else "plateau",
                    "label": f"+{info['layer']['type']} {info['layer_id']}",
                    "flops_before": flops_before,
                    "flops_after": flops_after,
                    **{f"probe_{k}": v for k, v in jump.items()},
                    "probe_precision": self.precision,
                    "seconds": time.perf_counter() - start,
                }
            )
            model = grown
            self.applied += 1
        # Plots and reports place events at the epoch they happened before.
        for report in reports:
            report["epoch"] = epoch
        if reports and carried is not None:
            reports[0]["exit_added"] = carried
        return model, optimizer, reports

    def positions(self, epoch: int, model: SpecNet, data: Data) -> torch.Tensor:
        if self.curriculum is None:
            chosen = torch.arange(len(data.train))
        else:
            chosen = self.curriculum.positions(epoch, model, data)
        if self.pruner is None:
            return chosen
        kept, self.weights = self.pruner.select(epoch, self.cfg.epochs, chosen)
        return kept

    def example_weights(self, epoch: int) -> torch.Tensor | None:
        return self.weights

    def wants_example_losses(self, epoch: int) -> bool:
        return self.pruner is not None and self.pruner.needs_losses(epoch, self.cfg.epochs)

    def record_losses(self, order: torch.Tensor, losses: torch.Tensor) -> None:
        self.pruner.record(order, losses)

    def after_epoch(self, epoch: int, metrics: dict) -> None:
        if self.trigger is not None and self.applied < len(self.events):
            self.plateau = self.trigger.update(metrics["val/acc"])

    def growth_epochs(self) -> set[int]:
        return {event.epoch for event in self.events}

    def replan(self, last_epoch: int, epochs: int, events: list[GrowthEvent], setup) -> bool:
        if not self._agrees(last_epoch, epochs, events, setup):
            return False
        self.adopt(epochs, events, setup)
        return True

    def _agrees(self, epoch: int, epochs: int, events: list[GrowthEvent], setup) -> bool:
        """Whether a plan of ``epochs`` epochs had at ``epoch`` what this one had: the same
        growth events due, the same curriculum stage and size, pruning alike (and alike wanting
        the epoch's losses), so that taking it from the next epoch on moves nothing back."""
        if sum(e.epoch <= epoch for e in events) != sum(e.epoch <= epoch for e in self.events):
            return False
        mine, theirs = self.curriculum, setup.curriculum
        if (mine is None) != (theirs is None) or (mine and mine.stage_of(epoch) != theirs.stage_of(epoch)):
            return False
        if self.pruner is None or setup.pruner is None:
            return self.pruner is setup.pruner
        return all(
            getattr(self.pruner, ask)(epoch, self.cfg.epochs) == getattr(setup.pruner, ask)(epoch, epochs)
            for ask in ("active", "needs_losses")
        )

    def adopt(self, epochs: int, events: list[GrowthEvent], setup) -> None:
        """Go on as a plan of ``epochs`` epochs with these growth events and curriculum setup,
        keeping what the run has gathered (pruning's losses, what self-paced epochs used)."""
        placed = lambda evs: [dataclasses.replace(e, epoch=0) for e in evs]
        if placed(events) != placed(self.events):
            raise RuntimeError("a re-planned run must grow by the same events, at other epochs only")
        if self.curriculum is not None:
            setup.curriculum.continue_from(self.curriculum)
        if self.pruner is not None:
            setup.pruner.load_state_dict(self.pruner.state_dict())
        self.cfg = dataclasses.replace(self.cfg, epochs=epochs)
        self.events, self.curriculum, self.pruner = list(events), setup.curriculum, setup.pruner

    def epoch_info(self, epoch: int) -> dict[str, float]:
        info = {"growth/events_applied": float(self.applied)}
        if self.curriculum is not None:
            info.update(self.curriculum.epoch_info(epoch))
        if self.pruner is not None:
            info["curriculum/pruned_share"] = self.pruner.pruned_share
        return info

    def state_dict(self) -> dict:
        return {
            "applied": self.applied,
            "plateau": self.plateau,
            "trigger": self.trigger.state_dict() if self.trigger else None,
            "curriculum": self.curriculum.state_dict() if self.curriculum else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.applied, self.plateau = int(state["applied"]), bool(state["plateau"])
        if self.trigger is not None and state["trigger"] is not None:
            self.trigger.load_state_dict(state["trigger"])
        if self.curriculum is not None and state["curriculum"] is not None:
            self.curriculum.load_state_dict(state["curriculum"])

    def tensor_state(self) -> dict[str, torch.Tensor]:
        return self.pruner.state_dict() if self.pruner is not None else {}

    def load_tensor_state(self, state: dict[str, torch.Tensor]) -> None:
        if self.pruner is not None:
            self.pruner.load_state_dict(state)

    def to_dict(self) -> dict:
        return {
            "kind": "dynamic" if self.events else "static",
            "epochs": self.cfg.epochs,  # as last planned: a seconds run re-plans as it trains
            "growth": asdict(self.growth) if self.events else None,
            "schedule": schedule_to_json(self.events) if self.events else None,
            "curriculum": self.curriculum.to_dict() if self.curriculum else {"pacing": "none"},
            "pruning": self.pruner.to_dict() if self.pruner else None,
            "exit_weights": list(self.exit_weights) if self.exit_weights is not None else None,
            "stage_exits": self.stage_exits,
            "curriculum_schedule": self.curriculum.schedule_table() if self.curriculum else None,
        }
