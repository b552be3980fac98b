"""Save and load models as safetensors: weights plus the spec that built them.

Safetensors holds only tensors and a string map, so loading a model file can never run code
(unlike pickle). The spec rides in the metadata, so the file alone rebuilds the network.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from models.builder import SpecNet, build_model
from models.confidence import ConfidenceError, check_confidence
from models.errors import UserError
from models.spec import ArchSpec, SpecError

SPEC_KEY = "arch_spec"
# The calibrated confidence threshold of each exit (JSON list), when the spec has exits.
THRESHOLDS_KEY = "exit_thresholds"
# The confidence measure those thresholds are on (models/confidence.py); absent: max softmax,
# what every model file saved before the choice existed was calibrated on.
CONFIDENCE_KEY = "exit_confidence"
# Artifact keys of a logged MLflow Model (models/served.py): the weights file, and the JSON
# with the normalisation that makes it take raw uint8 images.
WEIGHTS = "weights"
PREPROCESS = "preprocess"


class ModelFileError(UserError):
    """A model file that is missing, unreadable or disagrees with its own spec."""


def save_model(model: SpecNet, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tmp = path.with_suffix(path.suffix + ".partial")
    metadata = {SPEC_KEY: model.spec.to_json()}
    if model.exit_thresholds is not None:
        metadata[THRESHOLDS_KEY] = json.dumps(list(model.exit_thresholds))
        metadata[CONFIDENCE_KEY] = model.exit_confidence
    save_file(tensors, str(tmp), metadata=metadata)
    tmp.replace(path)  # never leave a half-written model under the final name
    return path


def load_model(path: str | Path, device: str | torch.device = "cpu") -> SpecNet:
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file {path} does not exist")
    try:
        tensors = load_file(str(path), device=str(device))
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelFileError(f"model file {path} is not a readable safetensors file ({err})") from None
    if SPEC_KEY not in metadata:
        raise ModelFileError(f"model file {path} carries no architecture spec")
    try:
        spec = ArchSpec.from_dict(json.loads(metadata[SPEC_KEY]))
        model = build_model(spec).to(device)
    except (SpecError, json.JSONDecodeError) as err:
        raise ModelFileError(f"model file {path} has an invalid spec: {err}") from None
    check_state_matches(model, tensors, str(path))
    model.load_state_dict(tensors)
    if THRESHOLDS_KEY in metadata:
        try:
            model.exit_thresholds = check_thresholds(json.loads(metadata[THRESHOLDS_KEY]), model.spec)
        except (SpecError, json.JSONDecodeError) as err:
            raise ModelFileError(f"model file {path} has invalid exit thresholds: {err}") from None
    if CONFIDENCE_KEY in metadata:
        try:
            model.exit_confidence = check_confidence(metadata[CONFIDENCE_KEY], "exit confidence")
        except ConfidenceError as err:
            raise ModelFileError(f"model file {path}: {err}") from None
    return model


def check_thresholds(values, spec: ArchSpec) -> tuple[float, ...]:
    """One threshold in [0, 1] per exit of ``spec``; raises SpecError naming the problem."""
    if not isinstance(values, (list, tuple)) or len(values) != len(spec.exits):
        raise SpecError(
            f"{values!r}: give one threshold per exit ({len(spec.exits)}: {', '.join(spec.exit_ids())})"
        )
    out = []
    for value in values:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
            raise SpecError(f"exit threshold {value!r} is outside [0, 1]")
        out.append(float(value))
    return tuple(out)


def check_state_matches(model: torch.nn.Module, tensors: dict, source: str) -> None:
    """Refuse weights whose names or shapes differ from what the spec builds."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing or extra:
        raise ModelFileError(
            f"{source} does not match its spec: missing {missing[:3]}, unexpected {extra[:3]}"
        )
    for name, shape in expected.items():
        if got[name] != shape:
            raise ModelFileError(f"{source}: {name} has shape {got[name]}, the spec says {shape}")
