"""Running work units in this process on a thread pool: how every stage runs on one machine.

The Rust core releases the GIL, so a process's threads keep every core busy; an embedded Ray
cluster on the same machine adds its start-up (seconds), daemons that compete with the work for
the cores, and hand-overs between processes, and saves nothing (measured on a full reindex of
1.1 GB: see benchmarks/README.md). Ray is for clusters: ``--ray-address``. Results come back in
submission order with bounded look-ahead, through the same executor as
``ray_cluster.ordered_results`` (``pipeline/runtime/ordered.py``). ``use_ray`` is the one rule every
stage follows to choose.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from rechain.pipeline.runtime.ordered import ordered
from rechain.workers import fault_injection

#: ``ray`` runs a machine's stages on an embedded Ray cluster (tests and benchmarks of the Ray
#: path without a cluster), ``threads`` (the default) on this process's threads;
#: ``--ray-address`` and injected worker faults always mean Ray.
EXECUTION_ENV = "RECHAIN_EXECUTION"

U = TypeVar("U")
R = TypeVar("R")


def use_ray(ray_address: str | None) -> bool:
    """Whether a stage runs its units as Ray tasks (else on this process's threads)."""
    forced = os.environ.get(EXECUTION_ENV, "")
    if forced not in ("", "ray", "threads"):
        raise ValueError(f"{EXECUTION_ENV}={forced!r}: expected ray or threads")
    # Injected worker faults (tests) target Ray tasks; on threads they would kill the run.
    return ray_address is not None or forced == "ray" or bool(os.environ.get(fault_injection.ENV))


def ordered_local(
    fn: Callable[[U], R], units: Iterable[U], threads: int, window: int
) -> Iterator[tuple[U, R | Exception]]:
    """Runs ``fn`` on every unit on ``threads`` threads through the ordered executor
    (``pipeline/runtime/ordered.py``): at most ``window`` units in flight, (unit, result) in
    submission order; a unit whose call raised yields the exception as its result, for the
    caller's failure policy."""

    def wait(future: Future[R]) -> R | Exception:
        try:
            return future.result()
        except Exception as e:  # handed to the caller's failure policy
            return e

    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="rechain") as pool:
        yield from ordered(
            lambda unit: pool.submit(fn, unit), wait, units, window, cancel=Future.cancel
        )
