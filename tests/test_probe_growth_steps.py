"""The growth-steps probe finds the growth event by the optimizer's parameter count and stops
the requested number of steps after it, with the jolt summarised against the steps before."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from models.layers.fc import LinearLayer
from scripts.probe_growth_steps import Recorder, StepsDone


def _step(recorder: Recorder, optimizer: torch.optim.Optimizer, norm: float) -> None:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for p in params:  # each tensor's share, so that the global norm is exactly `norm`
        p.grad = torch.full_like(p, norm / (p.numel() * len(params)) ** 0.5)
    recorder.before_step(optimizer, (), {})


def test_the_probe_finds_growth_by_the_parameter_count_and_stops_after_it():
    recorder = Recorder(steps_after=3)
    small = nn.Linear(4, 2)
    for _ in range(4):
        _step(recorder, torch.optim.SGD([small.weight], lr=0.1), 2.0)
    grown = torch.optim.SGD([small.weight, nn.Parameter(torch.zeros(3))], lr=0.1)  # a layer added
    _step(recorder, grown, 5.0)
    _step(recorder, grown, 40.0)
    with pytest.raises(StepsDone):
        _step(recorder, grown, 1.0)
    summary = recorder.summary()
    assert summary["grown_at_step"] == 4
    assert summary["norm_before_median"] == pytest.approx(2.0, rel=1e-5)
    assert summary["norm_after_first10"] == pytest.approx([5.0, 40.0, 1.0], abs=0.01)
    assert summary["norm_after_max"] == pytest.approx(40.0, rel=1e-5)
    assert len(summary["per_tensor_after"]) == 3  # per tensor, for the first steps after growth


def test_the_dead_share_counts_fc_units_zero_for_every_example_not_the_head():
    recorder = Recorder(steps_after=1)
    fc = LinearLayer(3, 4, relu=True).train()
    with torch.no_grad():
        fc.linear.weight.zero_()
        fc.linear.bias.copy_(torch.tensor([-1.0, -1.0, 1.0, 1.0]))  # two units dead
    recorder.forward(fc, (torch.randn(5, 3),), fc(torch.randn(5, 3)))
    assert recorder.dead == 0.5
    head = LinearLayer(4, 10, relu=False).train()
    recorder.forward(head, (torch.randn(5, 4),), -torch.ones(5, 10))
    assert recorder.dead == 0.5  # the head's negative logits are not dead units
