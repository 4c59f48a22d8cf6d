"""The ``spent`` flags of published ``outputs`` segments: the best-chain spends partitioned by
the segment whose outputs they spend, and each segment copied with that column set (in Rust,
which copies every other column's encoded pages as they are, ``respend_outputs``). A spend
names its output by height and row among that block's outputs, so a copy reads only the
segment's heights, never its txids.

In the coordinator, DuckDB streams the spends sorted by the height of the output they spend
(spilling what its budget cannot hold); each segment's rows are cut from the stream as it
passes them and its copy runs on a thread while the stream goes on. On Ray (where the chain
state ran on Ray), the same work is a shuffle through the object store: a *split* task per
run of spends files sorts its rows into groups of consecutive segments, and a *copy* task per
group takes that group's rows from every split and copies its segments, into the data folder
when the workers share it, else handed each segment's source as bytes and returning the
copy's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rechain.pipeline.bitcoin import chain_parts
from rechain.pipeline.errors import RechainError
from rechain.pipeline.progress import Progress
from rechain.pipeline.runtime.local_runner import ordered_local
from rechain.workers import _native

if TYPE_CHECKING:
    import duckdb

#: The metrics label of the copies run as Ray tasks.
STAGE = "btc_publish"
#: The spends' columns a copy reads: the spent output's height and row among its block's
#: outputs, which is all it takes to find its row in a segment.
COLUMNS = ["prev_height", "prev_row"]
#: Rows per batch of the sorted stream of spends.
STREAM_ROWS = 1 << 16
#: At most this many split tasks and groups (their product is the objects of a shuffle).
MAX_TASKS = 64


@dataclass(frozen=True)
class Segment:
    """An ``outputs`` segment of heights ``first`` to ``last`` to copy from ``src``
    (published, or staged by the chain state with every flag false) to ``dest`` with its
    flags from the spends of its outputs: all of them, or (``keep_old``) new ones only, which
    can only add flags."""

    first: int
    last: int
    src: str
    dest: str
    keep_old: bool


def copy_segments(
    segments: list[Segment],
    con: duckdb.DuckDBPyConnection,
    spends: str,
    spend_files: list[str],
    threads: int,
    budget: int,
    on_ray: bool = False,
    shared: bool = True,
    progress: Progress | None = None,
) -> None:
    """Copies ``segments`` (disjoint) with their flags from the best-chain spends (DuckDB view
    ``spends`` over ``spend_files``): in this process, or as Ray tasks, writing into the data
    folder (``shared``) or handing back bytes."""
    segments = sorted(segments, key=lambda s: s.first)
    if not segments:
        return
    if on_ray:
        _copy_on_ray(segments, spend_files, threads, budget, shared)
        return
    units = _by_segment(con, segments, spends)
    for (segment, _), result in ordered_local(_copy_unit, units, threads, max(1, threads)):
        if isinstance(result, Exception):
            raise result
        if progress is not None:
            blocks = segment.last - segment.first + 1
            progress.update(blocks, blocks)


def _by_segment(
    con: duckdb.DuckDBPyConnection, segments: list[Segment], spends: str
) -> Iterator[tuple[Segment, pa.Table | None]]:
    """Each segment (sorted, disjoint) with the spends (view ``spends``) of its outputs, from
    one pass sorted by the spent outputs' heights: a segment's rows are complete once the
    stream has passed its last height, so only they are held."""
    firsts = np.array([s.first for s in segments], np.int64)
    lasts = np.array([s.last for s in segments], np.int64)
    reader = con.sql(
        f"""SELECT {", ".join(COLUMNS)} FROM {spends}
        WHERE prev_height BETWEEN {segments[0].first} AND {segments[-1].last}
        ORDER BY prev_height"""
    ).to_arrow_reader(STREAM_ROWS)
    at, held = 0, list[pa.RecordBatch]()
    for batch in reader:
        heights = batch.column(0).to_numpy()
        seg = np.searchsorted(firsts, heights, side="right") - 1
        inside = heights <= lasts[seg]
        # Sorted, so each segment's rows are one run of the batch.
        keys, starts = np.unique(seg, return_index=True)
        for k, lo, hi in zip(keys, starts, [*starts[1:], len(seg)], strict=True):
            while at < k:
                yield segments[at], _table(held)
                at, held = at + 1, []
            rows = batch.slice(lo, hi - lo).filter(pa.array(inside[lo:hi]))
            if rows.num_rows:
                held.append(rows)
    while at < len(segments):
        yield segments[at], _table(held)
        at, held = at + 1, []


def _table(batches: list[pa.RecordBatch]) -> pa.Table | None:
    return pa.Table.from_batches(batches) if batches else None


def _copy_unit(unit: tuple[Segment, pa.Table | None]) -> int:
    return respend(*unit)


def respend(seg: Segment, spends: pa.Table | None) -> int:
    """Copies one segment with its flags from ``spends`` (``COLUMNS``; None: none). Returns
    the rows."""
    if spends is None:
        spends = pa.Table.from_batches([chain_parts.empty_spends()]).select(COLUMNS)
    Path(seg.dest).parent.mkdir(parents=True, exist_ok=True)
    rows: int = _native.respend_outputs(
        seg.src,
        seg.dest,
        *(spends.column(c).combine_chunks() for c in COLUMNS),
        seg.keep_old,
    )
    return rows


def _copy_on_ray(
    segments: list[Segment], spend_files: list[str], workers: int, budget: int, shared: bool
) -> None:
    import ray
    from rechain.pipeline.runtime.ray_cluster import ordered_results, record_nodes, spread_tasks

    cpus = int(ray.cluster_resources().get("CPU", 1))
    spend_bytes = sum(os.path.getsize(f) for f in spend_files)
    # A group's spends are held by its copy task a few times over (read, then taken apart).
    n_groups = min(
        len(segments), max(min(2 * cpus, MAX_TASKS), -(-4 * spend_bytes // max(budget, 1)))
    )
    groups = np.array_split(np.arange(len(segments)), n_groups)
    firsts = np.array([s.first for s in segments], np.int64)
    lasts = np.array([s.last for s in segments], np.int64)
    group_of = np.zeros(len(segments), np.int32)
    for g, members in enumerate(groups):
        group_of[members] = g
    runs = [r for r in np.array_split(np.array(spend_files), min(2 * cpus, MAX_TASKS)) if len(r)]
    splits = spread_tasks(
        split_spends,
        [(tuple(str(f) for f in r), firsts, lasts, group_of, n_groups) for r in runs],
        n_groups,
    )

    def units() -> Any:
        for g, members in enumerate(groups):
            group = [segments[i] for i in members]
            sources = None if shared else [Path(s.src).read_bytes() for s in group]
            yield group, [int(i) for i in members], sources, [split[g] for split in splits]

    window = max(2, 2 * workers)
    for (group, _, _, _), result in ordered_results(_copy_group, units(), window, STAGE):
        if isinstance(result, Exception):
            raise RechainError(f"publish: outputs copies failed: {result}")
        for seg, content in zip(group, result, strict=True):
            if content is not None:
                Path(seg.dest).parent.mkdir(parents=True, exist_ok=True)
                Path(seg.dest).write_bytes(content)
    record_nodes(splits)


def split_spends(
    files: tuple[str, ...],
    firsts: np.ndarray,
    lasts: np.ndarray,
    group_of: np.ndarray,
    n_groups: int,
) -> list[pa.Table]:
    """The spends of ``files`` into outputs of the segments (``firsts``/``lasts``, sorted and
    disjoint), one table per group (``group_of`` each segment), each row with its segment's
    index (``segment``); spends into no segment are dropped."""
    table = pa.concat_tables([pq.read_table(f, columns=COLUMNS) for f in files])
    heights = table.column("prev_height").to_numpy()
    seg = np.searchsorted(firsts, heights, side="right") - 1
    inside = (seg >= 0) & (heights <= lasts[np.maximum(seg, 0)])
    table = table.filter(pa.array(inside)).append_column("segment", pa.array(seg[inside]))
    group = group_of[seg[inside]]
    order = np.argsort(group, kind="stable")
    table = table.take(pa.array(order))
    bounds = np.searchsorted(group[order], np.arange(n_groups + 1))
    return [table.slice(lo, hi - lo) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def _copy_group(
    unit: tuple[list[Segment], list[int], list[bytes] | None, list[Any]],
) -> list[bytes | None]:
    """One group's copies (the segments and their indexes) from its rows of every split
    (references): written in place, or, given the sources' bytes, returned as bytes."""
    import ray

    group, indexes, sources, refs = unit
    parts = [t for t in ray.get(refs) if t.num_rows]
    table = pa.concat_tables(parts) if parts else None
    by_segment: dict[int, pa.Table] = {}
    if table is not None:
        table = table.sort_by("segment")
        segs = table.column("segment").to_numpy()
        keys, starts = np.unique(segs, return_index=True)
        ends = [*starts[1:], len(segs)]
        for k, lo, hi in zip(keys, starts, ends, strict=True):
            by_segment[int(k)] = table.slice(lo, hi - lo)
    out: list[bytes | None] = []
    with tempfile.TemporaryDirectory(prefix="rechain-respend-") as scratch:
        for i, seg in enumerate(group):
            spends = by_segment.get(indexes[i])
            if sources is None:
                respend(seg, spends)
                out.append(None)
                continue
            src, dest = os.path.join(scratch, "src"), os.path.join(scratch, "dest")
            Path(src).write_bytes(sources[i])
            respend(Segment(seg.first, seg.last, src, dest, seg.keep_old), spends)
            out.append(Path(dest).read_bytes())
    return out
