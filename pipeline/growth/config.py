"""The growth options of a growing run (``train_dynamic``, tune's trials, a study's growing arms)."""

from __future__ import annotations

from dataclasses import dataclass

from models.growth import DEFAULT_GROWTH_INIT, GROWTH_INITS
from models.schedule import GrowthError
from pipeline.cli import opt

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
