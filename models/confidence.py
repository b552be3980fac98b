"""How confident an exit is in its prediction: one registry that adaptive inference
(``SpecNet.adaptive``), calibration and evaluation all read.

Every measure maps logits (B, classes) to a confidence (B,) in [0, 1], higher = surer, so a
threshold means the same thing whatever the measure: 1.0 never leaves, 0.0 always does
(the rule is ``confidence > threshold``).
"""

from __future__ import annotations

import math

import torch

from models.spec import SpecError

DEFAULT = "maxprob"


def max_softmax(logits: torch.Tensor) -> torch.Tensor:
    """The largest class probability (Shallow-Deep Networks, Kaya et al. 2019)."""
    return torch.softmax(logits.float(), dim=-1).amax(-1)


def entropy_confidence(logits: torch.Tensor) -> torch.Tensor:
    """1 - H(p) / log(C): 1 for a one-hot prediction, 0 for a uniform one (BranchyNet, Teerapittayanon
    et al. 2016, exits on entropy). Unlike max softmax it looks at the whole distribution: an
    example torn between two classes scores lower than one torn between many."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)  # (B,), in [0, log C]
    return (1 - entropy / math.log(logits.shape[-1])).clamp(0.0, 1.0)


CONFIDENCES = {"maxprob": max_softmax, "entropy": entropy_confidence}


class ConfidenceError(SpecError):
    """A confidence measure that is not in the registry."""


def check_confidence(name: str, source: str = "--exit-confidence") -> str:
    if name not in CONFIDENCES:
        raise ConfidenceError(f"{source} {name!r} is unknown (known: {', '.join(CONFIDENCES)})")
    return name


def confidence(logits: torch.Tensor, name: str = DEFAULT) -> torch.Tensor:
    """(..., classes) -> (...): the confidence ``name`` gives each prediction."""
    return CONFIDENCES[check_confidence(name)](logits)
