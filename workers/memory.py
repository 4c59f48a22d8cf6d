"""Giving freed memory back to the OS at stage ends, so ``--memory-budget`` bounds resident
memory and not only live objects (issue #7): glibc keeps freed heap pages (large blocks too,
once its mmap threshold has grown), and Arrow's allocator keeps freed pages for reuse."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
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
