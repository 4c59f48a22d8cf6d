"""Starting or joining Ray: an embedded local cluster by default, ``--ray-address`` to join one."""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import ray

U = TypeVar("U")


def ensure_ray(address: str | None, workers: int) -> float:
    """Initialises Ray once per process; returns the seconds start-up took (0 if already up)."""
    if ray.is_initialized():
        return 0.0
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    t0 = time.perf_counter()
    if address:
        ray.init(
            address=address,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
    else:
        # "local": always a new embedded cluster, never one `ray start` left running here.
        ray.init(
            address="local",
            num_cpus=workers,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
    _ray_notices_to_stderr()
    return time.perf_counter() - t0


def _ray_notices_to_stderr() -> None:
    """Ray's driver prints raylet notices (e.g. "A worker died ...") to stdout, which must hold
    only rechain's own output (``--json``): send them to stderr instead."""
    import ray._private.worker as ray_worker

    original = ray_worker.print_to_stdstream
    if getattr(original, "_rechain_stderr", False):
        return

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr._rechain_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


def ordered_results(
    remote: Any, units: Iterable[U], window: int, stage: str
) -> Iterator[tuple[U, Any]]:
    """Runs ``remote`` on every unit with at most ``window`` tasks in flight (back-pressure) and
    yields (unit, result) in submission order, so one committer can apply them in order. A task
    that failed for good yields its ``ray.exceptions.RayError`` as the result, for the caller's
    failure policy."""
    from rechain.pipeline import metrics

    queue: deque[tuple[U, Any]] = deque()
    todo = iter(units)
    try:
        for unit in todo:
            queue.append((unit, remote.remote(unit)))
            if len(queue) >= window:
                break
        while queue:
            metrics.QUEUE_DEPTH.labels(stage).set(len(queue))
            unit, ref = queue.popleft()
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as e:
                result = e
            yield unit, result
            del result
            nxt = next(todo, None)
            if nxt is not None:
                queue.append((nxt, remote.remote(nxt)))
    finally:
        metrics.QUEUE_DEPTH.labels(stage).set(0)
