"""The Bitcoin body task of ``--mode full``: decode the block records at known offsets of one
blk file (located by the header pass) and stage what later stages read of them.

A unit stages two batches (``decode_and_stage_unit``): each copy's verdict row
(``body_blocks``: hash, place, sizes, validity and reject reason, counts) and each transaction's
txid, block and position (``body_txids``, for the tx index). Nothing else is staged: the body
pass decodes the copies off the best chain (the chain state reads and checks the best chain's
blocks itself and writes their rows once), and the rows of those few blocks are decoded
again, in full, when they are published (``decode_unit``: every transaction, input and
output).

Pure and stateless like the scan task, so Ray may retry it anywhere; the Rust core reads,
de-obfuscates, checks and decodes, and hands back Arrow batches without per-row Python work.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from rechain.schemas import tables
from rechain.workers import _native
from rechain.workers.memory import release_unused_memory

#: The datasets a unit stages (``ds.BODY_SLIM``'s keys), declared with their layout in the
#: registry of tables.
STAGED = {"blocks": tables.BODY_BLOCKS, "txids": tables.BODY_TXIDS}


@dataclass(frozen=True)
class BodyUnit:
    """Block records of one blk file, by magic offset (ascending). ``seq`` orders commits."""

    seq: int
    path: str
    file_no: int
    offsets: tuple[int, ...]
    network: str
    xor_key: bytes
    #: The records' bytes as the block index gives them (for planning; 0 when unknown).
    block_bytes: int = 0

    @property
    def part(self) -> str:
        """Name of the staged part this unit writes (unique per file and first record)."""
        return f"{self.file_no:05d}-{self.offsets[0]:012d}-{len(self.offsets)}"


@dataclass
class BodyResult:
    """A unit decoded in full: the four ``ds.BODY_STAGED`` batches."""

    unit: BodyUnit
    blocks: pa.RecordBatch
    transactions: pa.RecordBatch
    inputs: pa.RecordBatch
    outputs: pa.RecordBatch
    bytes_decoded: int
    seconds: float


def decode_unit(unit: BodyUnit) -> BodyResult:
    """Every row of the unit's blocks (transactions, inputs, outputs): what the publish stage
    needs of blocks off the best chain, and the benchmark's decode-only rate."""
    t0 = time.perf_counter()
    (blocks, txs, inputs, outputs), decoded = _native.decode_blk_bodies(
        unit.path, unit.file_no, list(unit.offsets), unit.network, unit.xor_key
    )
    return BodyResult(unit, blocks, txs, inputs, outputs, decoded, time.perf_counter() - t0)


def decode_verdicts(unit: BodyUnit) -> tuple[dict[str, pa.RecordBatch], int]:
    """The unit's staged batches (``ds.BODY_SLIM``: verdict rows and txids) and the bytes
    decoded. The blocks are checked exactly as ``decode_unit`` checks them; only the rows
    nothing reads from the stage are not built."""
    (blocks, txids), decoded = _native.decode_blk_verdicts(
        unit.path, unit.file_no, list(unit.offsets), unit.network, unit.xor_key
    )
    return {"blocks": blocks, "txids": txids}, decoded


@dataclass
class StagedBody:
    """A unit's staged tables (``ds.BODY_SLIM``), encoded as Parquet by the worker (so
    encoding runs in parallel), per table either the path of the file the worker wrote under
    a temporary name in the stage folder (``tmp_name``; not yet durable: the committer fsyncs,
    renames and registers it), or, for a worker that cannot reach the data folder (a
    cluster's other nodes), the file's bytes. Files keep the rows out of Ray's object store,
    where each unit would stay resident, counted in the worker and in the coordinator that
    maps it (issue #7)."""

    unit: BodyUnit
    tables: dict[str, str | bytes]
    blocks: int
    transactions: int
    bytes_decoded: int
    seconds: float


def tmp_name(part: str, table: str) -> str:
    """The file name a unit's staged table is written under before the committer renames it
    to ``{part}.{table}.parquet``; a retried task overwrites its own. Files the next run finds
    unregistered (a killed run's) are deleted by the committer."""
    return f".{part}.{table}.parquet.tmp"


def decode_and_stage_unit(unit: BodyUnit, stage_dir: str | None) -> StagedBody:
    """Decodes a unit's verdicts and txids and encodes them as its staged tables: into files
    in ``stage_dir`` when the worker shares the coordinator's file system, else as bytes
    returned through Ray."""
    t0 = time.perf_counter()
    batches, decoded = decode_verdicts(unit)
    staged_tables: dict[str, str | bytes] = {}
    for name, batch in batches.items():
        table = pa.Table.from_batches([batch])
        options = STAGED[name].pyarrow_options()
        if stage_dir is None:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, **options)
            staged_tables[name] = sink.getvalue().to_pybytes()
        else:
            path = os.path.join(stage_dir, tmp_name(unit.part, name))
            pq.write_table(table, path, **options)
            staged_tables[name] = path
    staged = StagedBody(
        unit=unit,
        tables=staged_tables,
        blocks=batches["blocks"].num_rows,
        transactions=batches["txids"].num_rows,
        bytes_decoded=decoded,
        seconds=time.perf_counter() - t0,
    )
    del batches, batch, table
    # The decoded columns are garbage now: a worker that keeps their pages holds several times
    # a unit's bytes between tasks, on top of the budget's units in flight (issue #7). They
    # form no cycles, so no collection (a full one costs a tenth of a unit's time).
    release_unused_memory(collect=False)
    return staged
