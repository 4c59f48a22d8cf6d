"""The DuckDB session the ``publish`` and ``indexes`` stages read: the current headers
generation as a view, and the helpers they use to add views over body rows
(``staged_views``: staged verdicts with the rows of blocks decoded again) and the chain
state's resolved spends (``spends_view``), each over the parts the stage reads.

Memory: DuckDB's buffer pool gets its share of the budget (``duckdb`` in ``runtime/budget.py``;
it spills to DATADIR/tmp/duckdb beyond that); the rest is for what the coordinator holds beside
the pool.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
from rechain.pipeline.bitcoin import chain_parts
from rechain.pipeline.errors import RechainError
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.table_view import newest_generation
from rechain.schemas import bitcoin as ds

# DuckDB is imported when a session opens: a rerun that finds nothing new never loads it.
if TYPE_CHECKING:
    import duckdb

log = logging.getLogger(__name__)
#: DuckDB's memory limit never goes below this, whatever the budget (its fixed working set:
#: a query's operators, Parquet readers and writers, the small per-slice hash tables).
MIN_DUCKDB_BYTES = 48 << 20
#: Beside DuckDB's buffer pool (its share of the budget) the coordinator holds DuckDB's
#: allocations outside its pool (measured ~90 MiB at 8,000 blocks, whatever the limit), Arrow
#: batches streamed into the SST writer, RocksDB's and the interpreter's growth over the heap
#: left by the body pass.
PARTITION_FLUSH_ROWS = 16_384
#: DuckDB's allocator gives freed memory back past this fraction of its memory limit.
ALLOCATOR_FLUSH_SHARE = 8


@contextlib.contextmanager
def duckdb_memory_errors(data: DataDir, budget: int) -> Iterator[None]:
    """DuckDB running out of its share of the budget, as the user's error."""
    import duckdb

    try:
        yield
    except (duckdb.OutOfMemoryException, OSError) as e:
        # A query streamed through Arrow (UTXO set, tx index) reports it as an OSError.
        if not isinstance(e, duckdb.OutOfMemoryException) and "Out of Memory" not in str(e):
            raise
        raise RechainError(
            f"the full decode needs more memory than --memory-budget {budget >> 20}M gives "
            f"DuckDB (it spills to {data.path / 'tmp' / 'duckdb'} where it can): {e}"
        ) from e


def duckdb_bytes(budget: int) -> int:
    """DuckDB's memory_limit: its share of the budget."""
    return max(budget_share(budget, "bitcoin", "duckdb"), MIN_DUCKDB_BYTES)


def sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def hex_sql(blob: str) -> str:
    """SQL for the published lower-case hex of a staged byte column (DuckDB's hex() is upper)."""
    return f"lower(hex({blob}))"


#: Body tables (``ds.BODY_STAGED``) and the names of their views: ``sb`` (blocks), ``st``,
#: ``si``, ``so``.
STAGED_ALIASES = (("sb", "blocks"), ("st", "transactions"), ("si", "inputs"), ("so", "outputs"))


def connect(data: DataDir, budget: int, workers: int) -> duckdb.DuckDBPyConnection:
    """DuckDB over the current headers generation (``headers``). A stage adds the views of
    the staged parts and spends it reads: binding a view reads its files' footers, a cost
    that grows with the chain."""
    import duckdb

    spill = data.path / "tmp" / "duckdb"
    spill.mkdir(parents=True, exist_ok=True)
    # A database file rather than memory: its tables (the best chain's outputs and resolved
    # spends) are paged by DuckDB's buffer manager, so they may exceed the memory budget.
    db_file = spill / "chain.duckdb"
    for stale in (db_file, db_file.with_name(db_file.name + ".wal")):
        stale.unlink(missing_ok=True)
    con = duckdb.connect(str(db_file))
    con.execute(f"SET memory_limit='{duckdb_bytes(budget) // (1 << 20)}MB'")
    # DuckDB's allocator keeps what a task freed for reuse until it passes these thresholds
    # (128 and 512 MiB by default, more than a small budget gives it): past a slice of its
    # share, it hands the memory back.
    flush = duckdb_bytes(budget) // ALLOCATOR_FLUSH_SHARE
    con.execute(f"SET allocator_flush_threshold='{flush}B'")
    con.execute(f"SET allocator_bulk_deallocation_flush_threshold='{flush}B'")
    con.execute(f"SET temp_directory='{spill}'")
    con.execute(f"SET threads={max(workers, 1)}")
    con.execute("SET preserve_insertion_order=false")
    # Partitioned writes buffer this many rows per partition and thread before flushing; the
    # default (512k rows, with witness lists) alone exceeds a small budget.
    con.execute(f"SET partitioned_write_flush_threshold={PARTITION_FLUSH_ROWS}")
    gen = newest_generation(data.parquet_dir(ds.HEADERS))
    if gen is None:
        raise RechainError("the header pass published no headers table")
    con.execute(f"CREATE VIEW headers AS SELECT * FROM read_parquet('{gen}/*.parquet')")
    return con


def staged_views(
    con: duckdb.DuckDBPyConnection, files: dict[str, list[str]], suffix: str = ""
) -> None:
    """Views ``sb``, ``st``, ``si``, ``so`` (+ ``suffix``) over the given Parquet files of each
    body table (``ds.BODY_STAGED``; a table not given is empty): hashes as display hex, and
    ``{alias}_raw`` with them as the raw bytes the decoder gives."""
    for alias, table in STAGED_ALIASES:
        name = alias + suffix
        paths = files.get(table, [])
        if paths:
            source = f"read_parquet({sql_list(paths)})"
        else:
            empty = pa.Table.from_batches([ds.empty(ds.BODY_STAGED[table])])
            con.register(f"{name}_empty", empty)
            source = f"{name}_empty"
        con.execute(f"CREATE OR REPLACE VIEW {name}_raw AS SELECT * FROM {source}")
        hashes = ", ".join(
            f"{hex_sql(c)} AS {c}" for c in ds.staged_hash_columns(ds.BODY_STAGED[table])
        )
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * REPLACE ({hashes}) FROM {name}_raw")


def spends_view(con: duckdb.DuckDBPyConnection, name: str, files: list[str]) -> None:
    """View ``name`` over staged spends parts of the chain state (empty when none)."""
    if files:
        source = f"read_parquet({sql_list(files)})"
    else:
        con.register(f"{name}_empty", pa.Table.from_batches([chain_parts.empty_spends()]))
        source = f"{name}_empty"
    con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {source}")
