"""Where a run's units go: this process's threads or Ray tasks, decided once per run.

``Executor.choose`` applies the rules when a run starts: units go to Ray on ``--ray-address``,
``RECHAIN_EXECUTION=ray`` or injected worker faults (``local_runner.use_ray``); the Bitcoin
chain state and the stages after it are partitioned over Ray workers only on a cluster given
by address, or as ``RECHAIN_CHAIN_STATE`` forces. Every stage then asks the run's executor
(``ctx.executor``) instead of deciding again, starts Ray through it, and runs its units
through ``ordered``: (unit, result) in submission order with at most ``window`` in flight, on
threads or as Ray tasks, a failed unit's exception handed back as its result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from rechain.pipeline.runtime.local_runner import ordered_local, use_ray

U = TypeVar("U")

#: ``sequential`` or ``partitioned`` overrides where the chain state and the stages after it
#: run (tests and benchmarks of either path).
PARTITIONED_ENV = "RECHAIN_CHAIN_STATE"


def _partitioned(ray_address: str | None) -> bool:
    forced = os.environ.get(PARTITIONED_ENV, "")
    if forced not in ("", "sequential", "partitioned"):
        raise ValueError(f"{PARTITIONED_ENV}={forced!r}: expected sequential or partitioned")
    if forced:
        return forced == "partitioned"
    return ray_address is not None


@dataclass(frozen=True)
class Executor:
    """A run's choice of threads or Ray, and the workers it runs units on."""

    #: The cluster to join (``--ray-address``), or None for this machine.
    ray_address: str | None
    #: Units run at once: threads, or the CPUs of an embedded Ray cluster.
    workers: int
    #: Units (scan shards, body units, import units, WAL segments) run as Ray tasks.
    on_ray: bool
    #: The chain state and the stages after it run on Ray workers, partitioned by txid (else
    #: on this process, in order).
    partitioned: bool

    @classmethod
    def choose(cls, ray_address: str | None, workers: int) -> Executor:
        return cls(ray_address, workers, use_ray(ray_address), _partitioned(ray_address))

    @property
    def kind(self) -> str:
        """``ray`` or ``threads``, as run reports name the execution."""
        return "ray" if self.on_ray else "threads"

    @property
    def workers_share_data_folder(self) -> bool:
        """Whether every worker runs on this machine and can write into the data folder (a
        cluster given by address may run them on other machines)."""
        return self.ray_address is None

    def start(self, ray: bool | None = None) -> float:
        """Starts or joins Ray when units run there (or when ``ray`` asks for it: the
        partitioned stages); the seconds it took (0 on threads, or when Ray is up)."""
        if not (self.on_ray if ray is None else ray):
            return 0.0
        from rechain.pipeline.runtime.ray_cluster import ensure_ray

        return ensure_ray(self.ray_address, self.workers)

    def ordered(
        self,
        fn: Callable[..., Any],
        units: Iterable[U],
        window: int,
        stage: str,
        *args: Any,
        threads: int | None = None,
    ) -> Iterator[tuple[U, Any]]:
        """``fn(unit, *args)`` for every unit, in submission order, at most ``window`` in
        flight: as Ray tasks (the metrics labelled ``stage``), or on ``threads`` threads
        (default: the run's workers)."""
        if self.on_ray:
            from rechain.pipeline.runtime.ray_cluster import ordered_results

            return ordered_results(fn, units, window, stage, *args)
        return ordered_local(lambda unit: fn(unit, *args), units, threads or self.workers, window)
