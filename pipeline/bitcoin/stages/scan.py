"""Stage ``scan``: reads the blk files' new bytes into the scan log.

Plans shards from each file's committed position (a resumed or grown file is scanned only from
where its last run stopped, a file's provisional tail again), runs them on threads or, on a
cluster (the run's ``executor``) and unless a Core block index guides them, on Ray, and
commits each result in file order through the committer. The scan log is incremental by itself,
so this stage runs every time: finding nothing new is its cheap case.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from rechain.pipeline import metrics
from rechain.pipeline.bitcoin.core_index import guided_units
from rechain.pipeline.bitcoin.faults import failed_shard, failure_reason, local_failure_reason
from rechain.pipeline.bitcoin.plan import FINGERPRINT_BYTES, cut_shards
from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.bitcoin.scan_log import STAGE
from rechain.pipeline.engine.driver import Done, Stage
from rechain.pipeline.errors import RechainError
from rechain.pipeline.progress import Progress
from rechain.pipeline.runtime.budget import budget_share
from rechain.workers.btc_scan import ShardResult, WorkUnit, scan_unit

log = logging.getLogger(__name__)


class ScanStage(Stage[BtcRun]):
    name = "scan"

    def pending(self, ctx: BtcRun) -> bool:
        return True

    def output(self, ctx: BtcRun) -> Any:
        # The link stage watches the log's dirty flag, which the committer keeps durable.
        return "log"

    def run(self, ctx: BtcRun) -> Done:
        units = plan(ctx)
        total_bytes = sum(u.bound - u.start for u in units)
        metrics.SHARDS_TOTAL.labels(STAGE).set(len(units))
        ray_start = 0.0
        t_scan = time.perf_counter()
        guide = ctx.guide
        collect = guide.collect if guide is not None else None
        # Guided by an index, the scan reads a few bytes per block: threads beat Ray anywhere.
        guided = guide is not None and bool(guide.hints) and not ctx.opts.ray_address
        local = guided or not ctx.executor.on_ray
        if units and local:
            _execute_local(units, ctx, total_bytes, collect)
        elif units:
            ray_start = _execute(units, ctx, total_bytes, collect)
        ctx.scan.update(
            {
                "bytes_planned": total_bytes,
                "ray_start_s": ray_start,
                "scan_s": time.perf_counter() - t_scan - ray_start,
            }
        )
        s = ctx.committer.stats
        return Done(
            rows=s.records,
            detail={"shards": s.shards, "bytes_read": s.bytes_read, "files": len(ctx.files)},
        )


def plan(ctx: BtcRun) -> list[WorkUnit]:
    """Shards of every file from its resume position (guided ones where an index knows it)."""
    opts, committer = ctx.opts, ctx.committer
    units: list[WorkUnit] = []
    for f in ctx.files:
        try:
            with open(f.path, "rb") as fh:
                head = fh.read(FINGERPRINT_BYTES)
        except OSError as e:
            raise RechainError(f"{f.path}: cannot read: {e.strerror}") from e
        start = committer.resume_position(f, head)
        if start >= f.size:
            continue
        committer.begin_file(f, start, head)
        hints = ctx.guide.hints.get(f.file_no) if ctx.guide else None
        if hints is not None:
            # Units that verify every indexed record and search only the gaps between
            # them and the tail after the last one, cut at indexed record starts.
            units.extend(
                guided_units(
                    f,
                    start,
                    hints,
                    opts.shard_bytes,
                    opts.network,
                    ctx.key,
                    opts.check_bodies,
                    len(units),
                )
            )
            continue
        units.extend(
            cut_shards(
                f, start, opts.shard_bytes, opts.network, ctx.key, opts.check_bodies, len(units)
            )
        )
    committer.keep_records_if_fresh()
    return units


def max_inflight(shard_bytes: int, memory_budget: int, workers: int) -> int:
    """Back-pressure: enough shards to keep every worker busy, within the memory budget."""
    # A shard's Arrow result is at most ~1/4 of its bytes for the densest (tiny) blocks.
    per_shard = max(shard_bytes // 4, 1 << 20)
    by_budget = max(budget_share(memory_budget, "bitcoin", "scan.results") // per_shard, 1)
    return max(1, min(2 * workers, by_budget))


def _execute(
    units: list[WorkUnit],
    ctx: BtcRun,
    total_bytes: int,
    on_result: Callable[[ShardResult], None] | None = None,
) -> float:
    import ray

    opts, committer = ctx.opts, ctx.committer
    ray_start = ctx.executor.start()
    progress = Progress(total_bytes, enabled=opts.progress)
    window = max_inflight(opts.shard_bytes, opts.memory_budget, ctx.workers)
    try:
        for unit, result in ctx.executor.ordered(scan_unit, units, window, STAGE):
            if isinstance(result, ray.exceptions.RayError):
                # Ray has retried lost workers already; see bitcoin/faults.py for what is skipped.
                result = failed_shard(unit, committer, failure_reason(unit, result))
            committer.apply(result)
            if on_result is not None:
                on_result(result)
            progress.update(unit.bound - unit.start, result.records.num_rows)
    finally:
        progress.close()
    return ray_start


def _execute_local(
    units: list[WorkUnit],
    ctx: BtcRun,
    total_bytes: int,
    on_result: Callable[[ShardResult], None] | None,
) -> None:
    """As :func:`_execute`, on threads of this process (the Rust scan releases the GIL), as a
    guided scan runs whatever the run's executor."""
    from rechain.pipeline.runtime.local_runner import ordered_local

    opts, committer = ctx.opts, ctx.committer
    progress = Progress(total_bytes, enabled=opts.progress)
    window = max_inflight(opts.shard_bytes, opts.memory_budget, ctx.workers)
    try:
        # An explicit start skips the test-only fault injection, which targets Ray workers.
        for unit, result in ordered_local(
            lambda u: scan_unit(u, start=u.start), units, ctx.workers, window
        ):
            if isinstance(result, Exception):
                result = failed_shard(unit, committer, local_failure_reason(unit, result))
            committer.apply(result)
            if on_result is not None:
                on_result(result)
            progress.update(unit.bound - unit.start, result.records.num_rows)
    finally:
        progress.close()
