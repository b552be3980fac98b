"""Lookahead (Zhang et al., NeurIPS 2019) as airbench runs it (``--lookahead K``).

A slow copy of the weights follows the trained ("fast") ones: every K steps it moves toward them
by 1 - rho and the fast weights are set back to it, and at each epoch's end the fast weights are
set to it once more (as ``lib_airbench93``'s training loop does; the last few steps of an epoch
since a sync are let go), so validation, the logged model and evaluate see the slow weights. rho
warms from 0 to 0.95^K over training (times the cube of training's progress): early the slow
copy follows closely, late it averages strongly. It starts a quarter of the way in (airbench93:
epoch 3 of 11), once the weights have left their random start. Like ``--ema-decay`` it covers
parameters and batchnorm statistics alike; unlike it, training itself is pulled back.

A growing model changes shape, so the slow copy restarts from the grown network at each growth
event (``_EpochLoop.grow``), as the weight average does.
"""

from __future__ import annotations

import torch
from torch import nn

START = 0.27  # share of training before the first sync: airbench93's epoch 3 of 11
BASE_RHO = 0.95  # per step: K steps between syncs keep 0.95^K of the slow copy at the end


class Lookahead:
    """The slow copy of ``model``'s floating-point state (None until training reaches ``START``)
    and the steps counted so far."""

    def __init__(self, model: nn.Module, every: int, steps: int = 0, slow: list[torch.Tensor] | None = None):
        if every < 1:
            raise ValueError(f"every must be a positive number of steps, got {every}")
        self.model, self.every, self.steps, self.slow = model, every, steps, slow

    def _fast(self) -> list[torch.Tensor]:
        # state_dict's tensors share the model's storage: copying into them sets the model
        return [t for t in self.model.state_dict().values() if t.is_floating_point()]

    def rho(self, progress: float) -> float:
        return BASE_RHO**self.every * min(max(progress, 0.0), 1.0) ** 3

    @torch.no_grad()
    def step(self, progress: float) -> None:
        """After each optimizer step, at ``progress`` (0 to 1) of training's schedule."""
        self.steps += 1
        if progress < START or self.steps % self.every:
            return
        fast = self._fast()
        if self.slow is None:
            self.slow = [t.clone() for t in fast]
            return
        torch._foreach_lerp_(self.slow, fast, 1.0 - self.rho(progress))
        torch._foreach_copy_(fast, self.slow)

    @torch.no_grad()
    def sync(self) -> None:
        """At an epoch's end: the fast weights take the slow ones (once it has started)."""
        if self.slow is not None:
            torch._foreach_copy_(self._fast(), self.slow)

    def state_dict(self) -> dict:
        return {"every": self.every, "steps": self.steps, "slow": self.slow}

    @classmethod
    def restore(cls, model: nn.Module, state: dict) -> Lookahead:
        """The slow copy a checkpoint holds, bound to ``model``; refuses one of another shape."""
        lookahead = cls(model, int(state["every"]), int(state["steps"]), state["slow"])
        if lookahead.slow is not None:
            fast = lookahead._fast()
            if [t.shape for t in fast] != [t.shape for t in lookahead.slow]:
                raise RuntimeError("the slow copy's shapes are not the model's")
            lookahead.slow = [s.to(t.device) for s, t in zip(lookahead.slow, fast)]
        return lookahead
