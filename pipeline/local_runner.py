"""Running work units in this process on a thread pool, for stages too short to pay for Ray.

Starting an embedded Ray cluster costs seconds; a stage whose whole work is a few seconds of
Rust (which releases the GIL) runs faster on threads of the coordinator. Results come back in
submission order with bounded look-ahead, through the same executor as
``ray_runtime.ordered_results`` (``pipeline/ordered.py``). ``use_ray`` is the one rule every
stage follows to choose.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from rechain.pipeline.ordered import ordered
from rechain.workers import fault_injection

#: Without ``--ray-address``, a stage whose input is at most this many bytes runs on threads:
#: Ray's start-up (seconds, and resident processes) costs more than it saves.
LOCAL_MAX_BYTES = 1 << 30
#: ``ray`` or ``threads`` overrides the size rule (tests and benchmarks of either path);
#: ``--ray-address`` always means Ray.
EXECUTION_ENV = "RECHAIN_EXECUTION"

U = TypeVar("U")
R = TypeVar("R")


def use_ray(ray_address: str | None, input_bytes: int) -> bool:
    """Whether a stage runs its units as Ray tasks (else on this process's threads)."""
    forced = os.environ.get(EXECUTION_ENV, "")
    if forced not in ("", "ray", "threads"):
        raise ValueError(f"{EXECUTION_ENV}={forced!r}: expected ray or threads")
    # Injected worker faults (tests) target Ray tasks; on threads they would kill the run.
    if ray_address is not None or forced == "ray" or os.environ.get(fault_injection.ENV):
        return True
    return forced != "threads" and input_bytes > LOCAL_MAX_BYTES


def ordered_local(
    fn: Callable[[U], R], units: Iterable[U], threads: int, window: int
) -> Iterator[tuple[U, R | Exception]]:
    """Runs ``fn`` on every unit on ``threads`` threads through the ordered executor
    (``pipeline/ordered.py``): at most ``window`` units in flight, (unit, result) in
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
