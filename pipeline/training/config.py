"""The training options (learning rate, schedule, precision, budget...) and the optimizer they
build."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

import torch
from torch import nn

from models.tta import TTAS
from pipeline.cli import SEED_MAX, ConfigError, opt, option_name
from pipeline.data.augment import AUGMENTATIONS, both_flips
from pipeline.device import pick_device
from pipeline.precision import PRECISIONS, resolve_precision
from pipeline.training.lr_schedule import LR_SCHEDULES

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
CONV_INITS = ("default", "dirac")


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = opt(12, "training epochs")
    batch_size: int = opt(128, "training batch size")
    # SGD with Nesterov momentum and (by default) a cosine schedule: on these small CNNs it matches Adam's
    # accuracy with one fewer hyperparameter that interacts with growth (Adam's second moments).
    lr: float = opt(0.05, "peak learning rate of the schedule")
    momentum: float = opt(0.9, "SGD momentum (Nesterov)")
    weight_decay: float = opt(5e-4, "L2 weight decay")
    warmup: float = opt(0.03, "fraction of training spent warming the learning rate up")
    lr_schedule: str = opt(
        "cosine",
        "the rate's shape: cosine (linear warm-up from near 0, then a cosine to 0) or triangular "
        "(airbench's: linear from 0.2x the peak to it over the warm-up, then linear to 0.07x)",
    )
    seed: int = opt(0, "seed of weights, data order and dropout")
    device: str = opt("auto", "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    deterministic: bool = opt(False, "deterministic kernels: bit-identical reruns, somewhat slower")
    augment: str = opt(
        "none",
        "batch augmentation: none, or flip (or altflip: airbench's alternating flips, each image "
        "mirrored every other epoch), crop (pad 4 and crop back), translate (airbench's: "
        "reflect-pad 2 and crop back), shift and random erasing joined by +, e.g. flip+crop "
        "(CIFAR's standard), flip+translate, altflip+translate or flip+erase",
    )
    label_smoothing: float = opt(0.0, "label smoothing of the training loss (0: none)")
    mixup: float = opt(
        0.0,
        "mixup's alpha: each batch blends with itself in another order, by lam ~ Beta(alpha, alpha), "
        "and so do the two labels' losses (0: none; 0.2 is a mild setting)",
    )
    ema_decay: float = opt(
        0.0,
        "per-step decay of an exponential moving average of the weights, which validation, the "
        "logged model and evaluate then use instead of the last step's (0: none; it restarts at "
        "each growth event)",
    )
    lookahead: int = opt(
        0,
        "lookahead's steps between syncs (airbench: 5; 0: none): from a quarter of the way in, a "
        "slow copy of the weights moves toward the trained ones every so many steps and they are "
        "set back to it, and to it again at each epoch's end, which validation, the logged model "
        "and evaluate then see (not with --ema-decay; it restarts at each growth event)",
    )
    tta: str = opt(
        "none",
        "test-time augmentation, in validation, evaluate and the logged model alike: none, flip "
        "(each image's logits averaged with its mirror's; two forward passes an image) or flip+shift "
        "(airbench's six views: also shifted a pixel up-left and down-right, with mirrors)",
    )
    growth_rewarm: float = opt(
        0.05,
        "fraction of training over which the learning rate climbs back to the schedule's after "
        "each growth event, so the grown network's first steps are small (0: no re-warm)",
    )
    growth_lr_scale: float = opt(
        1.0,
        "learning-rate multiplier, for the rest of training, of the parameters each growth event "
        "adds or re-initialises: they miss the rate's early, largest part (1: the schedule's rate)",
    )
    bn_bias_lr_scale: float = opt(
        1.0,
        "learning-rate multiplier of every batchnorm's shift (its bias), whose weight decay is "
        "divided by it so each step decays it as much as before (airbench: 64; 1: the schedule's rate)",
    )
    bn_scale_frozen: bool = opt(
        False,
        "keep every batchnorm's scale (its weight) where it starts (airbench's batchnorm has none "
        "to train: with its large rates a trained scale swings); its shift still trains",
    )
    bn_momentum: float = opt(
        0.1,
        "how far each training step moves the batchnorms' running statistics, which validation "
        "and evaluate use (PyTorch's 0.1; airbench's 0.4, so they keep up with fast-changing weights)",
    )
    whiten_bias_epochs: int = opt(
        0,
        "epochs the whitening stem's bias trains, then frozen, so each later step's backward pass "
        "ends at the second layer's weights (airbench94: 3); 0: it trains throughout. Epochs of "
        "the run as it trains, whatever a --budget buys; needs a network whose first layer is a whiten",
    )
    conv_init: str = opt(
        "default",
        "initial weights of every convbn's convolution in a new run: default (PyTorch's) or dirac "
        "(airbench's identity start: as many filters as the layer has inputs each copy one input "
        "channel, an implicit residual; the rest PyTorch's)",
    )
    clip_grad: float = opt(
        0.0,
        "clip the global norm of the gradient of the parameters that train (not --bn-scale-frozen's "
        "scales) to this before each step (0: no clipping); bounds the step a large gradient right "
        "after a growth event takes",
    )
    eval_batch_size: int = opt(
        0, "batch size for evaluation passes (0: 128 on the CPU, where it is fastest; 1024 on a GPU)"
    )
    monitor_share: float = opt(
        0.15,
        "validation examples an epoch reads, as a share of the examples it trained (at least "
        "1,000, a fixed sample); the whole split at the last epoch and around growth; 0: the "
        "whole split every epoch",
    )
    dip_margin: float = opt(
        0.05,
        "validation accuracy falling by more than this from one epoch to the next makes the run's "
        "health 'dipped' (tag health; the drop, its epoch and the event it follows are logged)",
    )
    stop_on_collapse: bool = opt(
        True,
        "end a run whose validation accuracy sits at chance for 2 epochs after having learned "
        "(stop_reason collapsed, health collapsed): its remaining budget would be wasted",
    )
    precision: str = opt(
        "auto",
        "autocast precision: auto (bf16 where this hardware runs it fast, else fp32), fp32, bf16 or "
        "fp16 (CUDA only); weights and optimizer state stay fp32",
    )
    compile: bool = opt(False, "torch.compile the model (recompiled after each growth); see README")
    compile_mode: str = opt(
        "default",
        "torch.compile's mode with --compile true: default, reduce-overhead (CUDA graphs: one "
        "launch per step, for networks whose steps are launch-bound on a GPU) or max-autotune",
    )
    budget: str = opt(
        "",
        "training budget: empty for --epochs, or 24ep, 3.2e14flops, 600s, run:RUN_ID (its FLOPs; "
        "run:RUN_ID:s its seconds), optionally *factor; schedules written for --epochs scale to it",
    )

    def validate(self) -> TrainConfig:
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{option_name(name)} must be positive, got {getattr(self, name)}")
        if not 0 <= self.seed <= SEED_MAX:
            raise ConfigError(f"--seed must be in 0 .. {SEED_MAX}, got {self.seed}")
        if self.eval_batch_size < 0:
            raise ConfigError(f"--eval-batch-size must be positive (0: auto), got {self.eval_batch_size}")
        if not 0 < self.lr < math.inf:
            raise ConfigError(f"--lr must be positive and finite, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"--momentum must be in [0, 1), got {self.momentum}")
        if not 0 <= self.weight_decay < math.inf:  # nan and inf too: they poison every weight
            raise ConfigError(f"--weight-decay must be a finite non-negative number, got {self.weight_decay}")
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"--label-smoothing must be a fraction in [0, 1), got {self.label_smoothing}")
        if not 0 <= self.mixup < math.inf:
            raise ConfigError(f"--mixup must be a non-negative alpha, got {self.mixup}")
        if not 0 <= self.ema_decay < 1:
            raise ConfigError(f"--ema-decay must be a fraction in [0, 1), got {self.ema_decay}")
        if self.lookahead < 0:
            raise ConfigError(f"--lookahead must be a number of steps (0: none), got {self.lookahead}")
        if self.lookahead and self.ema_decay:
            raise ConfigError("--lookahead and --ema-decay are two weight averages: choose one")
        if self.tta not in TTAS:
            raise ConfigError(f"--tta {self.tta!r}: use one of {', '.join(TTAS)}")
        if not 0 <= self.growth_rewarm < 1:
            raise ConfigError(f"--growth-rewarm must be a fraction in [0, 1), got {self.growth_rewarm}")
        if not 0 < self.growth_lr_scale < math.inf:
            raise ConfigError(f"--growth-lr-scale must be positive, got {self.growth_lr_scale}")
        if not 0 < self.bn_bias_lr_scale < math.inf:
            raise ConfigError(f"--bn-bias-lr-scale must be positive, got {self.bn_bias_lr_scale}")
        if not 0 < self.bn_momentum <= 1:
            raise ConfigError(f"--bn-momentum must be a fraction in (0, 1], got {self.bn_momentum}")
        if self.whiten_bias_epochs < 0:
            raise ConfigError(
                f"--whiten-bias-epochs must be a number of epochs (0: it trains throughout), got "
                f"{self.whiten_bias_epochs}"
            )
        if self.conv_init not in CONV_INITS:
            raise ConfigError(f"--conv-init {self.conv_init!r}: use one of {', '.join(CONV_INITS)}")
        if not 0 <= self.clip_grad < math.inf:
            raise ConfigError(f"--clip-grad must be a non-negative norm (0: none), got {self.clip_grad}")
        if not 0 <= self.monitor_share < math.inf:
            raise ConfigError(f"--monitor-share must be a non-negative share, got {self.monitor_share}")
        if not 0 < self.dip_margin < 1:
            raise ConfigError(f"--dip-margin must be a fraction in (0, 1), got {self.dip_margin}")
        if not 0 <= self.warmup < 1:
            raise ConfigError(f"--warmup must be a fraction in [0, 1), got {self.warmup}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"--lr-schedule {self.lr_schedule!r}: use one of {', '.join(LR_SCHEDULES)}")
        if both_flips(self.augment):
            raise ConfigError(f"--augment {self.augment}: flip and altflip are two ways to flip: choose one")
        if self.augment not in AUGMENTATIONS:
            raise ConfigError(f"--augment {self.augment!r}: use one of {', '.join(AUGMENTATIONS)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"--precision {self.precision!r}: use one of {', '.join(PRECISIONS)}")
        if self.compile_mode not in COMPILE_MODES:
            raise ConfigError(f"--compile-mode {self.compile_mode!r}: use one of {', '.join(COMPILE_MODES)}")
        if self.compile_mode != "default" and not self.compile:
            raise ConfigError(f"--compile-mode {self.compile_mode} needs --compile true")
        resolve_precision(self.precision, pick_device(self.device))
        return self

    def resolved_precision(self, device: torch.device) -> str:
        return resolve_precision(self.precision, device)


def make_optimizer(model: nn.Module, cfg: TrainConfig, grown: Collection[str] = ()) -> torch.optim.Optimizer:
    """SGD over ``model``'s parameters, each group in ``model.parameters()`` order, so a
    checkpoint's optimizer state always maps back onto a model rebuilt from the checkpoint's spec.

    With ``--growth-lr-scale`` other than 1, the parameters named in ``grown`` (those growth
    added or re-initialised) form a group of their own (``grown``) whose ``lr_scale`` the training
    loop multiplies the schedule's rate by; with ``--bn-bias-lr-scale`` other than 1 so do the
    batchnorms' shifts, their weight decay divided by it; a shift that growth added gets both.
    With ``--bn-scale-frozen`` the batchnorms' scales form a last group at rate 0 and no decay.
    Otherwise there is one group, as without growth. The groups come in a fixed order, the
    first always present: rebuilt from the same model, options and ``grown``, they match."""
    scaled = set(grown) if cfg.growth_lr_scale != 1 else set()
    shifts = batchnorm_shifts(model) if cfg.bn_bias_lr_scale != 1 else set()
    frozen = batchnorm_scales(model) if cfg.bn_scale_frozen else set()
    members: dict[tuple[bool, bool], list[nn.Parameter]] = {key: [] for key in GROUP_ORDER}
    for name, param in model.named_parameters():
        if name not in frozen:
            members[(name in scaled, name in shifts)].append(param)
    groups = []
    for is_grown, is_shift in GROUP_ORDER:
        params = members[(is_grown, is_shift)]
        if not params and (is_grown or is_shift):
            continue
        group: dict = {"params": params}
        scale = (cfg.growth_lr_scale if is_grown else 1.0) * (cfg.bn_bias_lr_scale if is_shift else 1.0)
        if is_grown:
            group["grown"] = True
        if scale != 1:
            group["lr_scale"] = scale
        if is_shift:
            group["weight_decay"] = cfg.weight_decay / cfg.bn_bias_lr_scale
        groups.append(group)
    if frozen:
        params = [param for name, param in model.named_parameters() if name in frozen]
        groups.append({"params": params, "lr_scale": 0.0, "weight_decay": 0.0, "frozen": True})
    return torch.optim.SGD(
        groups,
        lr=cfg.lr,
        momentum=cfg.momentum,
        weight_decay=cfg.weight_decay,
        nesterov=cfg.momentum > 0,
    )


# (grown, a batchnorm's shift): the plain group first, then growth's, as before the shifts had
# their own; a checkpoint's optimizer state lists its groups in this order
# What training did before these options existed, where their default does not keep it: a
# record written before one of them (a tune study's or a study's definition) trained with this.
RAN_BEFORE_OPTION = {"precision": "fp32", "monitor_share": 0.0}


def before_options() -> TrainConfig:
    """The defaults as a record written before an option existed trained with them."""
    return TrainConfig(**RAN_BEFORE_OPTION)


GROUP_ORDER = ((False, False), (True, False), (False, True), (True, True))


def batchnorm_shifts(model: nn.Module) -> set[str]:
    """The parameter names of every batchnorm's shift (bias) in ``model``, exits' included."""
    return _batchnorm_parameters(model, "bias")


def batchnorm_scales(model: nn.Module) -> set[str]:
    """The parameter names of every batchnorm's scale (weight) in ``model``, exits' included."""
    return _batchnorm_parameters(model, "weight")


def _batchnorm_parameters(model: nn.Module, kind: str) -> set[str]:
    """The names of every batchnorm's ``kind`` ("weight" or "bias") parameter in ``model``."""
    return {
        f"{name}.{kind}" if name else kind
        for name, module in model.named_modules()
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and getattr(module, kind) is not None
    }


