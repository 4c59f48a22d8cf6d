"""The Flow decode task: one LedgerWAL segment to an Arrow batch of records (Rust core)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rechain.workers import _native

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class SegmentUnit:
    seq: int
    segment: int
    path: str


@dataclass
class SegmentResult:
    unit: SegmentUnit
    records: pa.RecordBatch
    info: dict[str, Any]
    seconds: float


def decode_unit(unit: SegmentUnit) -> SegmentResult:
    t0 = time.perf_counter()
    batch, info = _native.flow_decode_segment(unit.path, unit.segment)
    return SegmentResult(unit, batch, info.as_dict(), time.perf_counter() - t0)
