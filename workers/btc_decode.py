"""The Bitcoin body task of ``--mode full``: decode the block records at known offsets of one
blk file (located by the header pass) into the four staged body batches.

Pure and stateless like the scan task, so Ray may retry it anywhere; the Rust core reads,
de-obfuscates, checks and decodes, and hands back Arrow batches without per-row Python work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
from rechain.workers import _native


@dataclass(frozen=True)
class BodyUnit:
    """Block records of one blk file, by magic offset (ascending). ``seq`` orders commits."""

    seq: int
    path: str
    file_no: int
    offsets: tuple[int, ...]
    network: str
    xor_key: bytes

    @property
    def part(self) -> str:
        """Name of the staged part this unit writes (unique per file and first record)."""
        return f"{self.file_no:05d}-{self.offsets[0]:012d}-{len(self.offsets)}"


@dataclass
class BodyResult:
    unit: BodyUnit
    blocks: pa.RecordBatch
    transactions: pa.RecordBatch
    inputs: pa.RecordBatch
    outputs: pa.RecordBatch
    bytes_decoded: int
    seconds: float


def decode_unit(unit: BodyUnit) -> BodyResult:
    t0 = time.perf_counter()
    (blocks, txs, inputs, outputs), decoded = _native.decode_blk_bodies(
        unit.path, unit.file_no, list(unit.offsets), unit.network, unit.xor_key
    )
    return BodyResult(unit, blocks, txs, inputs, outputs, decoded, time.perf_counter() - t0)
