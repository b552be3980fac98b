"""An exponential moving average of a model's weights (``--ema-decay``), updated after every step.

Late in training the weights of one step wander between solutions that trade some examples for
others; their average sits between them and often generalises better. The average covers
parameters and BatchNorm statistics alike (the average of the trained model's running
statistics, as is usual), so the averaged copy is a complete model that validation, the logged
model and evaluate can use.

A growing model changes shape, so its average restarts from the grown network at each growth
event: it then averages the complete network's training only, never weights of another shape.
Training itself never sees the average: growth starts from the last step's weights, so at a
growth event validation falls back to them before the new average moves away.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

# The decay of the first updates is (1 + n) / (10 + n), below the asked-for one until it catches
# up, so that an average started (or restarted at a growth event) from fresh weights does not lean
# on them for the next thousands of steps.
WARMUP_OFFSET = 10


class WeightAverage:
    """An averaged copy of ``model``, kept in eval mode and out of autograd."""

    def __init__(self, model: nn.Module, decay: float, updates: int = 0):
        if not 0 < decay < 1:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.updates = updates
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self._trained = model
        self._bind()

    def _bind(self) -> None:
        """Pair each averaged tensor with the trained model's, by state-dict name. The optimizer
        updates the model's tensors in place, so the pairs stay valid until something moves them
        (``.to()`` to another layout or device replaces them): ``update`` then pairs again."""
        ours, theirs = self.model.state_dict(keep_vars=True), self._trained.state_dict(keep_vars=True)
        if ours.keys() != theirs.keys():
            raise ValueError("the averaged model and the trained one have different layers")
        floats = [name for name, tensor in ours.items() if tensor.is_floating_point()]
        self._float_pairs = ([ours[n].data for n in floats], [theirs[n].data for n in floats])
        self._other_pairs = [(ours[n].data, theirs[n].data) for n in ours if n not in floats]
        # ``.to()`` keeps each Parameter object and swaps its storage (buffers move with them):
        # the parameters' addresses tell, cheaply, whether the pairs are stale.
        self._parameters = list(self._trained.parameters())
        self._addresses = self._trained_addresses()

    def _trained_addresses(self) -> list[int]:
        return [p.data_ptr() for p in self._parameters]

    def current_decay(self) -> float:
        return min(self.decay, (1 + self.updates) / (WARMUP_OFFSET + self.updates))

    @torch.no_grad()
    def update(self) -> None:
        """Move the average towards the trained model's current weights by one step."""
        if self._trained_addresses() != self._addresses:  # the model's tensors were replaced
            self._bind()
        averaged, trained = self._float_pairs
        if averaged:
            torch._foreach_lerp_(averaged, trained, 1.0 - self.current_decay())
        for ours, theirs in self._other_pairs:  # counters (BatchNorm's batches seen): the latest
            ours.copy_(theirs)
        self.updates += 1

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "updates": self.updates, "decay": self.decay}

    @classmethod
    def restore(cls, model: nn.Module, state: dict) -> WeightAverage:
        """The average a checkpoint holds, bound to ``model`` (the trained model it averages)."""
        average = cls(model, float(state["decay"]), int(state["updates"]))
        average.model.load_state_dict(state["model"])
        return average
