"""Running work units in this process on a thread pool, for stages too short to pay for Ray.

Starting an embedded Ray cluster costs seconds; a stage whose whole work is a few seconds of
Rust (which releases the GIL) runs faster on threads of the coordinator. Results come back in
submission order with bounded look-ahead, through the same executor as
``ray_runtime.ordered_results`` (``pipeline/ordered.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from rechain.pipeline.ordered import ordered

U = TypeVar("U")
R = TypeVar("R")


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
