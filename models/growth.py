"""The growth engine: grow a model by one event of a schedule (models/schedule.py), keep a
stage's head as an exit, measure the jump, and say when a plateau should bring growth forward.

``grow`` keeps every module whose ``layer_signature`` is unchanged (the same parameter objects,
so optimizer state stays attached). With ``init="preserve"`` the new layer starts as an identity
where it can (Net2Net, Chen et al. 2016; AutoGrow, Wen et al. 2020), so the grown network
computes the same function in eval mode and the loss does not jump; with ``init="random"`` (the
runs' default, ``DEFAULT_GROWTH_INIT``) it starts as a fresh layer would. A widening keeps
every trained weight in the wider layers (``embed``); what is new (the added channels, and the
weights that read them) starts at random, except that with ``preserve`` the old channels read
the new ones with zeros, so the function is kept.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.builder import SpecNet, count_parameters, layer_signature, make_exit, make_head, make_layer
from models.layers import LAYERS, widen_linear
from models.schedule import GrowthError, GrowthEvent, final_spec, insert_event
from models.spec import HEAD_ID, ArchSpec, exit_shapes, infer_shapes

GROWTH_INITS = ("preserve", "random")
# What a growing run's new layers start as, unless told: random, the way a fresh layer starts.
# The identity start kept the grown network in the small one's basin: on CIFAR-10 it ended 3.4
# points below the random start (seeds 710-714) and below static at equal FLOPs, most of it on
# the hardest examples; on Fashion-MNIST the two tie (docs/results/cifar10/README.md). The
# re-warm after growth (--growth-rewarm) is what makes a random start safe.
DEFAULT_GROWTH_INIT = "random"


def output_nonnegative(spec: ArchSpec) -> list[bool]:
    """Whether each layer's output is known to be >= 0, which is what lets a ReLU layer be an
    identity (``LayerType.nonneg``); the (normalised) input may be negative."""
    nonneg, out = False, []
    for layer in spec.layers:
        sign = LAYERS[layer["type"]].nonneg
        sign = sign(layer) if callable(sign) else sign
        nonneg = nonneg if sign is None else sign
        out.append(nonneg)
    return out


# --- growing a model ---------------------------------------------------------------------


def _assemble(
    spec: ArchSpec, modules: dict[str, nn.Module], exit_modules: dict[str, nn.Module] | None = None
) -> SpecNet:
    """A SpecNet over existing modules, without building (and randomly initialising) new ones.

    Mirrors ``SpecNet.__init__``: a spec and a ``layers`` ModuleDict in spec order, head last.
    """
    return SpecNet(spec, modules, exit_modules)


def grow(
    model: SpecNet, event: GrowthEvent, init: str = "preserve", noise: float = 0.0
) -> tuple[SpecNet, dict]:
    """Insert the event's layer (or widen it, for a ``widen`` event: see ``_widen``); returns
    the grown model and a JSON-serialisable report.

    Every layer whose signature (type, fields, input shape) is unchanged keeps its module object,
    so its parameters, and the optimizer state attached to them, carry over. New and changed
    layers are new modules on the model's device and dtype.

    ``init="preserve"`` makes the new layer an identity in eval mode where the network allows it
    (see ``LayerType.identity``); extra channels or features start random and the layer that reads
    them gets zero weights for them, so the function is kept while they can learn. A layer
    whose input changed in any other way (a pool shrank the map, a layer narrowed it, an input
    that may be negative meets a ReLU) is re-initialised and ``preserved`` is False.
    ``init="random"``: the new and every changed layer get PyTorch's default initialisation.

    ``noise`` (with ``preserve``): the weights the identity overwrote get ``noise`` times their
    fresh random initialisation added back (Net2Net's noise, Chen et al. 2016), so the new layer
    starts near the identity instead of on it and its channels differ from the start; the
    function is then kept only approximately (the probe jump says by how much).
    """
    if init not in GROWTH_INITS:
        raise GrowthError(f"growth init {init!r}: use one of {', '.join(GROWTH_INITS)}")
    old_spec = model.spec
    spec, index = insert_event(old_spec, event)
    layer = spec.layers[index]
    old_layers = {lay["id"]: lay for lay in old_spec.layers}
    old_in = dict(zip([*old_spec.layer_ids(), HEAD_ID], infer_shapes(old_spec)))
    new_in = infer_shapes(spec)
    reference = next(model.parameters())

    if event.widens:
        return _widen(model, event, spec, index, init)
    new_module = _fresh(spec, layer, new_in[index], reference)
    if init == "preserve":
        nonneg_in = index > 0 and output_nonnegative(spec)[index - 1]
        drawn = _weight_tensors(new_module)
        preserved = LAYERS[layer["type"]].identity(new_module, layer, new_in[index], nonneg_in)
        if preserved and noise > 0:
            _add_noise(new_module, drawn, noise)
    else:
        preserved = layer["type"] == "dropout"  # the identity in eval mode whatever its init
    modules, reinitialised, widened = {layer["id"]: new_module}, [], []
    for i, (lay, in_shape) in enumerate(zip([*spec.layers, None], new_in)):
        if i == index:
            continue
        lid = lay["id"] if lay is not None else HEAD_ID
        if lay is None:
            unchanged = layer_signature(None, old_in[HEAD_ID]) == layer_signature(None, in_shape)
        else:
            unchanged = layer_signature(old_layers[lid], old_in[lid]) == layer_signature(lay, in_shape)
        if unchanged:
            modules[lid] = model.layers[lid]
            continue
        modules[lid] = _fresh(spec, lay, in_shape, reference)
        widen = LAYERS[lay["type"]].widen if lay is not None else widen_linear
        # Only a preserving new layer changes shapes by pure widening; after anything else, or
        # once the chain is broken, the old weights would read different features.
        if init == "preserve" and preserved and widen(model.layers[lid], modules[lid], old_in[lid], in_shape):
            widened.append(lid)
        else:
            reinitialised.append(lid)
            preserved = False
    exit_modules = _exits_for(model, spec, reference, reinitialised)
    grown = _assemble(spec, modules, exit_modules)
    grown.train(model.training)
    info = {
        "event": event.to_dict(),
        "epoch": event.epoch,
        "kind": "insert",
        "layer_id": layer["id"],
        "layer": dict(layer),
        "index": index,
        "init": init,
        "noise": noise,
        "preserved": bool(preserved),
        "params_before": count_parameters(model),
        "params_after": count_parameters(grown),
        "reinitialised": reinitialised,
        "widened": widened,
    }
    return grown, info


def _fresh(spec: ArchSpec, lay: dict | None, in_shape: tuple[int, ...], reference: torch.Tensor) -> nn.Module:
    """A newly built layer (the head where ``lay`` is None) on the model's device and dtype."""
    module = make_layer(lay, in_shape) if lay is not None else make_head(in_shape, spec.num_classes)
    return module.to(device=reference.device, dtype=reference.dtype)


def _exits_for(
    model: SpecNet, spec: ArchSpec, reference: torch.Tensor, reinitialised: list[str]
) -> dict[str, nn.Module]:
    """The grown network's exits: one whose input keeps its shape keeps its modules; one whose
    map changed starts afresh (and is listed in ``reinitialised``)."""
    exit_modules = {}
    old_exit_in = dict(zip(model.spec.exit_ids(), exit_shapes(model.spec)))
    for entry, in_shapes in zip(spec.exits, exit_shapes(spec)):
        if old_exit_in[entry["id"]][0] == in_shapes[0]:
            exit_modules[entry["id"]] = model.exits[entry["id"]]
        else:
            fresh_exit = make_exit(entry, in_shapes, spec.num_classes)
            exit_modules[entry["id"]] = fresh_exit.to(device=reference.device, dtype=reference.dtype)
            reinitialised.append(f"exits.{entry['id']}")
    return exit_modules


def _widen(model: SpecNet, event: GrowthEvent, spec: ArchSpec, index: int, init: str) -> tuple[SpecNet, dict]:
    """``grow`` for a widening: the widened layer and every layer whose input or output widened
    with it get wider modules holding the old weights (``embed``); the others are kept."""
    old_in = dict(zip([*model.spec.layer_ids(), HEAD_ID], infer_shapes(model.spec)))
    old_layers = {lay["id"]: lay for lay in model.spec.layers}
    reference = next(model.parameters())
    modules, widened, reinitialised = {}, [], []
    preserved = init == "preserve"
    for lay, in_shape in zip([*spec.layers, None], infer_shapes(spec)):
        lid = lay["id"] if lay is not None else HEAD_ID
        if layer_signature(old_layers.get(lid), old_in[lid]) == layer_signature(lay, in_shape):
            modules[lid] = model.layers[lid]
            continue
        modules[lid] = _fresh(spec, lay, in_shape, reference)
        if embed(model.layers[lid], modules[lid], zero_new_inputs=preserved):
            widened.append(lid)
        else:  # a block that gains a projection where it had none: nothing to keep its function
            reinitialised.append(lid)
            preserved = False
    exit_modules = _exits_for(model, spec, reference, reinitialised)
    grown = _assemble(spec, modules, exit_modules)
    grown.train(model.training)
    layer = spec.layers[index]
    return grown, {
        "event": event.to_dict(),
        "epoch": event.epoch,
        "kind": "widen",
        "layer_id": layer["id"],
        "layer": dict(layer),
        "index": index,
        "init": init,
        "noise": 0.0,
        "preserved": preserved,
        "params_before": count_parameters(model),
        "params_after": count_parameters(grown),
        "reinitialised": reinitialised,
        "widened": widened,
    }


@torch.no_grad()
def embed(old: nn.Module, new: nn.Module, zero_new_inputs: bool) -> bool:
    """Copy every parameter and buffer of ``old`` into the leading slice of ``new``'s, which is
    as large or larger along each axis (channels and features gained at the end); the rest of
    ``new`` keeps its fresh init. ``zero_new_inputs``: the old outputs read the gained inputs
    with zero weights (``weight[:out_old, in_old:] = 0``), so in eval mode the old channels
    compute what they did. False, and ``new`` untouched, where the two do not nest (a tensor
    only one of them has, or one that shrank)."""
    old_state, new_state = old.state_dict(), new.state_dict()
    nests = old_state.keys() == new_state.keys() and all(
        o.dim() == n.dim() and all(a <= b for a, b in zip(o.shape, n.shape))
        for o, n in ((old_state[k], new_state[k]) for k in old_state)
    )
    if not nests:
        return False
    for name, target in new_state.items():  # state_dict tensors share the modules' storage
        source = old_state[name]
        if zero_new_inputs and source.dim() > 1:
            target[: source.shape[0], source.shape[1] :] = 0
        target[tuple(slice(0, size) for size in source.shape)] = source
    return True


def _weight_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Copies of a fresh module's weight matrices and kernels (not biases or norm scales, whose
    identity values are their meaning: a zero bias, a zero residual gamma)."""
    return {name: p.detach().clone() for name, p in module.named_parameters() if p.dim() > 1}


@torch.no_grad()
def _add_noise(module: nn.Module, drawn: dict[str, torch.Tensor], scale: float) -> None:
    for name, param in module.named_parameters():
        if name in drawn:
            overwritten = param != drawn[name]
            param.add_(scale * drawn[name] * overwritten)


# --- a stage's head becomes an exit --------------------------------------------------------


def stage_exit(spec: ArchSpec, grown: ArchSpec) -> dict | None:
    """The exit that keeps ``spec``'s classifier when the network grows into ``grown``: it reads
    the last layer the two share before the first insertion, and its layers are the rest of
    ``spec`` (what computed the stage's prediction from there). None where nothing can be
    carried: growth before the first layer, growth only after the last (the head still reads
    the same layer), or an exit already at that point."""
    old_ids, new_ids = spec.layer_ids(), grown.layer_ids()
    common = 0
    while common < min(len(old_ids), len(new_ids)) and spec.layers[common] == grown.layers[common]:
        common += 1
    if common == 0 or common >= len(old_ids):
        return None
    after = old_ids[common - 1]
    if any(entry["after"] == after for entry in spec.exits):
        return None
    numbers = [int(m[1]) for eid in spec.exit_ids() if (m := re.fullmatch(r"exit(\d+)", eid))]
    return {
        "id": f"exit{max(numbers, default=0) + 1}",
        "after": after,
        "layers": [dict(layer) for layer in spec.layers[common:]],
    }


def _with_exit(spec: ArchSpec, entry: dict) -> ArchSpec:
    ids = spec.layer_ids()
    exits = sorted([*spec.exits, entry], key=lambda e: ids.index(e["after"]))
    return spec.with_exits(exits)


def stage_exits(start: ArchSpec, events: Sequence[GrowthEvent]) -> ArchSpec:
    """``start`` grown by ``events`` with each stage's head kept as an exit (``carry_stage_head``
    at every epoch that grows): the final spec of a run with ``--exits stages``."""
    spec = start
    for epoch in sorted({event.epoch for event in events}):
        grown = final_spec(spec, [event for event in events if event.epoch == epoch])
        entry = stage_exit(spec, grown)
        spec = _with_exit(grown, entry) if entry is not None else grown
    return spec


def carry_stage_head(model: SpecNet, grown: ArchSpec) -> tuple[SpecNet, dict | None]:
    """``model`` with its classifier path (the layers past the last one ``grown`` keeps in place,
    and the head) copied into a new exit, before the network grows into ``grown``: the stage's
    trained head becomes its exit instead of being discarded, and computes what the stage did.
    The copies are new parameters; the head itself goes on as the final head."""
    entry = stage_exit(model.spec, grown)
    if entry is None:
        return model, None
    path = nn.ModuleDict({layer["id"]: copy.deepcopy(model.layers[layer["id"]]) for layer in entry["layers"]})
    path[HEAD_ID] = copy.deepcopy(model.layers[HEAD_ID])
    exit_modules = {**dict(model.exits.items()), entry["id"]: path}
    carried = SpecNet(_with_exit(model.spec, entry), dict(model.layers.items()), exit_modules)
    carried.train(model.training)
    return carried, entry


@torch.no_grad()
def probe_jump(
    model_before: nn.Module,
    model_after: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
) -> dict[str, float]:
    """Loss and accuracy of both models on one fixed batch, in eval mode: the jump a growth event
    causes. ``x`` (B, C, H, W) and ``y`` (B,) must be on the models' device. Call it right after
    ``grow``, while the old model's unshared modules are still as they were."""
    out = {}
    for tag, model in (("before", model_before), ("after", model_after)):
        was_training = model.training
        model.eval()
        try:
            logits = model(x)  # (B, num_classes)
        finally:
            model.train(was_training)
        out[f"loss_{tag}"] = float(F.cross_entropy(logits.float(), y))
        out[f"acc_{tag}"] = float((logits.argmax(1) == y).float().mean())
    return out


