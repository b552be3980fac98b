"""One growth event, which inserts a layer or widens one (``GrowthEvent``), its compact written
form and the checks an event passes on its own; models/schedule.py reads whole schedules (names,
JSON, compact strings) and applies events to specs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from models.errors import UserError
from models.layers import GROWABLE_TYPES, LAYER_TYPES, LAYERS
from models.spec import SpecError, normalise_layer


class GrowthError(UserError):
    """A schedule or growth event that cannot work; one line naming the event and the reason."""


# The event that widens an existing layer (``id``) to ``width`` output channels or features,
# rather than inserting one; its width lands on the first of these fields the layer's type has.
WIDEN = "widen"
WIDTH_FIELDS = ("out_channels", "out_features")


@dataclass(frozen=True)
class GrowthEvent:
    """Insert ``layer`` (a spec layer without its id: type and fields) before epoch ``epoch``;
    or, where its type is ``widen``, widen the layer ``id`` to ``layer["width"]``."""

    epoch: int
    layer: dict
    position: str | None = None  # after:<id>, before:<id> or head; None: the type's default place
    id: str | None = None  # None: generated from the type (conv2, res1, ...)

    def __post_init__(self) -> None:
        if not isinstance(self.epoch, int) or isinstance(self.epoch, bool):
            raise GrowthError(f"growth epoch must be an integer, got {self.epoch!r}")
        if not isinstance(self.layer, dict) or not isinstance(self.layer.get("type"), str):
            raise GrowthError(f"growth event at epoch {self.epoch}: layer {self.layer!r} needs a 'type'")
        layer = dict(self.layer)  # a private copy: the event must not change under its owner
        if "id" in layer:  # the id may ride in the layer, as in a spec; it is kept apart here
            layer_id = layer.pop("id")
            if self.id is not None and self.id != layer_id:
                raise GrowthError(
                    f"growth event at epoch {self.epoch}: two ids, {layer_id!r} and {self.id!r}"
                )
            object.__setattr__(self, "id", layer_id)
        object.__setattr__(self, "layer", layer)
        for name in ("position", "id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise GrowthError(
                    f"growth event at epoch {self.epoch}: {name} must be a string, got {value!r}"
                )

    def __hash__(self) -> int:  # the layer dict is unhashable; the JSON form is canonical
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    @property
    def type(self) -> str:
        return self.layer["type"]

    @property
    def widens(self) -> bool:
        return self.type == WIDEN

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"epoch": self.epoch, **self.layer}
        if self.id is not None:
            out["id"] = self.id
        if self.position is not None:
            out["position"] = self.position
        return out

    @classmethod
    def from_dict(cls, data: dict) -> GrowthEvent:
        if not isinstance(data, dict) or "epoch" not in data or "type" not in data:
            raise GrowthError(f"growth event {data!r} must be an object with 'epoch' and 'type'")
        layer = {k: v for k, v in data.items() if k not in ("epoch", "position")}
        return cls(data["epoch"], layer, data.get("position"))

    def to_compact(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in self.layer.items() if k != "type")
        return (
            f"{self.epoch}:"
            + (f"{self.id}=" if self.id else "")
            + self.type
            + (f"({args})" if args else "")
            + (f"@{self.position}" if self.position else "")
        )


# --- parsing -----------------------------------------------------------------------------

_EVENT_PATTERN = re.compile(
    r"(?P<epoch>[+-]?\d+)\s*:\s*(?:(?P<id>[A-Za-z]\w*)\s*=\s*)?(?P<type>[A-Za-z]\w*)\s*"
    r"(?:\((?P<args>[^()]*)\))?\s*(?:@\s*(?P<position>\S+))?"
)


def _value(text: str) -> int | float | str:
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def parse_compact_event(text: str) -> GrowthEvent:
    match = _EVENT_PATTERN.fullmatch(text.strip())
    if match is None:
        raise GrowthError(
            f"growth event {text.strip()!r} does not read EPOCH:[ID=]TYPE[(ARGS)][@POSITION], "
            "e.g. 3:conv(64)@after:pool1"
        )
    kind = match["type"]
    if kind not in LAYERS and kind != WIDEN:
        raise GrowthError(
            f"growth event {text.strip()!r}: unknown layer type {kind!r} (known: {', '.join(LAYER_TYPES)}; "
            f"or {WIDEN})"
        )
    names = ["width"] if kind == WIDEN else list(LAYERS[kind].fields)
    layer: dict[str, Any] = {"type": kind}
    args = [a.strip() for a in (match["args"] or "").split(",") if a.strip()]
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if eq:
            key = key.strip()
        elif any("=" in a for a in args[:i]):
            raise GrowthError(f"growth event {text.strip()!r}: positional value {arg!r} after a key=value")
        elif i >= len(names):
            raise GrowthError(
                f"growth event {text.strip()!r}: {kind} takes at most {len(names)} positional "
                f"value(s) ({', '.join(names) or 'none'})"
            )
        else:
            key, value = names[i], arg
        if key in layer:
            raise GrowthError(f"growth event {text.strip()!r}: {key} is given twice")
        layer[key] = _value(value.strip())
    return GrowthEvent(int(match["epoch"]), layer, match["position"], match["id"])


def check_widening(event: GrowthEvent) -> None:
    where = f"growth event {event.to_compact()}"
    if event.id is None:
        raise GrowthError(f"{where}: a {WIDEN} event names the layer it widens, e.g. 5:s2b1={WIDEN}(32)")
    if event.position is not None:
        raise GrowthError(f"{where}: a {WIDEN} event widens a layer where it is; it takes no position")
    unknown = set(event.layer) - {"type", "width"}
    if unknown:
        raise GrowthError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; {WIDEN} takes width")
    width = event.layer.get("width")
    if not isinstance(width, int) or isinstance(width, bool) or width < 1:
        raise GrowthError(f"{where}: width must be a positive integer, got {width!r}")


def check_event(event: GrowthEvent) -> None:
    if event.widens:
        check_widening(event)
        return
    if event.type in LAYERS and not LAYERS[event.type].growable:
        raise GrowthError(
            f"growth event {event.to_compact()}: a {event.type} layer is in a network from its start "
            f"(its stem or head), never inserted; growth inserts one of {', '.join(GROWABLE_TYPES)}"
        )
    try:
        normalise_layer({"id": event.id or "new", **event.layer})
    except SpecError as err:
        raise GrowthError(f"growth event {event.to_compact()}: {err}") from None
