"""The residual family for small images (3x32x32): ResNet for CIFAR (He et al. 2016, section
4.2) as data. A stem convolution, three stages of basic blocks at widths 16, 32 and 64 (each
stage after the first opens with a block that halves the map and doubles the width: a
``resblock`` with stride 2 and a 1x1 projection), global average pooling and the linear head.

``resnet`` has three blocks a stage (ResNet-20's layout); ``resnet-start`` one, about 0.3 of its
FLOPs per example; the ``resnet`` schedule grows the start into the final network by inserting
the missing blocks into each stage (each a shape-keeping ``residual`` block, which can start as
the identity through a zero batchnorm scale, or at random with the re-warm). The other way to
grow it: ``resnet-narrow``, the final network's depth at half its widths (about a quarter of its
FLOPs), which the ``resnet-widen`` schedule widens stage by stage (the layer that sets a stage's
width, and with it the stage's blocks, which keep their input's width). Layer ids say
where a block sits: ``s2b3`` is stage 2's third block. Pure data: nothing here imports the
spec or the schedule, which register these.
"""

from __future__ import annotations

WIDTHS = (16, 32, 64)
NARROW_WIDTHS = tuple(width // 2 for width in WIDTHS)  # the start that growth widens
FINAL_BLOCKS = 3  # a stage's blocks in the final network (ResNet-20: 3 stages x 3 blocks x 2 convs + 2)
START_BLOCKS = 1  # a stage's blocks in the start network


def block_id(stage: int, block: int) -> str:
    return f"s{stage}b{block}"


def resnet_layers(blocks: int, widths: tuple[int, ...] = WIDTHS) -> list[dict]:
    """stem, ``blocks`` blocks per stage (1-based stages; a later stage opens by halving the
    map and widening), gap."""
    layers = [{"id": "stem", "type": "convbn", "out_channels": widths[0]}]
    for stage, width in enumerate(widths, start=1):
        for block in range(1, blocks + 1):
            layer = {"id": block_id(stage, block), "type": "residual"}
            if stage > 1 and block == 1:  # halve the map, widen: (C, H, W) -> (2C, H/2, W/2)
                layer = {**layer, "type": "resblock", "out_channels": width, "stride": 2}
            layers.append(layer)
    layers.append({"id": "gap", "type": "gap"})
    return layers


def growth_steps(start: int = START_BLOCKS, final: int = FINAL_BLOCKS, stages: int = len(WIDTHS)):
    """(layer, position) of every block the start network lacks, stage by stage, each after
    the block before it."""
    return [
        ({"id": block_id(stage, block), "type": "residual"}, f"after:{block_id(stage, block - 1)}")
        for stage in range(1, stages + 1)
        for block in range(start + 1, final + 1)
    ]


def stage_width_layer(stage: int) -> str:
    """The layer that sets a stage's width: the stem for the first, each later stage's first
    block (the residual blocks after it keep their input's width)."""
    return "stem" if stage == 1 else block_id(stage, 1)


def widening_steps(widths: tuple[int, ...] = WIDTHS) -> list[tuple[str, int]]:
    """(layer, width) of every stage widened to its final width, first stage first."""
    return [(stage_width_layer(stage), width) for stage, width in enumerate(widths, start=1)]
