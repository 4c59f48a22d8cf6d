"""The one ordered, windowed executor: every unit submitted with at most ``window`` in flight
(back-pressure), results yielded in submission order so that one committer applies them in
order. Ray tasks (``ray_cluster.ordered_results``) and threads of the coordinator
(``local_runner.ordered_local``) are two ways of submitting to it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

U = TypeVar("U")
H = TypeVar("H")
R = TypeVar("R")


def ordered(
    submit: Callable[[U], H],
    wait: Callable[[H], R],
    units: Iterable[U],
    window: int,
    *,
    depth: Callable[[int], None] | None = None,
    cancel: Callable[[H], object] | None = None,
) -> Iterator[tuple[U, R]]:
    """Yields (unit, ``wait(submit(unit))``) for every unit in order. The next unit is
    submitted once a result has been handed over, so at most ``window`` are in flight and at
    most one result is held. ``depth`` is told the number in flight (0 at the end);
    ``cancel`` is called on what is still in flight when the consumer stops early."""
    queue: deque[tuple[U, H]] = deque()
    todo = iter(units)
    try:
        for unit in todo:
            queue.append((unit, submit(unit)))
            if len(queue) >= max(1, window):
                break
        while queue:
            if depth is not None:
                depth(len(queue))
            unit, handle = queue.popleft()
            result = wait(handle)
            yield unit, result
            del result
            nxt = next(todo, None)
            if nxt is not None:
                queue.append((nxt, submit(nxt)))
    finally:
        if cancel is not None:
            for _, handle in queue:
                cancel(handle)
        if depth is not None:
            depth(0)
