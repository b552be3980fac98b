"""What an epoch measures beside training, plugged into ``fit`` as probes: the loop calls each
after validation, outside the seconds that train, and knows nothing of their options.

``ExitProbe``: each early exit's accuracy on its own (a model with exits). ``NoiseProbe``: how
much of the label noise the network has learned (noisy data). ``standard_probes`` gives a run
the ones its data and network call for.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from pipeline.data.dataset import Data, Split
from pipeline.training.config import TrainConfig
from pipeline.training.loop import EvalResult
from pipeline.training.metrics import exit_accuracies, noise_metrics, noise_probe_positions
from pipeline.training.state import FitState


class EpochProbe(Protocol):
    # whether it needs validation's predictions on the whole split every epoch, not a sample
    whole_validation: bool

    def measure(
        self, state: FitState, scored: nn.Module, val: EvalResult, positions: torch.Tensor
    ) -> dict[str, float]:
        """The epoch's measurements: ``scored`` is what validation ran (the weight average where
        there is one), ``val`` its result, ``positions`` the training examples the epoch used."""


class ExitProbe:
    """``val/acc_<exit id>`` of a network with early exits (it may gain them as it grows)."""

    whole_validation = False

    def __init__(self, val: Split, batch_size: int):
        self.val, self.batch_size = val, batch_size

    def measure(self, state: FitState, scored: nn.Module, val: EvalResult, positions: torch.Tensor) -> dict:
        if not state.model.spec.exits:
            return {}
        probed = state.model if state.average is None else state.average.model
        return exit_accuracies(probed, self.val, self.batch_size)


class NoiseProbe:
    """``noise/...``: memorisation of the flipped labels on a fixed sample of training examples."""

    whole_validation = True  # its validation accuracy against the original labels reads every one

    def __init__(self, data: Data, cfg: TrainConfig):
        self.data, self.cfg = data, cfg
        self.sample = noise_probe_positions(data.train)

    def measure(self, state: FitState, scored: nn.Module, val: EvalResult, positions: torch.Tensor) -> dict:
        return noise_metrics(scored, self.data, positions, val, self.sample, self.cfg, state.precision)


def standard_probes(data: Data, cfg: TrainConfig) -> list[EpochProbe]:
    """The probes every run takes: its exits' (if its network has or gains any) and, on noisy
    data, the noise probe. ``data`` is on the run's device."""
    probes: list[EpochProbe] = [ExitProbe(data.val, cfg.eval_batch_size)]
    if data.noisy:
        probes.append(NoiseProbe(data, cfg))
    return probes
