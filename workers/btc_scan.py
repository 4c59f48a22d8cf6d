"""The Bitcoin scan task: one work unit (a byte range of one blk file) to Arrow batches.

Pure and stateless, so Ray may retry it on any node. All byte work happens in the Rust core;
this function only forwards arguments and times the call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from rechain.workers import _native
from rechain.workers.fault_injection import maybe_inject


@dataclass(frozen=True)
class WorkUnit:
    """A shard: record starts in ``[start, bound)`` of one blk file. ``seq`` orders commits."""

    seq: int
    path: str
    file_no: int
    start: int
    bound: int
    network: str
    xor_key: bytes
    check_bodies: bool = False
    #: Record starts another index claims in this range (``btc_core_index.FileHints``): the
    #: scan checks each against the bytes and reports disagreements in ``info["hints"]``.
    hint_offsets: bytes = b""
    hint_hashes: bytes = b""


@dataclass
class ShardResult:
    unit: WorkUnit
    records: pa.RecordBatch
    events: pa.RecordBatch
    info: dict[str, Any]
    seconds: float


def scan_unit(unit: WorkUnit, start: int | None = None) -> ShardResult:
    """Scans the unit (or, for a stitching rescan, the unit from ``start``)."""
    if start is None:
        maybe_inject(unit.seq)
    t0 = time.perf_counter()
    args = (
        unit.path,
        unit.file_no,
        unit.start if start is None else start,
        unit.bound,
        unit.network,
        unit.xor_key,
        unit.check_bodies,
    )
    if unit.hint_offsets:
        records, events, info, hints = _native.scan_blk_guided(
            *args, unit.hint_offsets, unit.hint_hashes
        )
        return ShardResult(
            unit,
            records,
            events,
            {**info.as_dict(), "hints": hints.as_dict()},
            time.perf_counter() - t0,
        )
    records, events, info = _native.scan_blk(*args)
    return ShardResult(unit, records, events, info.as_dict(), time.perf_counter() - t0)
