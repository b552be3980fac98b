"""Named recipes a study trains under (``--recipe``): the levers the project has screened, each
a set of options over the study's own. Pure data: no MLflow, no Optuna.

A recipe's ``both`` options change the training recipe of every arm (static too, so the
comparison stays matched); ``diet``, ``growth`` and ``dynamic`` change only the growing arms'
curriculum, growth and training options. Levers that change the networks themselves are the
study's ``--start-spec`` and ``--schedule`` (batchnorm: ``minimal-bn`` and ``default-bn``;
growing earlier: ``early``), since static trains the network the schedule ends in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.cli import ConfigError


@dataclass(frozen=True)
class Recipe:
    about: str
    both: dict = field(default_factory=dict)  # TrainConfig options of every arm
    diet: dict = field(default_factory=dict)  # DynamicCurriculumConfig options of the growing arms
    growth: dict = field(default_factory=dict)  # GrowthConfig options of the growing arms
    dynamic: dict = field(default_factory=dict)  # TrainConfig options of the growing arms only


KEEP = {"tier_boundaries": "1,2", "prune_from": 3}  # the easy examples never retire
ERASE_WD = {"augment": "erase", "weight_decay": 1e-3}
# airbench93's decoupled rates (lr 11.5 and weight decay 0.0153 per 1,024 examples of a summed
# loss, momentum 0.85) for this loop's mean loss, with its batchnorm (64x shifts, scales kept at
# 1, running statistics at momentum 0.4), lookahead, identity start, translations and six views;
# the 1/9 on the logits and GELU are the network's (the short-convs specs)
AIRBENCH = {
    "batch_size": 1024,
    "lr": 1.5,
    "momentum": 0.85,
    "weight_decay": 1.33e-3,
    "warmup": 0.23,
    "label_smoothing": 0.2,
    "augment": "flip+translate",
    "bn_bias_lr_scale": 64.0,
    "bn_scale_frozen": True,
    "bn_momentum": 0.4,
    "lookahead": 5,
    "conv_init": "dirac",
    "tta": "flip+shift",
}

# airbench94's pieces our airbench93 port lacked, for the screen toward 90% (each alone, then all)
ALTFLIP = {"augment": "altflip+translate"}
WHITEN3 = {"whiten_bias_epochs": 3}
TRIANGLE = {"lr_schedule": "triangular"}

RECIPES: dict[str, Recipe] = {
    "base": Recipe("the study's options as given"),
    "retire": Recipe(
        "the diet before CIFAR-10: the easy examples retire at the first growth", diet={"retire_easy": True}
    ),
    "keep": Recipe("the easy examples never retire; loss-aware pruning from the growth", diet=KEEP),
    "growth-only": Recipe("growth alone: no curriculum, no pruning", diet={"pacing": "none", "prune": 0.0}),
    "aug": Recipe("flips and shifts on both arms", both={"augment": "flip+shift"}),
    "smooth": Recipe("label smoothing 0.1 on both arms", both={"label_smoothing": 0.1}),
    "aug+smooth": Recipe(
        "flips, shifts and label smoothing 0.1", both={"augment": "flip+shift", "label_smoothing": 0.1}
    ),
    "rejoin": Recipe("a quarter of the pruned examples rejoin each epoch", diet={"rejoin": 0.25}),
    "no-rewarm": Recipe("no re-warm of the learning rate after growth", dynamic={"growth_rewarm": 0.0}),
    "identity": Recipe("new layers start as identities (function kept)", growth={"growth_init": "preserve"}),
    "noise1": Recipe(
        "identity start with Net2Net noise at a fresh layer's scale",
        growth={"growth_init": "preserve", "growth_noise": 1.0},
    ),
    "noise3": Recipe(
        "the same at three times that scale", growth={"growth_init": "preserve", "growth_noise": 3.0}
    ),
    "ema": Recipe("a weight average (decay 0.999) on both arms", both={"ema_decay": 0.999}),
    "tta": Recipe("each image read with its mirror too (validation, test), both arms", both={"tta": "flip"}),
    "bn-bias64": Recipe(
        "batchnorm shifts at 64 times the rate (airbench's), both arms", both={"bn_bias_lr_scale": 64.0}
    ),
    "airbench": Recipe(
        "airbench93's rates and pieces (lib_airbench93.py, translated to a mean loss), both arms",
        both=AIRBENCH,
    ),
    "airbench-altflip": Recipe("airbench with alternating flips, both arms", both={**AIRBENCH, **ALTFLIP}),
    "airbench-whiten3": Recipe(
        "airbench with the stem's bias trained for 3 epochs only, both arms", both={**AIRBENCH, **WHITEN3}
    ),
    "airbench-triangular": Recipe(
        "airbench with its triangular learning-rate schedule, both arms", both={**AIRBENCH, **TRIANGLE}
    ),
    "airbench94": Recipe(
        "airbench with all three: alternating flips, the stem's bias for 3 epochs, the triangle",
        both={**AIRBENCH, **ALTFLIP, **WHITEN3, **TRIANGLE},
    ),
    "erase": Recipe("random erasing on both arms", both={"augment": "erase"}),
    "wd1e-3": Recipe("weight decay 1e-3 on both arms", both={"weight_decay": 1e-3}),
    "erase+wd1e-3": Recipe("random erasing and weight decay 1e-3 on both arms", both=ERASE_WD),
    "erase+wd2e-3": Recipe(
        "random erasing and weight decay 2e-3 on both arms", both={"augment": "erase", "weight_decay": 2e-3}
    ),
    "growth-lr2": Recipe("grown layers at twice the schedule's rate", dynamic={"growth_lr_scale": 2.0}),
    "erase+wd1e-3+growth-lr0.5": Recipe(
        "the best recipe, grown layers at half the rate", both=ERASE_WD, dynamic={"growth_lr_scale": 0.5}
    ),
    "erase+wd1e-3+mixup": Recipe(
        "the best recipe and mixup 0.2 on both arms", both={**ERASE_WD, "mixup": 0.2}
    ),
    "hold": Recipe(
        "easy-first linear pacing that never uses the hardest third",
        diet={"pacing": "linear", "hold_back": 0.33},
    ),
    "hold-random": Recipe(
        "its random-order control", diet={"pacing": "linear", "order": "random", "hold_back": 0.33}
    ),
}


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ConfigError(f"--recipe {name!r}: use one of {', '.join(RECIPES)}")
    return RECIPES[name]
