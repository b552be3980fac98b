"""The residual family for short runs on small images (3x32x32), as data: wide and shallow,
as ResNet-9 (Page 2018, "How to train your ResNet") and airbench (Jordan 2024) are, where
ResNet-20 (models/resnet.py) is deep and narrow and needs many epochs. A stem convolution, then
three groups, each a convolution that sets the group's width, a 2x2 max-pool that halves the
map and a shape-keeping basic residual block (two convolutions), then global average pooling
and the linear head. Every convolution is followed by batchnorm and ReLU.

``resnet-short`` is the baseline. Its two starts: ``resnet-short-start`` lacks the residual
blocks (about half its FLOPs per example), which the ``resnet-short`` schedule inserts (each an
identity through a zero batchnorm scale, or at random with the re-warm); ``resnet-short-narrow``
has its layout at half its widths (about a quarter of its FLOPs), which ``resnet-short-widen``
widens, every layer that sets a width at once (each group's pool and block keep their input's
width and widen with it). Both grow a quarter of the way in, as ``resnet`` and
``resnet-widen`` do. ``resnet-short-whiten`` is the baseline with airbench's frozen
patch-whitening stem (``models/layers/whiten.py``) in place of its first convolution, a static
network; ``resnet-short-whiten-narrow`` is it at half its groups' widths, which
``resnet-short-whiten-widen`` widens. Layer ids say where a layer sits: ``g2conv``,
``g2pool``, ``g2res`` are group 2's. Pure data: nothing here imports the spec or the
schedule, which register these.
"""

from __future__ import annotations

STEM_WIDTH = 24
WIDTHS = (48, 96, 192)  # the groups'


def _ids(group: int) -> tuple[str, str, str]:
    return f"g{group}conv", f"g{group}pool", f"g{group}res"


def short_layers(
    residual: bool = True, stem: int = STEM_WIDTH, widths: tuple[int, ...] = WIDTHS, whiten: bool = False
) -> list[dict]:
    """stem, each group's convolution, pool and (with ``residual``) residual block, gap. With
    ``whiten`` the stem is airbench's 2x2 patch whitening (``whiten``: 24 channels for RGB, as
    ``stem``'s default, and a 31x31 map) instead of a 3x3 convbn."""
    layers = [
        {"id": "stem", "type": "whiten"} if whiten else {"id": "stem", "type": "convbn", "out_channels": stem}
    ]
    for group, width in enumerate(widths, start=1):
        conv, pool, res = _ids(group)
        layers += [
            {"id": conv, "type": "convbn", "out_channels": width},
            {"id": pool, "type": "pool", "kind": "max", "size": 2},
        ]
        if residual:
            layers.append({"id": res, "type": "residual"})
    layers.append({"id": "gap", "type": "gap"})
    return layers


def narrow_layers(whiten: bool = False) -> list[dict]:
    """The baseline's layout at half its widths: about a quarter of its FLOPs. With ``whiten``
    the whitened baseline's, whose stem keeps its 24 channels (fitted to the images, it has no
    width to choose) and whose groups are at half their widths: 0.30 of its FLOPs, the first
    group's convolution reading the whole stem."""
    return short_layers(stem=STEM_WIDTH // 2, widths=tuple(width // 2 for width in WIDTHS), whiten=whiten)


def growth_steps() -> list[tuple[dict, str]]:
    """(layer, position) of every residual block the start lacks, each after its group's pool."""
    return [
        ({"id": _ids(group)[2], "type": "residual"}, f"after:{_ids(group)[1]}")
        for group in range(1, len(WIDTHS) + 1)
    ]


def widening_steps(whiten: bool = False) -> list[tuple[str, int]]:
    """(layer, width) of every layer that sets a width, widened to the baseline's, stem first
    (with ``whiten``, each group's convolution: the whitening stem keeps its width)."""
    groups = [(_ids(group)[0], width) for group, width in enumerate(WIDTHS, start=1)]
    return groups if whiten else [("stem", STEM_WIDTH), *groups]