def set_batchnorm_momentum(model: nn.Module, momentum: float) -> None:
    """Every batchnorm of ``model`` (growth's new ones too) moves its running statistics by
    ``momentum`` a step."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.momentum = momentum


def grown_parameters(optimizer: torch.optim.Optimizer, model: nn.Module) -> list[str]:
    """The names of ``model``'s parameters in ``optimizer``'s grown groups (what growth added),
    which a checkpoint records so a resumed run rebuilds the same groups."""
    scaled = {id(p) for g in optimizer.param_groups if g.get("grown") for p in g["params"]}
    return [name for name, p in model.named_parameters() if id(p) in scaled]


def rebuild_optimizer(
    old: torch.optim.Optimizer, model: nn.Module, cfg: TrainConfig
) -> torch.optim.Optimizer:
    """A fresh optimizer over ``model``'s current parameters that keeps the state (momentum
    buffers) of every parameter the old one already had; new parameters start with none and,
    with ``--growth-lr-scale``, join the scaled group (as do those an earlier growth added)."""
    known = {id(p) for g in old.param_groups for p in g["params"]}
    grown = set(grown_parameters(old, model))
    grown.update(name for name, p in model.named_parameters() if id(p) not in known)
    new = make_optimizer(model, cfg, grown)
    for param in model.parameters():
        if param in old.state:
            new.state[param] = old.state[param]
    return new
