"""The Ethereum import task: one unit (an era1 or Ere file, or a range of a geth freezer) read,
checked and converted by the Rust core (``eth::import``), its five tables encoded as Parquet.

Pure and stateless like the Bitcoin body task, so Ray may retry it anywhere. The tables are
written under temporary names into the tables' folders when the worker shares the
coordinator's file system, else returned as bytes; the committer makes them durable, renames
them and records the unit (``pipeline/ethereum/stages/blocks.py``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rechain.schemas import tables
from rechain.workers import _native
from rechain.workers.memory import release_unused_memory


@dataclass(frozen=True)
class EthUnit:
    """One unit of work; ``seq`` orders commits (block order)."""

    seq: int
    #: "era1", "ere" or "freezer".
    kind: str
    path: str
    #: Freezer blocks ``first..end`` (an era1 file is read whole).
    first: int
    end: int
    #: The unit's key in the import's records (archives: the file name; freezer: its first
    #: block).
    key: str
    network: str
    pow: bool
    from_block: int
    to_block: int
    #: Threads the unit's proof-of-work checks run on (more than one when there are fewer
    #: units than cores).
    pow_threads: int = 1

    @property
    def part(self) -> str:
        """Name of the unit's Parquet part in every table (unique per unit key)."""
        return self.key.removesuffix(".era1").removesuffix(".ere")


@dataclass
class EthStaged:
    """A unit's result: per table the temp file the worker wrote (synced; the committer
    renames it) or the file's bytes; the Rust core's info (violations, first and last headers,
    counts, and the index entries as key-sorted Arrow arrays per column family)."""

    unit: EthUnit
    tables: dict[str, str | bytes]
    info: dict[str, Any]
    rows: dict[str, int]
    seconds: float
    #: Set when the source could not be opened at all (no tables then).
    error: str | None = None


def tmp_name(part: str) -> str:
    """The file name a table part is written under before the committer renames it to
    ``{part}.parquet``; a retried task overwrites its own."""
    return f".{part}.parquet.tmp"


def write_part(batch: pa.RecordBatch, where: str | None, table: str) -> str | bytes:
    """Encodes one table's part as Parquet, in the table's declared layout: into the file
    ``where``, or as bytes."""
    t = tables.TABLES[table]
    args = t.pyarrow_options()
    data = pa.Table.from_batches([batch], schema=t.schema)
    if where is None:
        sink = pa.BufferOutputStream()
        pq.write_table(data, sink, **args)
        return bytes(sink.getvalue().to_pybytes())
    pq.write_table(data, where, **args)
    # Durable before the committer renames it (the fsync runs here, in parallel with others).
    fd = os.open(where, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return where


def import_unit(
    unit: EthUnit, table_dirs: dict[str, str] | None, release_memory: bool = True
) -> EthStaged:
    """Runs one unit. ``table_dirs``: the folder of each table's current generation, when the
    worker can write there; None to return the parts' bytes. ``release_memory``: give freed
    memory back to the OS after the unit (a Ray worker, which lives on between tasks); threads
    of the coordinator pass False and the stage releases once at its end (a full collection
    and ``malloc_trim`` per unit cost more than the unit's own work on small units, and the
    pages trimmed are faulted straight back in by the next unit)."""
    t0 = time.perf_counter()
    try:
        batches, info = _native.eth_import_unit(
            unit.kind,
            unit.path,
            unit.first,
            unit.end,
            unit.network,
            unit.pow,
            unit.from_block,
            unit.to_block,
            unit.pow_threads,
        )
    except ValueError as e:  # the source cannot be opened at all
        return EthStaged(unit, {}, {}, {}, time.perf_counter() - t0, error=str(e))
    staged: dict[str, str | bytes] = {}
    rows: dict[str, int] = {}
    for name, batch in batches.items():
        rows[name] = batch.num_rows
        if batch.num_rows == 0 and name != tables.ETH_BLOCKS.name:
            continue  # no part for no rows (headers-only history has four empty tables)
        where = None if table_dirs is None else os.path.join(table_dirs[name], tmp_name(unit.part))
        staged[name] = write_part(batch, where, name)
    del batches
    if release_memory:
        release_unused_memory(collect=False)  # the batches form no cycles
    return EthStaged(unit, staged, info.as_dict(), rows, time.perf_counter() - t0)
