"""Where a process's freed memory goes: kept in its heap, on Linux with glibc.

A training step on the CPU allocates and frees tensors of tens to hundreds of megabytes (a batch
of 1,024 CIFAR-10 images through 32 channels is 128 MiB). glibc serves each of them with a fresh
``mmap`` and returns it to the kernel on ``free``, so the next step faults every page in again
and the kernel zeroes it: on a 2-core AMD EPYC VM that was 200,000 page faults a second and a
quarter of the CPU time in the kernel. Keeping freed memory in the heap (no ``mmap`` for large
blocks, no trimming of the heap's top) removes that work and leaves the arithmetic as it was:
``scripts/bench_allocator.py`` measures it (docs/measurements.md has the figures).

The cost is resident memory: a process keeps near its peak heap (up to 2 GiB more is trimmed)
until it exits, a peak a training run reaches in its first steps anyway.

A user who sets any of glibc's own malloc settings (``MALLOC_*_`` or ``GLIBC_TUNABLES``) keeps
them: nothing here overrides them. ``PIPELINE_KEEP_FREED_MEMORY=0`` turns this off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from collections.abc import Mapping

# mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
# mallopt takes an int: the largest trim threshold it can say is 2 GiB less a byte; the heap's
# top is trimmed only when more than that lies free above the last block in use.
TRIM_THRESHOLD = 2**31 - 1
# Grow the heap 512 MiB at a time, so that a step's first large blocks do not each move brk.
TOP_PAD = 512 * 2**20


def user_set_malloc(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` holds any of glibc's malloc settings, which then win."""
    return "GLIBC_TUNABLES" in environ or any(
        name.startswith("MALLOC_") and name.endswith("_") for name in environ
    )


def keep_freed_memory(environ: Mapping[str, str] | None = None) -> bool:
    """Tell glibc to keep freed memory in this process's heap; True if it was told.

    Does nothing (False) off Linux, off glibc, when the user set glibc's malloc settings, or
    with ``PIPELINE_KEEP_FREED_MEMORY=0``. Takes effect for every allocation after the call."""
    environ = os.environ if environ is None else environ
    if environ.get("PIPELINE_KEEP_FREED_MEMORY", "1") == "0" or user_set_malloc(environ):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    settings = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))
    # mallopt returns 1 on success, 0 on an unknown parameter or value
    return all(libc.mallopt(param, value) == 1 for param, value in settings)
