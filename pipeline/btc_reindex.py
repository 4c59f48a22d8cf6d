"""The Bitcoin reindex coordinator: plan shards, run them on Ray, commit results in order.

Memory stays bounded: at most ``max_inflight`` shard results exist at once; a result is
committed and dropped before the next shard is submitted.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rechain.pipeline import metrics
from rechain.pipeline.btc_committer import STAGE, BtcCommitter, remove_unreferenced_segments
from rechain.pipeline.btc_core_index import CoreIndexGuide, guided_units
from rechain.pipeline.btc_faults import failed_shard, failure_reason, local_failure_reason
from rechain.pipeline.btc_plan import (
    DEFAULT_SHARD_BYTES,
    FINGERPRINT_BYTES,
    check_network,
    cut_shards,
    find_blk_files,
    read_xor_key,
)
from rechain.pipeline.errors import RechainError
from rechain.pipeline.progress import Progress
from rechain.pipeline.store import DataDir
from rechain.schemas import rocksdb as layout
from rechain.workers.btc_scan import ShardResult, WorkUnit, scan_unit

log = logging.getLogger(__name__)


@dataclass
class ReindexOptions:
    blocks: Path
    data: Path
    network: str = "main"
    workers: int = 0
    ray_address: str | None = None
    memory_budget: int = 1 << 30
    shard_bytes: int = DEFAULT_SHARD_BYTES
    progress: bool = True
    check_bodies: bool = False
    root_hash: str | None = None
    #: "headers" (block index only) or "full" (every transaction, UTXO set; see btc_full).
    mode: str = "headers"
    #: A Bitcoin Core ``blocks/index`` whose record positions guide the scan.
    core_index: Path | None = None


def _max_inflight(opts: ReindexOptions, workers: int) -> int:
    """Back-pressure: enough shards to keep every worker busy, within the memory budget."""
    # A shard's Arrow result is at most ~1/4 of its bytes for the densest (tiny) blocks.
    per_shard = max(opts.shard_bytes // 4, 1 << 20)
    by_budget = max(opts.memory_budget // 2 // per_shard, 1)
    return max(1, min(2 * workers, by_budget))


def run(opts: ReindexOptions) -> dict[str, Any]:
    t_start = time.perf_counter()
    files = find_blk_files(opts.blocks)
    key = read_xor_key(opts.blocks)
    check_network(files, opts.network, key)
    workers = opts.workers or os.cpu_count() or 1
    with DataDir(opts.data) as data:
        stored = data.meta_get(layout.META_BTC_NETWORK)
        if stored is not None and stored != opts.network:
            raise RechainError(
                f"{opts.data} holds a {stored} index; this run asked for --network {opts.network}"
            )
        data.write({layout.CF_META: [(layout.META_BTC_NETWORK, opts.network)]})
        committer = BtcCommitter(data, opts.network, root_hash=opts.root_hash)
        committer.forget_missing_files({f.file_no for f in files})
        remove_unreferenced_segments(data)
        guide = CoreIndexGuide.load(opts.core_index, files, workers) if opts.core_index else None
        committer.keep_positions = guide is not None
        units: list[WorkUnit] = []
        for f in files:
            try:
                with open(f.path, "rb") as fh:
                    head = fh.read(FINGERPRINT_BYTES)
            except OSError as e:
                raise RechainError(f"{f.path}: cannot read: {e.strerror}") from e
            start = committer.resume_position(f, head)
            if start >= f.size:
                continue
            committer.begin_file(f, start, head)
            hints = guide.hints.get(f.file_no) if guide else None
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
                        key,
                        opts.check_bodies,
                        len(units),
                    )
                )
                continue
            units.extend(
                cut_shards(
                    f, start, opts.shard_bytes, opts.network, key, opts.check_bodies, len(units)
                )
            )
        committer.keep_records_if_fresh()
        total_bytes = sum(u.bound - u.start for u in units)
        metrics.SHARDS_TOTAL.labels(STAGE).set(len(units))
        ray_start = 0.0
        t_scan = time.perf_counter()
        if units and guide is not None and guide.hints and not opts.ray_address:
            # Guided by an index the scan is a few seconds of Rust: threads here beat Ray.
            _execute_local(units, committer, opts, workers, total_bytes, guide.collect)
        elif units:
            ray_start = _execute(
                units, committer, opts, workers, total_bytes, guide.collect if guide else None
            )
        scan_s = time.perf_counter() - t_scan - ray_start
        dirty = bool(data.meta_get(layout.META_BTC_DIRTY))
        summary = data.meta_get(layout.META_BTC_SUMMARY)
        if dirty or summary is None:
            summary = committer.link_and_publish()
            for step, secs in committer.stats.link.items():
                metrics.LINK_SECONDS.labels(STAGE, step).set(secs)
        if summary["records"] == 0 and any(f.size > 0 for f in files):
            raise RechainError(
                f"no {opts.network} block records found in {len(files)} blk file(s) under "
                f"{opts.blocks}: wrong --network or XOR key (xor.dat)?"
            )
        full: dict[str, Any] | None = None
        if opts.mode == "full":
            from rechain.pipeline.btc_full import run_full

            full = run_full(
                data,
                committer,
                network=opts.network,
                key=key,
                paths={f.file_no: str(f.path) for f in files},
                workers=workers,
                budget=opts.memory_budget,
                progress=opts.progress,
                ray_address=opts.ray_address,
            )
            summary = data.meta_get(layout.META_BTC_SUMMARY)
        s = committer.stats
        report = {
            "files": len(files),
            "shards": s.shards,
            "rescans": s.rescans,
            "records_scanned": s.records,
            "file_bytes": sum(f.size for f in files),
            "bytes_planned": total_bytes,
            "bytes_read": s.bytes_read,
            "ray_start_s": ray_start,
            "scan_s": scan_s,
            "worker_decode_s": s.decode_seconds,
            "commit_s": s.commit_seconds,
            **s.link,
            "total_s": time.perf_counter() - t_start,
            "workers": workers,
            "mode": opts.mode,
        }
        if full is not None:
            report.update({f"full_{k}" if k in report else k: v for k, v in full["run"].items()})
        if guide is not None:
            report["core_index"] = guide.report(data, committer.linked_positions)
        data.write({layout.CF_META: [(layout.META_BTC_RUN, report)]})
        data.write_report(
            "btc_reindex",
            {
                **report,
                "tip_hash": summary["tip_hash"],
                "tip_height": summary["tip_height"],
                "skipped": len(committer.skipped()),
            },
        )
        result = {**summary, "run": report}
        if full is not None:
            result["full"] = {k: v for k, v in full.items() if k != "run"}
        return result


def _execute(
    units: list[WorkUnit],
    committer: BtcCommitter,
    opts: ReindexOptions,
    workers: int,
    total_bytes: int,
    on_result: Callable[[ShardResult], None] | None = None,
) -> float:
    import ray
    from rechain.pipeline.ray_runtime import ensure_ray, ordered_results

    ray_start = ensure_ray(opts.ray_address, workers)
    remote_scan = ray.remote(num_cpus=1, max_retries=3)(scan_unit)
    progress = Progress(total_bytes, enabled=opts.progress)
    try:
        for unit, result in ordered_results(
            remote_scan, units, _max_inflight(opts, workers), STAGE
        ):
            if isinstance(result, ray.exceptions.RayError):
                # Ray has retried lost workers already; see btc_faults for what is skipped.
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
    committer: BtcCommitter,
    opts: ReindexOptions,
    workers: int,
    total_bytes: int,
    on_result: Callable[[ShardResult], None],
) -> None:
    """As :func:`_execute`, on threads of this process (the Rust scan releases the GIL)."""
    from rechain.pipeline.local_runner import ordered_local

    progress = Progress(total_bytes, enabled=opts.progress)
    try:
        # An explicit start skips the test-only fault injection, which targets Ray workers.
        for unit, result in ordered_local(
            lambda u: scan_unit(u, start=u.start), units, workers, _max_inflight(opts, workers)
        ):
            if isinstance(result, Exception):
                result = failed_shard(unit, committer, local_failure_reason(unit, result))
            committer.apply(result)
            on_result(result)
            progress.update(unit.bound - unit.start, result.records.num_rows)
    finally:
        progress.close()
