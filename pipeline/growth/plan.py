"""A growing run's growth plan: its events, applied at the start of the epoch they are due (or
earlier, on a plateau), each through ``models.growth.grow``, which inserts the new layer (or
widens one) and initialises it (at random, or as an identity that a training batch
calibrates); then the optimizer is rebuilt around the grown network and the jump measured on a
fixed probe batch. No MLflow inside.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from models.builder import SpecNet
from models.flops import flops_per_example
from models.growth import PlateauTrigger, calibrate, carry_stage_head, events_due, grow, probe_jump
from models.schedule import GrowthEvent, final_spec
from pipeline.data.dataset import Data
from pipeline.growth.config import GrowthConfig
from pipeline.precision import autocast
from pipeline.training.config import TrainConfig, rebuild_optimizer

PROBE_SIZE = 512  # validation examples of the fixed probe batch that measures growth jumps


def growth_label(info: dict) -> str:
    """How plots and logs name a growth: ``+residual s1b2``, or ``s2b1 widened to 32``."""
    if info["kind"] == "widen":
        return f"{info['layer_id']} widened to {info['event']['width']}"
    return f"+{info['layer']['type']} {info['layer_id']}"


class GrowthPlan:
    """Grows the model by ``events``; ``stage_exits``: before each growth, the stage's head
    becomes an exit."""

    def __init__(
        self,
        train_cfg: TrainConfig,
        data: Data,
        events: list[GrowthEvent],
        growth: GrowthConfig,
        stage_exits: bool = False,
    ):
        self.cfg = train_cfg  # what a rebuilt optimizer takes its options from
        self.events = list(events)
        self.config = growth
        self.stage_exits = stage_exits
        self.applied = 0  # how many events have been applied
        self.trigger = PlateauTrigger(growth.plateau_patience) if growth.grow_on == "plateau" else None
        self.plateau = False
        # A fixed probe batch (the first validation examples) measures each growth's jump.
        self.probe = (data.val.x[:PROBE_SIZE], data.val.y[:PROBE_SIZE])
        # and a fixed training batch fits a new layer's normalisation (models.growth.calibrate)
        self.calibration_x = data.train.x[:PROBE_SIZE]

    def apply_due(
        self, epoch: int, model: SpecNet, optimizer: torch.optim.Optimizer, precision: str
    ) -> tuple[SpecNet, torch.optim.Optimizer, list[dict]]:
        """The events due at ``epoch`` applied, in order; a report of each (``precision``: what
        the jump is measured at, as training sees it)."""
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
            grown, info = grow(model, event, self.config.growth_init, self.config.growth_noise)
            optimizer = rebuild_optimizer(optimizer, grown, self.cfg)
            x, y = (t.to(next(grown.parameters()).device) for t in self.probe)
            # a preserving identity fits its normalisation to training data; a widened layer
            # keeps its trained statistics
            if info["preserved"] and info["kind"] == "insert":
                info["calibrated"] = calibrate(grown, info["layer_id"], self.calibration_x.to(x.device))
            with autocast(precision, x.device):  # the jump as training sees it
                jump = probe_jump(model, grown, x, y)
            flops_after = flops_per_example(grown, input_shape)["forward"]
            reports.append(
                {
                    **info,
                    "applied_at_epoch": epoch,
                    "scheduled_epoch": event.epoch,
                    "trigger": "schedule" if event.epoch <= epoch else "plateau",
                    "label": growth_label(info),
                    "flops_before": flops_before,
                    "flops_after": flops_after,
                    **{f"probe_{k}": v for k, v in jump.items()},
                    "probe_precision": precision,
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

    def after_epoch(self, metrics: dict) -> None:
        """A plateau trigger sees the epoch's validation accuracy."""
        if self.trigger is not None and self.applied < len(self.events):
            self.plateau = self.trigger.update(metrics["val/acc"])

    def epochs(self) -> set[int]:
        return {event.epoch for event in self.events}

    def agrees(self, epoch: int, events: list[GrowthEvent]) -> bool:
        """Whether a plan of ``events`` had as many growths due by ``epoch`` as this one."""
        due = lambda evs: sum(e.epoch <= epoch for e in evs)
        return due(events) == due(self.events)

    def adopt(self, train_cfg: TrainConfig, events: list[GrowthEvent]) -> None:
        """Go on with the same events placed at other epochs (a re-planned run's)."""
        placed = lambda evs: [dataclasses.replace(e, epoch=0) for e in evs]
        if placed(events) != placed(self.events):
            raise RuntimeError("a re-planned run must grow by the same events, at other epochs only")
        self.cfg, self.events = train_cfg, list(events)

    def state_dict(self) -> dict:
        return {
            "applied": self.applied,
            "plateau": self.plateau,
            "trigger": self.trigger.state_dict() if self.trigger else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.applied, self.plateau = int(state["applied"]), bool(state["plateau"])
        if self.trigger is not None and state["trigger"] is not None:
            self.trigger.load_state_dict(state["trigger"])
