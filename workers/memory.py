"""Giving freed memory back to the OS, so ``--memory-budget`` bounds resident memory and not
only live objects (issue #7): glibc keeps freed heap pages (large blocks too, once its mmap
threshold has grown), and Arrow's allocator keeps freed pages for reuse. ``bound_heap`` fixes
glibc's thresholds and picks Arrow's allocator for this process and the ones it starts;
``release_unused_memory`` hands back what is free at stage ends."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
from functools import cache


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    # malloc_trim is glibc's; musl and others have no such call and nothing to do here.
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_unused_memory() -> None:
    """Collects garbage, then returns free pages of Arrow's pool (if this process loaded
    pyarrow: a Flow replay does not) and of the C heap."""
    gc.collect()
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


#: Heap blocks at least this large get pages of their own, unmapped when freed. glibc's default
#: threshold (128 KiB) rises with every larger block freed, up to 32 MiB, after which the
#: pipeline's chunk and batch buffers are carved from the heap and their pages stay resident
#: once freed, hundreds of MiB beyond the budget on a long run. A fixed threshold also keeps
#: glibc's trim threshold fixed.
MMAP_THRESHOLD = 1 << 20
#: glibc makes up to eight heaps per core, one per thread that contends, each keeping its freed
#: pages; the pipeline's threads share a few.
ARENA_MAX = 4
#: Arrow's allocator for this process and its children: jemalloc hands freed pages back after a
#: few seconds, where Arrow's default (mimalloc) kept ~90 MiB more through a 10x-budget publish.
ARROW_POOL = "jemalloc"
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def bound_heap() -> None:
    """Fixes glibc's mmap threshold and heap count for this process and, through the
    environment glibc reads at start-up, for the processes it starts (Ray's workers); picks
    Arrow's allocator (read when Arrow first allocates) the same way."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", ARROW_POOL)
    libc = _libc()
    for env, param, value in (
        ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        ("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENA_MAX),
    ):
        # A value set by the user wins (glibc has read it already).
        if env in os.environ:
            continue
        os.environ[env] = str(value)
        if libc is not None:
            libc.mallopt(param, value)
