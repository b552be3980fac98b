"""The difficulty scorers, by name; every score reads "higher = harder".

- ``loss``: cross-entropy of the true class under a model that never trained on the example.
- ``el2n``: EL2N (Paul et al. 2021), ``||softmax(f(x)) - onehot(y)||_2``, from the same fold
  models snapshotted after their first epoch ("early in training"). The published EL2N is
  *in-sample* (a network scores the examples it is training on); ours is out-of-fold exactly
  like ``loss``, so it can be compared with ``loss`` and applied to val/test the same way. No
  scorer here is in-sample.
- ``input``: zlib-compressed size of the uint8 pixels, a model-free control: busy images
  compress worse.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from pipeline.cli import ConfigError
from pipeline.device import eval_batch_size

# The EL2N snapshot: after this many epochs of the fold model's own training. Paul et al.
# score at ~10% of a long run; with 2-3 epoch scoring models the first epoch is that point.
EL2N_AFTER_EPOCHS = 1


def loss_score(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(N, C), (N,) -> (N,) cross-entropy of the true class."""
    return nn.functional.cross_entropy(logits.float(), y, reduction="none")


def el2n_score(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(N, C), (N,) -> (N,) L2 norm of the softmax minus the one-hot label."""
    probs = logits.float().softmax(dim=1)
    onehot = nn.functional.one_hot(y, probs.shape[1]).float()
    return (probs - onehot).norm(dim=1)


def input_complexity(images: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) uint8 -> (N,) bytes of each image after zlib level 9 (PNG's compressor)."""
    if images.dtype != torch.uint8:
        raise TypeError(f"input_complexity needs uint8 pixels, got {images.dtype}")
    flat = images.reshape(len(images), -1).numpy()
    return torch.tensor([len(zlib.compress(row.tobytes(), 9)) for row in flat], dtype=torch.float32)


@dataclass(frozen=True)
class ModelScorer:
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    after_epochs: int | None  # snapshot after this many epochs; None: the trained model


MODEL_SCORERS = {
    "loss": ModelScorer(loss_score, None),
    "el2n": ModelScorer(el2n_score, EL2N_AFTER_EPOCHS),
}
INPUT_SCORERS = {"input": input_complexity}
SCORERS = (*MODEL_SCORERS, *INPUT_SCORERS)


def parse_scorers(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    if not names:
        raise ConfigError(f"--scorers {text!r} names no scorer (known: {', '.join(SCORERS)})")
    unknown = [n for n in names if n not in SCORERS]
    if unknown:
        raise ConfigError(f"--scorers: unknown scorer {unknown[0]!r} (known: {', '.join(SCORERS)})")
    if len(set(names)) != len(names):
        raise ConfigError(f"--scorers {text!r} names a scorer twice")
    return names


@torch.no_grad()
def logits_of(model: nn.Module, x: torch.Tensor, batch_size: int = 0) -> torch.Tensor:
    """(N, C, H, W) -> (N, classes) logits in eval mode, on the CPU (``batch_size`` 0: the
    device's)."""
    model.eval()
    batch_size = eval_batch_size(batch_size, x.device)
    out = [model(x[i : i + batch_size]).float().cpu() for i in range(0, len(x), batch_size)]
    return torch.cat(out) if out else torch.empty(0)
