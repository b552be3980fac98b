"""The study's protocol in code: which seeds may confirm, what is preregistered before they
train, Holm's correction across a study's comparisons, and the label every figure carries.

A ``screen`` study reads the validation split only and may try anything; its seeds become
tuning seeds. A ``confirm`` study reads the test split once per run, through evaluate, on seeds
that no screen run of the tracking store used and that gated no choice (``GATED_SEEDS``), and
logs its preregistration (comparisons, seeds, metric, correction) before any cell trains.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from pipeline.cli import ConfigError

PHASES = ("screen", "confirm")
METRIC = {"screen": "val/acc", "confirm": "test/acc"}
CORRECTION = "holm"

# Every seed whose result gated a choice of this project, with the choice: the one place they
# are listed (README and docs/measurements.md point here). A gating seed is a tuning seed from
# then on: it may screen, never confirm, and a figure on it is exploratory.
GATED_SEEDS: dict[tuple[int, int], str] = {
    (0, 2): "chose the defaults (schedule, curriculum, recipe)",
    (100, 109): "kept random erasing off; suggested erase+wd1e-3",
    (110, 114): "a failed first check of erase+wd1e-3 that prompted a second look",
    (160, 160): "the seconds rule's revert and its guards",
    (170, 170): "the seconds rule's revert and its guards",
    (600, 600): "the growth fix (re-warm)",
    (700, 701): "the growth fix (re-warm)",
    (710, 714): "the random start of new layers",
    (720, 724): "read one at a time as the gate for making the random start the default",
    (900, 904): "the residual confirmation whose test readout was lost; its validation was read",
    (910, 912): "the residual confirmation at 8 epochs on the CPU: their test split was read",
    (913, 915): "the residual random-order control at 8 epochs on the CPU: their test split was read",
    (916, 920): "the residual half-FLOPs check at 8 epochs on the CPU: their test split was read",
    (921, 925): "the residual equal-epochs check at 8 epochs on the CPU: their test split was read",
    (926, 929): "the residual widening check at static's seconds on the CPU: their test split was read",
    (931, 934): "the replication of the residual widening check on the CPU: their test split was read",
    (935, 937): "the widened residual network's random-order control: their test split was read",
    (943, 947): "the short-run baseline's confirmation on the GPU: their test split was read",
    (948, 952): "the five pairs of growth into the short-run baseline at static's seconds: "
    "their test split was read",
    (953, 957): "the static baseline at 90% (short-convs, airbench's recipe, 22 epochs) on the CPU: "
    "their test split was read",
    (958, 958): "the first of five seeds of growth against the 90% baseline (airbench-compare-958): "
    "its test split was read",
    (959, 959): "the second of five seeds of growth against the 90% baseline (airbench-compare-959): "
    "its test split was read",
    (960, 960): "the third of five seeds of growth against the 90% baseline (airbench-compare-960 and "
    "its continuation -960-b): its test split was read",
    (961, 961): "the fourth of five seeds of growth against the 90% baseline (airbench-compare-961): "
    "its test split was read",
    (962, 962): "the fifth of five seeds of growth against the 90% baseline (airbench-compare-962 and "
    "its continuations -962-b, -962-d, -962-e): its test split was read",
    (963, 963): "the third of five seeds of the max head's confirmation at 90% "
    "(static90-maxhead-963-967) to finish, its first attempt's retry: its test split was read "
    "(the figure lost with that store, never reported)",
    (964, 964): "the first of five seeds of the max head's confirmation at 90% "
    "(static90-maxhead-963-967) to finish: its test split was read (the figure lost with that "
    "store, never reported)",
    (967, 967): "the second of five seeds of the max head's confirmation at 90% "
    "(static90-maxhead-963-967) to finish: its test split was read (the figure lost with that "
    "store, never reported)",
    (965, 966): "the first two of five seeds of the max head's confirmation at 90% "
    "(static90-maxhead-b-965 and -966, a study a seed): their test splits were read",
    (968, 968): "the third of five seeds of the max head's confirmation at 90% "
    "(static90-maxhead-b-968): its test split was read",
    (1000, 1000): "screened the short-run residual network (its widths, its recipe), airbench's recipe "
    "and the port's max-pool head against airbench's own code, and the max head at 22 epochs "
    "(validation)",
    (1001, 1001): "screened airbench's max head against short-convs at 22 epochs (validation)",
    (9990, 9991): "dry runs of bench_gpu.sh short on a 500-example subset: their test split was read",
    (9992, 9992): "a dry run of bench_gpu.sh airbench on a 300-example subset: its test split was read",
}


def gated(seed: int) -> str:
    """What ``seed`` chose, or '' if it chose nothing."""
    return next((why for (lo, hi), why in GATED_SEEDS.items() if lo <= seed <= hi), "")


def check_confirm_seeds(seeds: tuple[int, ...], used: dict[int, str]) -> None:
    """Refuse a confirmation on a seed that gated a choice or that another study spent
    (``used``: seed -> that study, e.g. "screen study 'resnet-screen'")."""
    for seed in seeds:
        if gated(seed):
            raise ConfigError(
                f"--seeds: seed {seed} gated a choice ({gated(seed)}): it may screen, not confirm; "
                "choose seeds that nothing has used"
            )
        if seed in used:
            raise ConfigError(
                f"--seeds: seed {seed} trained in {used[seed]}, so it is a tuning seed now: confirm "
                "on seeds that no other study used"
            )


@dataclass(frozen=True)
class Preregistration:
    """What a confirmation commits to before its seeds train."""

    study: str
    comparisons: tuple[str, ...]
    seeds: tuple[int, ...]
    metric: str
    correction: str
    alpha: float
    grid: dict  # arms, budgets, epochs, recipe and data: what trains

    def to_dict(self) -> dict:
        return {
            "study": self.study,
            "comparisons": list(self.comparisons),
            "seeds": list(self.seeds),
            "metric": self.metric,
            "correction": self.correction,
            "alpha": self.alpha,
            "grid": self.grid,
        }

    def digest(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def label(phase: str, seeds: tuple[int, ...], preregistered: bool) -> str:
    """confirmatory only for a preregistered confirmation on seeds that gated nothing."""
    if phase == "confirm" and preregistered and not any(gated(s) for s in seeds):
        return "confirmatory"
    return "exploratory"
