"""A run's curriculum inputs: its ``--scores-run`` resolved, the scores loaded and checked
against its data, and its diet built from them; the one module of this package that reaches
MLflow (through ``pipeline.difficulty.scores_table``).
"""

from __future__ import annotations

from pipeline.curriculum.config import CurriculumConfig
from pipeline.curriculum.diet import CurriculumSetup, build_diet, needs_scores
from pipeline.data.dataset import Data
from pipeline.difficulty.scores_table import find_scores_run, load_scores
from pipeline.tracking.errors import UpstreamError
from pipeline.training.config import TrainConfig


def prepare_curriculum(
    cfg: CurriculumConfig, data: Data, train_cfg: TrainConfig, events: list
) -> CurriculumSetup:
    """Find and load the scores a run needs, and build its diet (``build_diet``); fails
    before any training."""
    needs = needs_scores(cfg)
    ref = cfg.scores_run.strip()
    if ref == "auto":
        ref = find_scores_run(data)
        if not ref and needs:
            raise UpstreamError(
                f"--pacing {cfg.pacing}{f' --hold-back {cfg.hold_back:g}' if cfg.hold_back else ''} "
                "needs difficulty scores and no finished score_difficulty run "
                f"matches this data (digest {data.digest}): run `mlflow run . -e score_difficulty` "
                "with the same data options first, pass --scores-run, or use --pacing none"
                + (" without --hold-back" if cfg.hold_back else "")
            )
    elif ref in ("", "none"):
        if needs:
            what = f"--pacing {cfg.pacing}" if cfg.pacing != "none" else f"--hold-back {cfg.hold_back:g}"
            raise UpstreamError(f"{what} needs --scores-run (a score_difficulty run)")
        ref = ""
    table = load_scores(ref, data) if ref else None
    return build_diet(cfg, table, data, events, train_cfg)
