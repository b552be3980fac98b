"""What a layer type is (``LayerType``), and the checks and weight copies several types share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from models.errors import UserError

Shape = tuple[int, ...]


class SpecError(UserError):
    """A spec that cannot be built; the message names the layer and the reason."""


@dataclass(frozen=True)
class Search:
    """How tune searches a type's size: the trial parameter ``growth<k>_<param>`` sets ``field``,
    from ``choices`` (categorical) or, where ``span`` is given, uniformly from it (3 decimals)."""

    field: str
    param: str
    choices: tuple = ()
    span: tuple[float, float] | None = None


@dataclass(frozen=True)
class LayerType:
    """One layer type. The functions take the layer (a normalised spec dict) and its input shape."""

    name: str
    fields: dict[str, Any]  # field -> default; None: required. Positional order of compact schedules
    output_shape: Callable[[dict, Shape], Shape]  # validates the fields; raises SpecError
    build: Callable[[dict, Shape], nn.Module]
    params: Callable[[dict, Shape], int]  # parameter count from shapes alone (nothing allocated)
    # Floats kept per output element for the backward pass: an estimate within a small factor,
    # enough to refuse a network that cannot fit long before allocating it.
    activations: int
    reads: Callable[[Shape], tuple]  # what of the input fixes the parameter shapes
    # Make a freshly built module an identity in eval mode (given whether its input is >= 0);
    # False where it cannot be. Outputs beyond the input's keep their random init.
    identity: Callable[[nn.Module, dict, Shape, bool], bool]
    # Fill a new module from the old one when its input gained trailing channels (features):
    # the old ones pass through unchanged and nothing reads the new ones. False: not possible.
    widen: Callable[[nn.Module, nn.Module, Shape, Shape], bool]
    id_prefix: str  # generated ids: <prefix>1, <prefix>2, ...
    feature_map: bool  # growth's default place: with the feature-map layers (else before the head)
    # output always >= 0 (True), maybe negative (False), its input's sign (None); or a function
    # of the layer giving one of those, where a field decides it (convbn's activation)
    nonneg: bool | Callable[[dict], bool | None] | None
    search: Search | None = None  # None: tune has nothing to choose but the type
    searched: bool = True  # in tune's default --layer-types
    # Fit a layer that growth just inserted to a batch of its input (B, ...), e.g. a batchnorm's
    # statistics; None: nothing to fit. Called by ``models.growth.calibrate``.
    calibrate: Callable[[nn.Module, Any], None] | None = None
    # Whether a growth event may insert it; False for a network's head (gap), which a network
    # has once, from its start.
    growable: bool = True
    # Set a new network's layer from a batch of the input the training images give it (B, ...),
    # before the first step: a whitening stem's filters; None: nothing to fit. Called by
    # ``models.builder.fit_to_data``.
    fit: Callable[[nn.Module, Any], None] | None = None


# Pieces several types share.


def positive_int(layer: dict, name: str) -> int:
    value = layer[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(f"layer {layer['id']!r}: {name} must be a positive integer, got {value!r}")
    return value


def needs_map(layer: dict, in_shape: Shape) -> None:
    if len(in_shape) != 3:
        raise SpecError(f"layer {layer['id']!r}: {layer['type']} cannot follow a fully connected layer")


def odd_kernel(layer: dict) -> int:
    k = positive_int(layer, "kernel_size")
    if k % 2 == 0:
        raise SpecError(f"layer {layer['id']!r}: kernel_size must be odd to keep the map size, got {k}")
    return k


def reads_channels(in_shape: Shape) -> tuple:
    # convolutions and batchnorm depend on the channel count, not the map size, so a pool
    # inserted upstream leaves them reusable
    return (in_shape[0], len(in_shape))


def reads_nothing(in_shape: Shape) -> tuple:
    return ()


def no_params(layer: dict, in_shape: Shape) -> int:
    return 0


def always(*args) -> bool:
    return True


def kept_channels(old_in: Shape, new_in: Shape) -> int | None:
    """The old channel count when ``new_in`` is ``old_in`` plus trailing channels; else None."""
    if len(old_in) != len(new_in) or old_in[1:] != new_in[1:] or new_in[0] < old_in[0]:
        return None
    return old_in[0]


def copy_batchnorm(old: nn.Module, new: nn.Module, channels: int) -> None:
    for name in ("weight", "bias", "running_mean", "running_var"):
        getattr(new, name)[:channels] = getattr(old, name)
    new.num_batches_tracked.copy_(old.num_batches_tracked)