@torch.no_grad()
def calibrate(model: SpecNet, layer_id: str, x: torch.Tensor) -> bool:
    """Fit the just-inserted layer ``layer_id`` to the input it gets from the training batch ``x``
    (B, C, H, W) on the model's device, where its type says how (``LayerType.calibrate``: a
    convbn's batchnorm statistics); returns whether anything was fitted. The rest of the model
    runs in eval mode and is not changed."""
    kind = LAYERS[next(lay["type"] for lay in model.spec.layers if lay["id"] == layer_id)]
    if kind.calibrate is None:
        return False
    module, seen = model.layers[layer_id], []
    hook = module.register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
    was_training = model.training
    model.eval()
    try:
        model(x)
    finally:
        hook.remove()
        model.train(was_training)
    kind.calibrate(module, seen[0].float())
    return True


# --- growth on a plateau -----------------------------------------------------------------


@dataclass
class PlateauTrigger:
    """Says when to grow early: validation accuracy has not improved by more than ``min_delta``
    for ``patience`` epochs. After firing it starts afresh, so a grown model gets ``patience``
    epochs of its own before the next trigger. State is JSON-serialisable for checkpoints."""

    patience: int = 2
    min_delta: float = 0.0
    best: float | None = None
    stale: int = 0  # epochs since the last improvement

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise GrowthError(f"plateau patience must be >= 1, got {self.patience}")
        if self.min_delta < 0:
            raise GrowthError(f"plateau min_delta must be >= 0, got {self.min_delta}")

    def update(self, val_acc: float) -> bool:
        """Feed one epoch's validation accuracy; True: grow before the next epoch."""
        if self.best is None or val_acc > self.best + self.min_delta:
            self.best, self.stale = float(val_acc), 0
            return False
        self.stale += 1
        if self.stale < self.patience:
            return False
        self.best, self.stale = None, 0
        return True

    def state_dict(self) -> dict:
        return {"best": self.best, "stale": self.stale}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.stale = state["best"], int(state["stale"])


def events_due(
    events: Sequence[GrowthEvent],
    applied: int,
    epoch: int,
    plateau: bool = False,
) -> list[GrowthEvent]:
    """The events to apply before ``epoch``, given that the first ``applied`` already were.

    An event's epoch is the latest it waits: every pending event at or before ``epoch`` is due,
    and a plateau brings the next pending one forward when none is.
    """
    pending = list(events[applied:])
    due = list(itertools.takewhile(lambda event: event.epoch <= epoch, pending))
    if not due and pending and plateau:
        due = pending[:1]
    return due
