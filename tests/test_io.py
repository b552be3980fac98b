"""Model files and checkpoints: save -> load gives the same logits; nothing unpickles code."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch
from safetensors.torch import save_file

from models.builder import build_model
from models.io import ModelFileError, load_model, save_model
from models.spec import resolve_spec
from pipeline.training.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from pipeline.training.config import TrainConfig
from pipeline.training.state import new_state
from pipeline.training.training_plan import TrainingPlan


def test_save_load_gives_identical_logits(tmp_path):
    model = build_model(resolve_spec("default", (1, 28, 28), 10)).eval()
    x = torch.randn(5, 1, 28, 28)
    path = save_model(model, tmp_path / "m.safetensors")
    again = load_model(path).eval()
    assert again.spec == model.spec
    assert torch.equal(model(x), again(x))


def test_model_file_whose_weights_disagree_with_its_spec_is_refused(tmp_path):
    model = build_model(resolve_spec("tiny", (1, 28, 28), 10))
    other = build_model(resolve_spec("minimal", (1, 28, 28), 10))
    tensors = {k: v.contiguous() for k, v in other.state_dict().items()}
    save_file(tensors, str(tmp_path / "m.safetensors"), metadata={"arch_spec": model.spec.to_json()})
    with pytest.raises(ModelFileError, match="has shape .* the spec says"):
        load_model(tmp_path / "m.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelFileError, match="not a readable safetensors file"):
        load_model(tmp_path / "junk.safetensors")
    with pytest.raises(ModelFileError, match="does not exist"):
        load_model(tmp_path / "missing.safetensors")


class _RunsCode:
    """Unpickling this calls os.system: the classic malicious-pickle payload."""

    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_checkpoint_crafted_to_run_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pt"
    torch.save({"format": 1, "payload": _RunsCode()}, path)
    cfg = TrainConfig()
    with pytest.raises(CheckpointError, match="unreadable or unsafe"):
        load_checkpoint(path, cfg, TrainingPlan(), torch.device("cpu"))
    assert not (tmp_path / "pwned").exists()
    path.write_bytes(pickle.dumps(_RunsCode()))
    with pytest.raises(CheckpointError):
        load_checkpoint(path, cfg, TrainingPlan(), torch.device("cpu"))
    assert not (tmp_path / "pwned").exists()


def test_truncated_or_missing_checkpoint_is_refused(tmp_path):
    cfg = TrainConfig()
    state = new_state(resolve_spec("tiny", (1, 28, 28), 10), cfg, torch.device("cpu"))
    path = save_checkpoint(tmp_path / "c.pt", state, TrainingPlan(), cfg)
    restored = load_checkpoint(path, cfg, TrainingPlan(), torch.device("cpu"))
    assert json.dumps(restored.model.spec.to_dict()) == json.dumps(state.model.spec.to_dict())
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CheckpointError, match="unreadable"):
        load_checkpoint(path, cfg, TrainingPlan(), torch.device("cpu"))
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt", cfg, TrainingPlan(), torch.device("cpu"))
