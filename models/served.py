"""The MLflow Model of a trained network, as models-from-code: MLflow runs this file to load it.

Loading unpickles nothing: the weights are a safetensors file whose metadata holds the spec,
and ``preprocess.json`` holds the training split's per-channel mean and std, so ``predict``
takes raw images as the dataset stores them:

    model = mlflow.pyfunc.load_model("models:/growing-cnn-fashion-mnist@champion")
    probs = model.predict(images)  # images: uint8 (N, C, H, W); probs: float32 (N, classes)

Served with ``mlflow models serve``, it answers ``{"inputs": [...]}`` with the same numbers.
A network with exits answers by input-adaptive inference at the thresholds saved with it: each
image leaves at the first exit confident enough, and its probabilities are that exit's. One
trained with ``--tta flip`` (no exits) answers with its logits averaged over each image and its
mirror, as its validation and ``evaluate`` read it.
"""

from __future__ import annotations

import json

import mlflow
import numpy as np
import torch

from models.io import PREPROCESS, WEIGHTS, load_model
from models.tta import with_tta


class SpecNetClassifier(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        self.model = load_model(context.artifacts[WEIGHTS]).eval()
        with open(context.artifacts[PREPROCESS]) as handle:
            pre = json.load(handle)
        self.input_shape = tuple(pre["input_shape"])  # (C, H, W)
        self.mean = torch.tensor(pre["mean"], dtype=torch.float32).view(1, -1, 1, 1)  # (1, C, 1, 1)
        self.std = torch.tensor(pre["std"], dtype=torch.float32).view(1, -1, 1, 1)
        self.tta = pre.get("tta", "none")  # a model logged before --tta existed: none

    # np.ndarray: a hint MLflow accepts without inferring a schema from it (the logged tensor
    # signature is the schema); with no hint it warns on every load.
    def predict(self, context, model_input: np.ndarray, params=None) -> np.ndarray:
        x = torch.as_tensor(np.asarray(model_input))  # (N, C, H, W) uint8, as the signature says
        if tuple(x.shape[1:]) != self.input_shape:
            raise ValueError(
                f"images of shape {tuple(x.shape[1:])}; this model takes {self.input_shape} (C, H, W)"
            )
        x = (x.float() / 255.0 - self.mean) / self.std  # as pipeline.data.splits normalises
        with torch.no_grad():
            if self.tta == "none":
                logits, _ = self.model.adaptive(x)  # the full forward where there are no exits
            else:  # training refuses --tta with exits: the whole network, read as tta says
                logits = with_tta(self.model, self.tta)(x).float()
            return torch.softmax(logits, dim=1).numpy()  # (N, classes)


mlflow.models.set_model(SpecNetClassifier())
