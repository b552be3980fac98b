"""pipeline.allocator: glibc keeps a process's freed memory in its heap, so a step's large
tensors stop faulting fresh pages in; the user's own malloc settings win."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from pipeline.allocator import keep_freed_memory, user_set_malloc

# A child process: where glibc puts a 64 MiB tensor (a step's activations) and where its memory
# goes when it is freed, in glibc's own accounts (mallinfo2). ``pipeline`` is imported first, as
# every entry point does (``python -m pipeline.<step>``).
WHERE = """
import ctypes, pipeline, torch
FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
before = libc.mallinfo2()
tensor = torch.empty(2**24).fill_(1.0)
during = libc.mallinfo2()
del tensor
after = libc.mallinfo2()
print(during.hblkhd - before.hblkhd, after.fordblks)
"""
MIB_64 = 64 * 2**20


def where_in_child(**env: str) -> tuple[int, int]:
    """(bytes glibc mmapped for the tensor, bytes free in the heap once it is freed)."""
    clean = {k: v for k, v in os.environ.items() if not user_set_malloc({k: v})}
    result = subprocess.run(
        [sys.executable, "-c", WHERE], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    mmapped, free_in_heap = map(int, result.stdout.split())
    return mmapped, free_in_heap


glibc_linux = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only"
)


@glibc_linux
def test_a_large_tensor_comes_from_the_heap_and_its_memory_stays_there_once_freed():
    mmapped, free_in_heap = where_in_child(PIPELINE_KEEP_FREED_MEMORY="1", OMP_NUM_THREADS="1")
    assert mmapped < MIB_64 and free_in_heap >= MIB_64
    # glibc's own way, the control: the tensor is mapped apart and handed back when freed
    mmapped, free_in_heap = where_in_child(PIPELINE_KEEP_FREED_MEMORY="0", OMP_NUM_THREADS="1")
    assert mmapped >= MIB_64 and free_in_heap < MIB_64


def test_the_users_own_malloc_settings_and_the_opt_out_are_left_alone():
    assert user_set_malloc({"MALLOC_ARENA_MAX_": "2"})
    assert user_set_malloc({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"})
    assert not user_set_malloc({"MALLOC": "x", "PATH": "/bin"})
    assert keep_freed_memory({"MALLOC_MMAP_MAX_": "65536"}) is False
    assert keep_freed_memory({"PIPELINE_KEEP_FREED_MEMORY": "0"}) is False


@glibc_linux
def test_on_glibc_linux_the_settings_are_taken():
    assert keep_freed_memory({}) is True
