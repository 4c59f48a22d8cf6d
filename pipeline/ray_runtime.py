"""Starting or joining Ray: an embedded local cluster by default, ``--ray-address`` to join one."""

from __future__ import annotations

import logging
import os
import time

import ray


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
