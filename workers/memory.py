"""Giving freed memory back to the OS, so ``--memory-budget`` bounds resident memory and not
only live objects (issue #7): glibc keeps freed heap pages (large blocks too, once its mmap
threshold has grown), and Arrow's allocator keeps freed pages for reuse. ``bound_heap`` fixes
glibc's thresholds and picks Arrow's allocator for this process and the ones it starts;
``release_unused_memory`` hands back what is free at stage ends."""

from __future__ import annotations

import atexit
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


def release_unused_memory(collect: bool = True) -> None:
    """Collects garbage (unless ``collect`` is false: a caller whose garbage holds no cycles,
    freed by reference counts already), then returns free pages of Arrow's pool (if this
    process loaded pyarrow: a Flow replay does not) and of the C heap."""
    if collect:
        gc.collect()
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


#: ``--memory-budget`` of a command not given one.
DEFAULT_MEMORY_BUDGET = 1 << 30

#: Heap blocks at least this large get pages of their own, unmapped when freed. glibc's default
#: threshold (128 KiB) rises with every larger block freed, up to 32 MiB, after which the
#: pipeline's chunk and batch buffers are carved from the heap and their pages stay resident
#: once freed, hundreds of MiB beyond the budget on a long run. A fixed threshold also keeps
#: glibc's trim threshold fixed. This is the threshold before a command's budget is known.
MMAP_THRESHOLD = 1 << 20
#: Once the budget is known the threshold is this share of it (within glibc's 32 MiB ceiling):
#: every block above the threshold is mapped fresh and each of its pages faulted in, zeroed,
#: on first touch, which cost a full reindex a quarter of its time at 1 MiB; below it freed
#: blocks are reused from the heap, and blocks of a 32nd of the budget each stay within it.
MMAP_THRESHOLD_BUDGET_SHARE = 32
MAX_MMAP_THRESHOLD = 32 << 20
# The trim threshold (free memory at the top of a heap past which it is handed back) is set
# to the same value: glibc's fixed default (128 KiB) hands back the pages a growing buffer was
# just moved out of and faults them in again, zeroed, for the next one (a fifth of a streamed
# checkpoint read); at the mmap threshold each of the ``ARENA_MAX`` heaps keeps at most a 32nd
# of the budget, and ``release_unused_memory`` trims them all at stage ends.

#: glibc makes up to eight heaps per core, one per thread that contends, each keeping its freed
#: pages; the pipeline's threads share a few.
ARENA_MAX = 4
#: Arrow's allocator for this process and its children: jemalloc hands freed pages back after a
#: few seconds, where Arrow's default (mimalloc) kept ~90 MiB more through a 10x-budget publish.
ARROW_POOL = "jemalloc"
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
#: The allocator settings the user gave in the environment before this process started.
_USER_SET = frozenset(
    env
    for env in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX")
    if env in os.environ
)


#: A file a process writes its own peak RSS to as it exits (bytes, its ``VmHWM``), when the
#: environment names one: a harness outside it sees neither its last moments (a sampler) nor
#: its memory apart from its children's (``wait4``'s ``ru_maxrss`` is the largest of them).
PEAK_RSS_FILE_ENV = "RECHAIN_PEAK_RSS_FILE"


def report_peak_rss_at_exit() -> None:
    """Writes this process's peak RSS to the file ``PEAK_RSS_FILE_ENV`` names as it exits
    (the name is taken out of the environment, so the processes it starts do not)."""
    path = os.environ.pop(PEAK_RSS_FILE_ENV, None)
    if path:
        atexit.register(_write_peak_rss, path)


def _write_peak_rss(path: str) -> None:
    with open(path, "w") as out:
        out.write(str(high_water_mark()))


def high_water_mark(pid: int | str = "self") -> int:
    """The peak RSS of process ``pid`` so far (bytes, the kernel's ``VmHWM``); 0 if it has no
    memory left to read (exited) or is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError):
        pass
    return 0


def bound_heap(budget: int | None = None) -> None:
    """Fixes glibc's mmap and trim thresholds and heap count for this process and, through the
    environment glibc reads at start-up, for the processes it starts (Ray's workers); picks
    Arrow's allocator (read when Arrow first allocates) the same way. With ``budget`` (once a
    command's ``--memory-budget`` is known) the threshold is ``mmap_threshold(budget)``."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", ARROW_POOL)
    libc = _libc()
    threshold = MMAP_THRESHOLD if budget is None else mmap_threshold(budget)
    for env, param, value in (
        ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, threshold),
        ("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, threshold),
        ("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENA_MAX),
    ):
        # A value set by the user wins (glibc has read it already).
        if env in _USER_SET:
            continue
        os.environ[env] = str(value)
        if libc is not None:
            libc.mallopt(param, value)


def mmap_threshold(budget: int) -> int:
    """glibc's mmap threshold under ``budget``: a share of it, within 1 and 32 MiB."""
    return max(MMAP_THRESHOLD, min(MAX_MMAP_THRESHOLD, budget // MMAP_THRESHOLD_BUDGET_SHARE))
