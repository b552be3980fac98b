"""airbench93's layout (Jordan 2024, ``lib_airbench93.py``) for short runs on 3x32x32 images,
as data: the frozen patch-whitening stem (``whiten``), then three groups, each a convolution
that sets the group's width, a 2x2 max-pool and a second convolution (every convolution a
``convbn`` with GELU), then global average pooling and a ``scale`` of 1/9 before the head (the
factor airbench puts on its logits). No residual blocks: airbench's identity start
(``--conv-init dirac``) gives every convolution an implicit one.

``short-convs`` is the baseline (64/128/128 channels, 1.08e8 forward FLOPs an example, 0.84x
``resnet-short``'s); ``short-convs-narrow`` has its groups at half their widths, which the
``short-convs-widen`` schedule widens a quarter of the way in, every convolution at once (the
stem, fitted to the images, keeps its 24 channels). Layer ids say where a layer sits: ``g2a``,
``g2pool``, ``g2b`` are group 2's. Pure data: nothing here imports the spec or the schedule,
which register these.

airbench pools between its first convolution and that convolution's batchnorm; ``convbn``
and a ``pool`` layer pool after the activation. The two differ: the batchnorm's statistics here
come from four times as many positions, and GELU is not monotone (it dips below 0 left of about
-0.75), so the largest of four activations is not always the activation of the largest input.
``short-convs-poolbn`` and its narrow start pool as airbench does (each group's first
convolution a ``convpoolbn``), so the two orders can be compared. ``short-convs-maxhead`` and
its narrow start read the last map by its maximum, as airbench's head does, where the others
average it; the widening schedule grows either start (the head's pool has no weights).
"""

from __future__ import annotations

WIDTHS = (64, 128, 128)  # the groups'
LOGIT_SCALE = 1 / 9
# What reads the last group's 3x3 map: its average (``gap``, the first port's), or its maximum, as
# airbench's MaxPool2d(3) does (a 3x3 max-pool there is a global one). The maximum read 89.02%
# validation at 11 epochs on tuning seed 1000 against the average's 88.04%, airbench's own code
# 89.48% (docs/results/resnet/port-screen/).
HEADS = {
    "avg": {"id": "gap", "type": "gap"},
    "max": {"id": "headpool", "type": "pool", "kind": "max", "size": 3},
}


def _ids(group: int) -> tuple[str, str, str]:
    return f"g{group}a", f"g{group}pool", f"g{group}b"


def layers(widths: tuple[int, ...] = WIDTHS, pool_first: bool = False, head: str = "avg") -> list[dict]:
    """The stem, each group's two convolutions around its pool, the head's pooling (``HEADS``)
    and the scale; with ``pool_first`` each group's first convolution pools before its
    batchnorm, as airbench's does (a ``convpoolbn``, no pool layer of its own)."""
    out: list[dict] = [{"id": "stem", "type": "whiten"}]
    for group, width in enumerate(widths, start=1):
        first, pool, second = _ids(group)
        if pool_first:
            out.append({"id": first, "type": "convpoolbn", "out_channels": width, "activation": "gelu"})
        else:
            out += [
                {"id": first, "type": "convbn", "out_channels": width, "activation": "gelu"},
                {"id": pool, "type": "pool", "kind": "max", "size": 2},
            ]
        out.append({"id": second, "type": "convbn", "out_channels": width, "activation": "gelu"})
    return [*out, dict(HEADS[head]), {"id": "scale", "type": "scale", "factor": LOGIT_SCALE}]


def narrow_layers(pool_first: bool = False, head: str = "avg") -> list[dict]:
    """The baseline at half its groups' widths."""
    return layers(tuple(width // 2 for width in WIDTHS), pool_first, head)


def widening_steps() -> list[tuple[str, int]]:
    """(layer, width) of every convolution, widened to the baseline's, in depth order."""
    return [
        (lid, width)
        for group, width in enumerate(WIDTHS, start=1)
        for lid in (_ids(group)[0], _ids(group)[2])
    ]
