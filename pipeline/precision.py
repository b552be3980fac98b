"""Numeric precision of training and inference: which autocast dtype a run uses, and why.

Weights and optimizer state always stay fp32; ``bf16`` and ``fp16`` run the forward and backward
passes under ``torch.autocast``. ``auto`` resolves, once per run, to what this hardware runs fast:

- CUDA: bf16 where the GPU supports it (Ampere and later), else fp32.
- CPU: bf16 only with AMX (``amx_bf16``). With AVX512-BF16 alone bf16 runs, but measured on
  the 2-core AMD EPYC (Zen 4) these runs use, it is not faster for this project's networks:
  ``torch.mm`` at 2048^3 reaches 152-162 GFLOP/s in bf16 against 277-294 in fp32, and a
  default-spec training step (batch 128, channels_last) takes about as long or longer, because
  oneDNN's bf16 convolutions there are slower than its fp32 ones (conv 32->64 at 14x14:
  21 ms against 15 ms forward+backward). ``scripts/bench_train_static.py`` measures both.
- MPS: fp32.

A run records the precision it resolved to (param ``precision`` and tag ``precision_resolved``,
and the checkpoint's config), so ``auto`` on another machine cannot silently change a resumed or
repeated run.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch

from models.errors import UserError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class PrecisionError(UserError):
    """A precision this machine cannot run (fast); the message names what to use instead."""


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags Linux reports; empty where /proc/cpuinfo is absent."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_bf16_native() -> bool:
    """Whether the CPU has bf16 instructions (AVX512-BF16 or AMX) that oneDNN uses."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags()) and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def cpu_bf16_fast() -> bool:
    """Whether bf16 is faster than fp32 on this CPU for convolutions and matrix products (AMX)."""
    return "amx_bf16" in cpu_flags() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def resolve_precision(name: str, device: torch.device) -> str:
    """The concrete precision (fp32, bf16 or fp16) ``name`` means on ``device``."""
    if name not in PRECISIONS:
        raise PrecisionError(f"--precision {name!r}: use one of {', '.join(PRECISIONS)}")
    kind = device.type
    if name == "auto":
        if kind == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp32"
        if kind == "cpu":
            return "bf16" if cpu_bf16_fast() else "fp32"
        return "fp32"
    if name == "fp16" and kind != "cuda":
        raise PrecisionError(
            f"--precision fp16 runs only on CUDA (with a gradient scaler), not on {kind}; "
            "use --precision bf16 or fp32"
        )
    if name == "bf16":
        if kind == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
            raise PrecisionError(
                "--precision bf16: this GPU has no native bf16 (it needs Ampere or later); use fp16 or fp32"
            )
        if kind == "cpu" and not cpu_bf16_native():
            raise PrecisionError(
                "--precision bf16: this CPU has neither AVX512-BF16 nor AMX, so bf16 would be emulated "
                "and slower than fp32; use --precision fp32 (or auto)"
            )
        if kind == "mps":
            raise PrecisionError("--precision bf16 is not supported on MPS here; use fp32")
    return name


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast context for a resolved ``precision``; a no-op for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None
