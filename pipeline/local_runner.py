"""Running work units in this process on a thread pool, for stages too short to pay for Ray.

Starting an embedded Ray cluster costs seconds; a stage whose whole work is a few seconds of
Rust (which releases the GIL) runs faster on threads of the coordinator. Results come back in
submission order with bounded look-ahead, like ``ray_runtime.ordered_results``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

U = TypeVar("U")
R = TypeVar("R")


def ordered_local(
    fn: Callable[[U], R], units: Iterable[U], threads: int, window: int
) -> Iterator[tuple[U, R | Exception]]:
    """Runs ``fn`` on every unit on ``threads`` threads with at most ``window`` units in flight,
    yielding (unit, result) in submission order; a unit whose call raised yields the exception
    as its result, for the caller's failure policy."""
    queue: deque[tuple[U, Future[R]]] = deque()
    todo = iter(units)
    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="rechain") as pool:
        try:
            for unit in todo:
                queue.append((unit, pool.submit(fn, unit)))
                if len(queue) >= max(1, window):
                    break
            while queue:
                unit, future = queue.popleft()
                result: R | Exception
                try:
                    result = future.result()
                except Exception as e:  # handed to the caller's failure policy
                    result = e
                yield unit, result
                del result
                nxt = next(todo, None)
                if nxt is not None:
                    queue.append((nxt, pool.submit(fn, nxt)))
        finally:
            for _, future in queue:
                future.cancel()
