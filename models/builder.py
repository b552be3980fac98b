"""Build an ``nn.Module`` from an ``ArchSpec``.

Each layer of the spec becomes one entry of ``SpecNet.layers`` (a ModuleDict keyed by layer id),
so parameter names are ``layers.<id>.<param>`` whatever order the layers were added in.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.confidence import DEFAULT as DEFAULT_CONFIDENCE
from models.confidence import confidence
from models.layers import LAYERS, LinearLayer
from models.spec import HEAD_ID, ArchSpec, check_size, exit_shapes, infer_shapes


def make_layer(layer: dict, in_shape: tuple[int, ...]) -> nn.Module:
    """One layer's module for an input of ``in_shape`` ((C, H, W) or (F,))."""
    if layer["type"] not in LAYERS:
        raise ValueError(f"unknown layer type {layer['type']!r}")
    return LAYERS[layer["type"]].build(layer, in_shape)


def make_head(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return LinearLayer(math.prod(in_shape), num_classes, relu=False)


def layer_signature(layer: dict, in_shape: tuple[int, ...]) -> tuple:
    """What fixes a layer's parameter shapes; a module can be reused when this is unchanged.
    ``layer`` None is the head, a linear layer like fc."""
    reads = LAYERS[layer["type"] if layer is not None else "fc"].reads(in_shape)
    return (tuple(sorted((layer or {}).items())), reads)


def make_exit(entry: dict, in_shapes: list[tuple[int, ...]], num_classes: int) -> nn.ModuleDict:
    """An exit's classifier path: its layers by id, then ``head`` (``in_shapes`` from ``exit_shapes``)."""
    path = nn.ModuleDict({layer["id"]: make_layer(layer, s) for layer, s in zip(entry["layers"], in_shapes)})
    path[HEAD_ID] = make_head(in_shapes[-1], num_classes)
    return path


class SpecNet(nn.Module):
    """A network built from a spec; ``spec`` travels with it for saving and growth.

    ``exit_thresholds``: per early exit, the confidence above which an example leaves there in
    ``adaptive``; ``exit_confidence``: the measure (``models.confidence``: maxprob or entropy).
    Both set by calibration and saved with the weights (models/io.py).
    """

    def __init__(
        self,
        spec: ArchSpec,
        modules: dict[str, nn.Module] | None = None,
        exit_modules: dict[str, nn.Module] | None = None,
    ):
        """Build every layer afresh, or take existing ``modules`` (and ``exit_modules``) by id
        (growth reuses them); an exit missing from ``exit_modules`` is built afresh."""
        super().__init__()
        shapes = infer_shapes(spec)
        if not modules:  # refuse before allocating: a 10^9-channel layer would take the machine
            check_size(spec)
        self.spec = spec
        self.layers = nn.ModuleDict()
        for layer, in_shape in zip(spec.layers, shapes):
            lid = layer["id"]
            self.layers[lid] = modules[lid] if modules else make_layer(layer, in_shape)
        self.layers[HEAD_ID] = modules[HEAD_ID] if modules else make_head(shapes[-1], spec.num_classes)
        self.exits = nn.ModuleDict()
        for entry, in_shapes in zip(spec.exits, exit_shapes(spec, shapes)):
            given = (exit_modules or {}).get(entry["id"])
            self.exits[entry["id"]] = (
                given if given is not None else make_exit(entry, in_shapes, spec.num_classes)
            )
        self._exit_at = {entry["after"]: entry["id"] for entry in spec.exits}
        self._exit_index = {entry["after"]: k for k, entry in enumerate(spec.exits)}
        self.exit_thresholds: tuple[float, ...] | None = None
        self.exit_confidence: str = DEFAULT_CONFIDENCE

    def forward(self, x: torch.Tensor, exits: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """(B, C, H, W) -> (B, num_classes); with ``exits``, every exit's logits in depth order,
        the head's last (deep supervision trains on them all)."""
        outputs = []
        for lid, module in self.layers.items():
            x = module(x)
            if exits and lid in self._exit_at:
                outputs.append(self._run_exit(self._exit_at[lid], x))
        return [*outputs, x] if exits else x

    def _run_exit(self, exit_id: str, x: torch.Tensor) -> torch.Tensor:
        for module in self.exits[exit_id].values():
            x = module(x)
        return x

    @torch.no_grad()
    def adaptive(
        self, x: torch.Tensor, thresholds: tuple[float, ...] | list[float] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Input-adaptive inference: each example stops at the first exit whose confidence
        (``exit_confidence``) is above its threshold (1.0: never leaves there, 0.0: always);
        only the examples still running go deeper. Returns the logits (B, num_classes) and the
        exit each example took (B,): its index among the exits, ``len(spec.exits)`` for the
        head. Thresholds default to ``exit_thresholds``; without them every example runs to
        the head."""
        thresholds = thresholds if thresholds is not None else self.exit_thresholds
        if thresholds is not None and len(thresholds) != len(self.spec.exits):
            raise ValueError(f"{len(thresholds)} threshold(s) for {len(self.spec.exits)} exit(s)")
        if thresholds is None:
            return self(x).float(), torch.full((x.shape[0],), len(self.spec.exits), device=x.device)
        if x.shape[0] == 1:
            return self._adaptive_one(x, thresholds)
        n = x.shape[0]
        logits = x.new_empty(n, self.spec.num_classes, dtype=torch.float32)
        taken = torch.full((n,), len(self.spec.exits), dtype=torch.long, device=x.device)
        running = torch.arange(n, device=x.device)  # (R,) positions of the examples still running
        for lid, module in self.layers.items():
            x = module(x)
            if lid == HEAD_ID:
                logits[running] = x.float()
            elif lid in self._exit_index:
                k = self._exit_index[lid]
                out = self._run_exit(self._exit_at[lid], x).float()  # (R, num_classes)
                leave = confidence(out, self.exit_confidence) > thresholds[k]  # (R,)
                if not bool(leave.any()):
                    continue
                logits[running[leave]] = out[leave]
                taken[running[leave]] = k
                if bool(leave.all()):
                    return logits, taken
                x, running = x[~leave], running[~leave]
        return logits, taken

    def _adaptive_one(self, x: torch.Tensor, thresholds) -> tuple[torch.Tensor, torch.Tensor]:
        """``adaptive`` for one example, the same rule without the bookkeeping of a batch split,
        whose few tensor operations would cost as much as an exit's path at batch 1."""
        for lid, module in self.layers.items():
            x = module(x)
            k = self._exit_index.get(lid)
            if k is not None:
                out = self._run_exit(self._exit_at[lid], x).float()  # (1, num_classes)
                if float(confidence(out, self.exit_confidence)[0]) > thresholds[k]:
                    return out, torch.tensor([k], device=x.device)
        return x.float(), torch.tensor([len(self.spec.exits)], device=x.device)


def build_model(spec: ArchSpec) -> SpecNet:
    return SpecNet(spec)


# Training images a layer fitted to data sees: airbench fits its whitening on 5,000, plenty for
# the (C k^2)^2 patch covariance (a 12 x 12 one for RGB and 2 x 2 patches).
FIT_IMAGES = 5000


def fitted_to_data(spec: ArchSpec) -> bool:
    """Whether the network's first layer is set from the training images before its first step
    (``LayerType.fit``: a whitening stem; the spec allows such a layer only first)."""
    return bool(spec.layers) and LAYERS[spec.layers[0]["type"]].fit is not None


@torch.no_grad()
def fit_to_data(model: SpecNet, images: torch.Tensor) -> None:
    """Set the network's first layer, fitted to data, from ``images`` (B, C, H, W: training
    images, on the model's device); nothing else changes."""
    if not fitted_to_data(model.spec):
        raise ValueError(f"the first layer of {model.spec.name!r} is not fitted to data")
    if images.shape[0] == 0:
        raise ValueError("no training images to fit the first layer to")
    first = model.spec.layers[0]
    LAYERS[first["type"]].fit(model.layers[first["id"]], images.float())


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
