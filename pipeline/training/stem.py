"""The whitening stem's bias trained for the first epochs only (``--whiten-bias-epochs N``),
then frozen: airbench94's ``whiten_bias_train_steps`` (Jordan 2024), 3 epochs there.

The stem's filters are fixed already (``models/layers/whiten.py``). With its bias frozen too,
nothing before the second layer trains, so backpropagation ends at that layer's weights: the
gradient with respect to its input, the network's widest map, is no longer computed. In the
``short-convs`` layout that is the second layer's whole backward-data convolution, a quarter of
a forward pass's FLOPs, saved in every step after the first N epochs. The FLOPs a run counts
follow it (``models/flops.py`` counts a backward pass of the network as it then trains), and so
do a FLOPs budget's plan and a static run's cost known beforehand (``pipeline/run/length.py``);
a seconds budget plans from a timing of the network whose bias trains, and its re-planning
(``pipeline/budget/plan.SecondsPlanner``) measures the cheaper epochs as they come.

Weight averages see the bias as any weight: lookahead's syncs can still move it towards its
slow copy after it freezes, as airbench's do.
"""

from __future__ import annotations

from torch import nn

from models.builder import fitted_to_data
from models.spec import ArchSpec
from pipeline.cli import ConfigError


def refuse_without_stem(spec: ArchSpec, whiten_bias_epochs: int) -> None:
    """``--whiten-bias-epochs`` is about a whitening stem: refused for a network without one."""
    if whiten_bias_epochs and not fitted_to_data(spec):
        raise ConfigError(
            f"--whiten-bias-epochs {whiten_bias_epochs}: network {spec.name!r} has no whitening stem "
            "(a first layer of type whiten) whose bias it could freeze"
        )


def set_stem_bias_trains(model: nn.Module, trains: bool) -> bool:
    """Let the whitening stem's bias train or not; whether that changed anything."""
    if not fitted_to_data(model.spec):
        raise ValueError(f"network {model.spec.name!r} has no whitening stem")
    stem = model.layers[model.spec.layers[0]["id"]]
    if stem.bias.requires_grad == trains:
        return False
    stem.bias.requires_grad_(trains)
    stem.bias.grad = None
    return True


def stem_frozen(epoch: int, whiten_bias_epochs: int) -> bool:
    """Whether the stem's bias stays where it is in ``epoch``."""
    return bool(whiten_bias_epochs) and epoch >= whiten_bias_epochs


def stem_bias_changes(model: nn.Module, epoch: int, whiten_bias_epochs: int) -> bool:
    """Let the stem's bias train in ``epoch`` if it is one of the first ``whiten_bias_epochs``
    (0: every epoch, the model untouched); whether that changed what trains."""
    if not whiten_bias_epochs:
        return False
    return set_stem_bias_trains(model, not stem_frozen(epoch, whiten_bias_epochs))
