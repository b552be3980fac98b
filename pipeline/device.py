"""Where a run computes and how it starts: the device it asks for (``--device``), the layout its
activations take there, and the seeds of every random generator it uses. Shared by every entry
point and by the training loop; no MLflow.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import nn

from models.errors import UserError


class DeviceError(UserError):
    """A ``--device`` this machine does not have or that is not a device name."""


def pick_device(name: str = "auto") -> torch.device:
    if name != "auto":
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise DeviceError(f"--device {name}: CUDA is not available on this machine")
        if name == "mps" and not torch.backends.mps.is_available():
            raise DeviceError("--device mps: MPS is not available on this machine")
        if name.split(":")[0] not in ("cpu", "cuda", "mps"):
            raise DeviceError(f"--device {name!r}: use auto, cpu, cuda, cuda:N or mps")
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def memory_format_for(device: torch.device) -> torch.memory_format:
    """The layout convolutional activations should have on ``device``.

    channels_last (NHWC) on CPU and CUDA: oneDNN's max-pool and ReLU run several times faster on
    it than on NCHW, which the small, memory-bound networks a growing run starts from feel most
    (full Fashion-MNIST, default spec, 1 thread: 271 s for 12 epochs against 334 s, the same
    val/acc). MPS keeps the default layout.
    """
    return torch.channels_last if device.type in ("cpu", "cuda") else torch.contiguous_format


def place_model(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` on ``device`` in its preferred layout, in place: parameters stay the same objects,
    so an optimizer that holds them (and its momentum buffers) stays valid."""
    return model.to(device=device, memory_format=memory_format_for(device))


# An evaluation pass's batch where ``--eval-batch-size`` is 0 (auto). On the CPU a batch of 1024
# channels_last activations outgrows the cache: a validation pass of the default network took
# 1.9x (Fashion-MNIST) to 2.2x (CIFAR-10) the time at 128, which was the fastest there (64 to
# 1024 measured, one thread). A GPU is launch-bound: the bigger the batch, the fewer launches.
CPU_EVAL_BATCH = 128
ACCELERATOR_EVAL_BATCH = 1024


def eval_batch_size(requested: int, device: torch.device) -> int:
    """The batch of an evaluation pass on ``device``: ``requested``, or where it is 0 the
    device's own (``CPU_EVAL_BATCH``, ``ACCELERATOR_EVAL_BATCH``)."""
    if requested:
        return requested
    return CPU_EVAL_BATCH if device.type == "cpu" else ACCELERATOR_EVAL_BATCH


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work, so that a clock read next counts it (CUDA runs
    asynchronously; on the CPU there is nothing to wait for)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    # cuDNN's autotuner times its kernels for every input shape it has not met. A step of these
    # small networks is launch-bound on a GPU, so it finds nothing faster (static's later epochs
    # took the same time either way), and a growing run meets new shapes at each growth and,
    # with pruning, a last batch of a new size every epoch: on an H200 the autotuner made the
    # default growing run's epochs 1.7x as long (docs/results/gpu/cudnn).
    torch.backends.cudnn.benchmark = False
    if deterministic:
        import os

        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
