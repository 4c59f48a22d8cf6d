"""Block copies cut into units by file and offset and decoded on the workers into staged body
parts (``body_parts``): the ``bodies`` stage decodes the copies it chose, the ``chain_state``
stage the best-chain copies it did not reach when it stopped at a failed block."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rechain.pipeline import metrics
from rechain.pipeline.bitcoin import body_parts
from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.errors import RechainError
from rechain.pipeline.progress import Progress
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.runtime.local_runner import ordered_local
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.table_view import newest_generation
from rechain.schemas import bitcoin as ds
from rechain.workers.btc_decode import BodyUnit, decode_and_stage_unit

log = logging.getLogger(__name__)


#: The metrics label of the full decode's work.
STAGE = "btc_full"


#: Block bytes per body unit: big enough to amortise a task, small enough to spread files.
UNIT_BYTES = 32 << 20


#: The smallest unit a small memory budget cuts units down to (see ``unit_bytes``).
MIN_UNIT_BYTES = 4 << 20


def unit_bytes(budget: int) -> int:
    """Block bytes per unit for a memory budget. A unit in flight is resident several times
    over in its worker (decoded columns, then Parquet pages being written to its staged files;
    results do not go through Ray's object store, see ``StagedBody``), and two units are in
    flight per worker."""
    return int(min(UNIT_BYTES, max(MIN_UNIT_BYTES, budget_share(budget, "bitcoin", "bodies.unit"))))


def plan_units(
    headers: pa.Table,
    done: pa.Table,
    paths: dict[int, str],
    network: str,
    key: bytes,
    unit_size: int = UNIT_BYTES,
    applied_tip: int = -1,
    applied: pa.Table | None = None,
) -> list[BodyUnit]:
    """Units for the chosen copies that have no staged verdict yet (``done``: the staged
    copies' file and offset), by file and offset, but for the best-chain copies the chain
    state checks: those above ``applied_tip``, and those it applied (``applied``: file and
    offset). A copy the chain state applied that a reorg moved off the best chain is decoded
    here: the off-chain rows and the tx index take it from a staged part."""
    ok = pc.and_(
        pc.equal(headers.column("copy_status"), "ok"),
        pc.not_equal(headers.column("status"), "invalid"),
    )
    best = headers.column("in_best_chain")
    ahead = pc.fill_null(pc.and_(best, pc.greater(headers.column("height"), applied_tip)), False)
    skip = ahead
    if applied is not None and applied.num_rows:
        keys = body_parts.copy_key(headers.column("file"), headers.column("offset"))
        done_there = body_parts.copy_key(applied.column("file"), applied.column("offset"))
        skip = pc.or_(skip, pc.and_(best, pc.is_in(keys, value_set=done_there)))
    chosen = headers.filter(pc.and_(ok, pc.invert(skip)))
    return _cut_todo(
        chosen.select(["file", "offset", "size"]), [done], paths, network, key, unit_size
    )


def _cut_todo(
    copies: pa.Table,
    done: list[pa.Table],
    paths: dict[int, str],
    network: str,
    key: bytes,
    unit_size: int,
) -> list[BodyUnit]:
    """Units for ``copies`` (file, offset, size) but those in ``done`` (tables of file and
    offset) and those of files gone."""
    todo = copies
    for d in done:
        todo = todo.join(
            d.select(["file", "offset"]), keys=["file", "offset"], join_type="left anti"
        )
    todo = todo.filter(pc.is_in(todo.column("file"), pa.array(list(paths), pa.uint32())))
    return cut_units(todo, paths, network, key, unit_size)


def stage_unreached(ctx: BtcRun, first: int) -> int:
    """Stages the verdicts (and txids) of the best-chain copies from height ``first`` up that
    have none: the blocks the chain state left to itself and did not reach, because it
    stopped at ``first``. Returns the copies decoded."""
    data = ctx.data
    gen = newest_generation(data.parquet_dir(ds.HEADERS))
    assert gen is not None
    import pyarrow.parquet as pq

    headers = pq.read_table(gen, columns=["file", "offset", "size", "height", "in_best_chain"])
    unreached = headers.filter(
        pc.and_(
            headers.column("in_best_chain"),
            pc.fill_null(pc.greater_equal(headers.column("height"), first), False),
        )
    ).select(["file", "offset", "size"])
    budget = ctx.opts.memory_budget
    staged = body_parts.staged_blocks(data, ["file", "offset"])
    units = _cut_todo(unreached, [staged], ctx.paths, ctx.opts.network, ctx.key, unit_bytes(budget))
    if not units:
        return 0
    run_on = ctx.executor
    run_on.start()
    got = decode_units(
        units, data, ctx.workers, budget, False, run_on.workers_share_data_folder, run_on.on_ray
    )
    ctx.add({"unreached_" + k: v for k, v in got.items()})
    return sum(len(u.offsets) for u in units)


def cut_units(
    todo: pa.Table,
    paths: dict[int, str],
    network: str,
    key: bytes,
    unit_size: int = UNIT_BYTES,
) -> list[BodyUnit]:
    """Units of the block records ``todo`` (``file``, ``offset``, ``size``; every file in
    ``paths``), in file and offset order, each within one file and of at most ``unit_size``
    block bytes (or one record)."""
    todo = todo.sort_by([("file", "ascending"), ("offset", "ascending")])
    if not todo.num_rows:
        return []
    files = todo.column("file").to_numpy()
    offsets = todo.column("offset").to_numpy()
    sizes = todo.column("size").to_numpy().astype(np.int64)
    # Cut where the file changes or a unit's byte budget fills up (vectorised, no row loop).
    file_start = np.r_[True, files[1:] != files[:-1]]
    cum = np.cumsum(sizes)
    group_base = np.maximum.accumulate(np.where(file_start, cum - sizes, 0))
    bucket = (cum - group_base - 1) // unit_size
    cuts = np.flatnonzero(file_start | np.r_[True, bucket[1:] != bucket[:-1]])
    units = []
    for seq, (lo, hi) in enumerate(zip(cuts, list(cuts[1:]) + [len(files)], strict=True)):
        file_no = int(files[lo])
        units.append(
            BodyUnit(
                seq=seq,
                path=paths[file_no],
                file_no=file_no,
                offsets=tuple(int(o) for o in offsets[lo:hi]),
                network=network,
                xor_key=key,
                block_bytes=int(sizes[lo:hi].sum()),
            )
        )
    return units


def decode_units(
    units: list[BodyUnit],
    data: DataDir,
    workers: int,
    budget: int,
    progress: bool,
    shared_folder: bool = True,
    on_ray: bool = True,
) -> dict[str, float]:
    """Runs the units on Ray (or this process's threads), committing each result (in
    submission order) as it arrives. ``shared_folder``: the workers can write into the data
    folder (threads, or a Ray this process started); otherwise they return their staged
    files' bytes."""

    in_flight = budget_share(budget, "bitcoin", "bodies.units")
    window = max(1, min(2 * workers, in_flight // (4 * unit_bytes(budget))))
    # Workers write each unit's staged files here under temporary names (see StagedBody).
    folder = body_parts.stage_dir(data)
    folder.mkdir(parents=True, exist_ok=True)
    target = str(folder) if shared_folder else None
    bar = Progress(len(units), enabled=progress, label="bodies", unit="blocks")
    stats = {"units": 0.0, "bytes_decoded": 0.0, "worker_decode_s": 0.0, "commit_s": 0.0}
    try:
        for unit, result in _results(units, window, target, workers, on_ray):
            if isinstance(result, Exception):
                raise RechainError(f"{Path(unit.path).name} at {unit.offsets[0]}: {result}")
            t0 = time.perf_counter()
            body_parts.commit_part(data, result)
            dt = time.perf_counter() - t0
            stats["units"] += 1
            stats["bytes_decoded"] += result.bytes_decoded
            stats["worker_decode_s"] += result.seconds
            stats["commit_s"] += dt
            metrics.SHARD_DECODE_SECONDS.labels(STAGE).observe(result.seconds)
            metrics.COMMIT_SECONDS.labels(STAGE).observe(dt)
            metrics.RECORDS.labels(STAGE).inc(result.transactions)
            metrics.BYTES_READ.labels(STAGE).inc(result.bytes_decoded)
            bar.update(1, result.blocks)
    finally:
        bar.close()
    return stats


def _results(
    units: list[BodyUnit], window: int, target: str | None, workers: int, on_ray: bool
) -> Iterator[tuple[BodyUnit, Any]]:
    """(unit, staged result or the exception that failed it), in unit order."""
    if on_ray:
        from rechain.pipeline.runtime.ray_cluster import ordered_results

        return ordered_results(decode_and_stage_unit, units, window, STAGE, target)
    return ordered_local(lambda u: decode_and_stage_unit(u, target), units, workers, window)
