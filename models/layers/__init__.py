"""The layer types: one entry of ``LAYERS`` per type, holding everything the code knows about it.

A spec layer is a dict with an ``id``, a ``type`` and the type's fields. The spec validates it
and infers its output shape (models/spec.py), the builder makes its module and says when a
module can be reused (models/builder.py), a schedule places it and gives it an id
(models/schedule.py), growth makes it an identity or widens it (models/growth.py), and tune
searches its size (pipeline/tune/search_space.py): all by reading the type's entry here. Each
type is a module of this package; a new layer type is a new module, one name in ``LAYERS``
below, and its tests.

Shapes are (C, H, W) for a feature map and (F,) after the first fc, which flattens.
"""

from __future__ import annotations

from models.layers.base import LayerType, Search, SpecError
from models.layers.batchnorm import BATCHNORM
from models.layers.conv import CONV
from models.layers.convbn import CONVBN
from models.layers.convpoolbn import CONVPOOLBN
from models.layers.dropout import DROPOUT
from models.layers.fc import FC, LinearLayer, widen_linear
from models.layers.gap import GAP
from models.layers.pool import POOL
from models.layers.resblock import RESBLOCK
from models.layers.residual import RESIDUAL
from models.layers.scale import SCALE
from models.layers.sepconv import SEPCONV
from models.layers.whiten import WHITEN

__all__ = [
    "GROWABLE_TYPES",
    "LAYERS",
    "LAYER_TYPES",
    "LayerType",
    "LinearLayer",
    "Search",
    "SpecError",
    "widen_linear",
]

# The order is the one error messages and tune's default --layer-types list them in.
LAYERS: dict[str, LayerType] = {
    t.name: t
    for t in (
        CONV,
        POOL,
        DROPOUT,
        FC,
        BATCHNORM,
        RESIDUAL,
        SEPCONV,
        CONVBN,
        RESBLOCK,
        GAP,
        WHITEN,
        SCALE,
        CONVPOOLBN,
    )
}
LAYER_TYPES = tuple(LAYERS)
GROWABLE_TYPES = tuple(name for name, kind in LAYERS.items() if kind.growable)
