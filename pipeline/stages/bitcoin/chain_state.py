"""Stage ``chain_state``: every best-chain spend resolved, and the consensus rules checked.

Set-based in DuckDB (spilling to disk under the memory budget): BIP34 coinbase heights, every
spend resolved against earlier best-chain outputs (missing, double spends, immature coinbase,
inputs below outputs), coinbase amount. Spends are resolved in slices by txid (``Slices``)
sized to DuckDB's share of the budget, so no join spans the whole chain. The lowest failing
block is marked invalid (descendants follow it) and the link stage invalidated, as Core would
switch to the best valid chain.

Its result is a DuckDB session (``BtcRun.con``, ``BtcRun.slices``) that the publish and
indexes stages read in the same process: the stage is ephemeral. Memory: DuckDB's buffer pool
gets ``DUCKDB_BUDGET_SHARE`` of the budget (it spills to DATADIR/tmp/duckdb beyond that); the
other half is for what the coordinator holds beside the pool.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from rechain.pipeline import btc_bodies
from rechain.pipeline.errors import RechainError
from rechain.pipeline.query import current_generation
from rechain.pipeline.ray_runtime import release_ray
from rechain.pipeline.stages.bitcoin import BtcRun
from rechain.pipeline.stages.bitcoin.bodies import BodiesStage
from rechain.pipeline.stages.engine import Done, Invalidate, Stage
from rechain.pipeline.store import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.memory import release_unused_memory

log = logging.getLogger(__name__)
#: DuckDB's memory limit never goes below this, whatever the budget (its fixed working set:
#: a query's operators, Parquet readers and writers, the small per-slice hash tables).
MIN_DUCKDB_BYTES = 48 << 20
#: How the budget is split in the stages after the body pass. DuckDB's buffer pool takes this
#: share; the rest is what the coordinator holds beside it: DuckDB's allocations outside its
#: pool (measured ~90 MiB at 8,000 blocks, whatever the limit), Arrow batches streamed into
#: the SST writer, RocksDB's and the interpreter's growth over the heap left by the body pass.
DUCKDB_BUDGET_SHARE = 0.5
#: Bytes one best-chain output takes in a slice's join hash table (its 32-byte txid out of
#: line with the string header, vout, value, height, position, hash and row pointer).
JOIN_ROW_BYTES = 96
#: Spends are resolved in at most 2**this slices by txid (each slice's partitioned write keeps
#: a buffer and an open file).
MAX_SLICE_BITS = 6
#: Rows all slices' partition buffers hold together before flushing to their files.
SLICE_FLUSH_ROWS = 65_536
COINBASE_MATURITY = 100
PARTITION_FLUSH_ROWS = 16_384
#: Scripts longer than this (bytes) are unspendable (Core's MAX_SCRIPT_SIZE).
MAX_SCRIPT_SIZE = 10_000


class ChainStateStage(Stage[BtcRun]):
    name = "chain_state"
    ephemeral = True

    def output(self, ctx: BtcRun) -> Any:
        # A function of the staged bodies, the tree and the verdicts, all in the bodies token.
        return BodiesStage().output(ctx)

    def run(self, ctx: BtcRun) -> Done | Invalidate:
        ctx.close()
        # The body pass is done: its Ray cluster and freed buffers go before DuckDB takes its
        # share of the budget (a consensus failure that needs another decode restarts Ray).
        if release_ray():
            log.info("decode: stopped the embedded Ray cluster")
        release_unused_memory()
        data, budget = ctx.data, ctx.opts.memory_budget
        con = connect(data, budget, ctx.workers)
        work = data.path / "tmp" / "duckdb" / "slices"
        ctx.con = con
        with duckdb_memory_errors(data, budget):
            log.info("consensus: chain state")
            slices = build_chain_state(con, work, duckdb_bytes(budget))
            ctx.slices = slices
            log.info("consensus: %d slice(s) by txid; rules", slices.count)
            failure = first_consensus_failure(con, ctx.opts.network)
        ctx.full["rounds"] = ctx.full.get("rounds", 0.0) + 1
        if failure is not None:
            block_hash, height, reason = failure
            log.warning("block %s at height %d is invalid: %s", block_hash, height, reason)
            invalid = btc_bodies.invalid_blocks(data)
            invalid[block_hash] = reason
            data.write({layout.CF_META: [(layout.META_BTC_INVALID_BLOCKS, invalid)]})
            ctx.close()
            return Invalidate("link", f"block {block_hash} at height {height}: {reason}")
        best = con.execute("SELECT count(*), max(height) FROM best").fetchall()[0]
        return Done(rows=int(best[0]), height=None if best[1] is None else int(best[1]))


@contextlib.contextmanager
def duckdb_memory_errors(data: DataDir, budget: int) -> Iterator[None]:
    """DuckDB running out of its share of the budget, as the user's error."""
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
    """DuckDB's memory_limit: its share of the budget (``DUCKDB_BUDGET_SHARE``)."""
    return int(max(budget * DUCKDB_BUDGET_SHARE, MIN_DUCKDB_BYTES))


def slice_bits(outputs: int, memory_limit: int) -> int:
    """log2 of the slice count that keeps one slice's join hash table within a quarter of
    DuckDB's memory limit (the rest holds the probe side, the window over duplicates and the
    result being written)."""
    bits = 0
    while bits < MAX_SLICE_BITS and (outputs >> bits) * JOIN_ROW_BYTES > memory_limit // 4:
        bits += 1
    return bits


def sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def hex_sql(blob: str) -> str:
    """SQL for the published lower-case hex of a staged byte column (DuckDB's hex() is upper)."""
    return f"lower(hex({blob}))"


def connect(data: DataDir, budget: int, workers: int) -> duckdb.DuckDBPyConnection:
    """DuckDB over the current headers generation and the registered staged parts."""
    spill = data.path / "tmp" / "duckdb"
    spill.mkdir(parents=True, exist_ok=True)
    # A database file rather than memory: its tables (the best chain's outputs and resolved
    # spends) are paged by DuckDB's buffer manager, so they may exceed the memory budget.
    db_file = spill / "chain.duckdb"
    for stale in (db_file, db_file.with_name(db_file.name + ".wal")):
        stale.unlink(missing_ok=True)
    con = duckdb.connect(str(db_file))
    con.execute(f"SET memory_limit='{duckdb_bytes(budget) // (1 << 20)}MB'")
    con.execute(f"SET temp_directory='{spill}'")
    con.execute(f"SET threads={max(workers, 1)}")
    con.execute("SET preserve_insertion_order=false")
    # Partitioned writes buffer this many rows per partition and thread before flushing; the
    # default (512k rows, with witness lists) alone exceeds a small budget.
    con.execute(f"SET partitioned_write_flush_threshold={PARTITION_FLUSH_ROWS}")
    gen = current_generation(data.parquet_dir(ds.HEADERS))
    if gen is None:
        raise RechainError("the header pass published no headers table")
    con.execute(f"CREATE VIEW headers AS SELECT * FROM read_parquet('{gen}/*.parquet')")
    for alias, table in (
        ("sb", "blocks"),
        ("st", "transactions"),
        ("si", "inputs"),
        ("so", "outputs"),
    ):
        files = btc_bodies.part_files(data, table)
        if files:
            source = f"read_parquet({sql_list(files)})"
        else:
            empty = pa.Table.from_batches([ds.empty(ds.BODY_STAGED[table])])
            con.register(f"{alias}_empty", empty)
            source = f"{alias}_empty"
        # Staged hashes are raw bytes: the chain state joins them as such (``{alias}_raw``),
        # the published tables see them as display hex.
        con.execute(f"CREATE VIEW {alias}_raw AS SELECT * FROM {source}")
        hashes = ", ".join(
            f"{hex_sql(c)} AS {c}" for c in ds.staged_hash_columns(ds.BODY_STAGED[table])
        )
        con.execute(f"CREATE VIEW {alias} AS SELECT * REPLACE ({hashes}) FROM {alias}_raw")
    return con


@dataclass(frozen=True)
class Slices:
    """Best-chain outputs and spends (and, for the tx index, every transaction) partitioned
    by txid into ``2**bits`` Parquet slices under ``dir``. Slice k holds the txids whose
    internal first byte has k as its top ``bits`` bits, so a spend and the output it spends
    share a slice, and slices in order are txids in chainstate (internal byte) order: each
    slice is joined or sorted on its own, within a bounded memory, and the results appended
    in slice order are those of one query over everything."""

    dir: Path
    bits: int

    @property
    def count(self) -> int:
        return 1 << self.bits

    def bucket(self, txid: str) -> str:
        """SQL for the slice of a staged (display-order) txid: its last byte leads internally."""
        return f"(('0x' || hex({txid}[32:32]))::INTEGER >> {8 - self.bits})"

    def partition(self, con: duckdb.DuckDBPyConnection, name: str, sql: str) -> None:
        """Writes ``sql`` (with a ``bucket`` column) as slices of ``name``, and an empty
        table ``{name}_none`` of its columns for slices that got no rows."""
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {name}_none AS SELECT * EXCLUDE (bucket) "
            f"FROM ({sql}) WHERE false"
        )
        flush = max(1024, SLICE_FLUSH_ROWS >> self.bits)
        con.execute(f"SET partitioned_write_flush_threshold={flush}")
        try:
            con.execute(
                f"COPY ({sql}) TO '{self.dir / name}' (FORMAT PARQUET, "
                "PARTITION_BY (bucket), COMPRESSION SNAPPY, OVERWRITE_OR_IGNORE)"
            )
        finally:
            con.execute(f"SET partitioned_write_flush_threshold={PARTITION_FLUSH_ROWS}")

    def source(self, name: str, k: int) -> str:
        """SQL for slice k of ``name``."""
        files = sorted(str(f) for f in (self.dir / name / f"bucket={k}").glob("*.parquet"))
        return f"read_parquet({sql_list(files)})" if files else f"{name}_none"


def _spend_sql(slices: Slices, k: int) -> str:
    """Slice k's spends, each with the output it spends: the latest copy of its output id
    before it (``dup``: the slice's output ids created more than once, BIP30)."""
    return f"""
        SELECT {k}::UTINYINT AS bucket, i.height, i.pos, i.vin, i.prev_vout, bo.value,
               bo.height AS prev_height, bo.pos AS prev_pos
        FROM {slices.source("spends", k)} i
        LEFT JOIN dup d ON d.txid = i.prev_txid AND d.vout = i.prev_vout
        LEFT JOIN {slices.source("outputs", k)} bo
             ON bo.txid = i.prev_txid AND bo.vout = i.prev_vout
             AND (bo.height < i.height OR (bo.height = i.height AND bo.pos < i.pos))"""


def build_chain_state(
    con: duckdb.DuckDBPyConnection, work: Path, memory_limit: int, bits: int | None = None
) -> Slices:
    """Every best-chain spend resolved to its output (``res``, keyed by the spend's height,
    position and vin; ``bucket`` is its slice), the outputs spent twice (``spent_twice``) and
    each transaction's inputs (``tx_in``). Resolved slice by slice (``Slices``) so that no
    hash table spans the whole chain; ``bits`` overrides the slice count."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    con.execute(
        """CREATE OR REPLACE TABLE best AS
        SELECT hash, from_hex(hash) AS raw, height FROM headers WHERE in_best_chain"""
    )
    if bits is None:
        outputs = con.execute("SELECT count(*) FROM so_raw").fetchall()[0][0]
        bits = slice_bits(int(outputs), memory_limit)
    slices = Slices(work, bits)
    slices.partition(
        con,
        "outputs",
        f"""SELECT {slices.bucket("o.txid")} AS bucket, o.txid, o.vout, o.value,
               o.script_pubkey, b.height, o.tx_position AS pos
        FROM so_raw o JOIN best b ON o.block_hash = b.raw
        WHERE b.height > 0 AND octet_length(o.script_pubkey) <= {MAX_SCRIPT_SIZE}
          -- Core's IsUnspendable: scripts starting with OP_RETURN (byte order compare).
          AND NOT (o.script_pubkey >= '\\x6A'::BLOB AND o.script_pubkey < '\\x6B'::BLOB)""",
    )
    slices.partition(
        con,
        "spends",
        f"""SELECT {slices.bucket("i.prev_txid")} AS bucket, i.prev_txid, i.prev_vout,
               b.height, i.tx_position AS pos, i.vin
        FROM si_raw i JOIN best b ON i.block_hash = b.raw
        WHERE i.tx_position > 0""",
    )
    con.execute("CREATE OR REPLACE TEMP TABLE dup AS SELECT txid, vout FROM outputs_none")
    con.execute(f"CREATE OR REPLACE TABLE res AS {_spend_sql(slices, 0)} WHERE false")
    con.execute("CREATE OR REPLACE TABLE spent_twice AS SELECT height FROM res WHERE false")
    for k in range(slices.count):
        # An output id twice in the best chain (BIP30's duplicate coinbases) makes a spend
        # ambiguous: it takes the latest copy before it. Only those few spends go through a
        # window.
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE dup AS SELECT txid, vout
            FROM {slices.source("outputs", k)} GROUP BY ALL HAVING count(*) > 1"""
        )
        spend = _spend_sql(slices, k)
        con.execute(f"INSERT INTO res {spend} WHERE d.txid IS NULL")
        con.execute(
            f"""INSERT INTO res {spend} WHERE d.txid IS NOT NULL
            QUALIFY row_number() OVER (
                PARTITION BY i.height, i.pos, i.vin ORDER BY bo.height DESC NULLS LAST) = 1"""
        )
        # Outputs spent twice: every later spend of one marks its block. The window runs only
        # over those few spends.
        con.execute(
            f"""INSERT INTO spent_twice SELECT height FROM (
              SELECT r.height, row_number() OVER (
                PARTITION BY r.prev_height, r.prev_pos, r.prev_vout
                ORDER BY r.height, r.pos, r.vin) AS n
              FROM res r JOIN (
                SELECT prev_height, prev_pos, prev_vout FROM res
                WHERE bucket = {k} AND value IS NOT NULL GROUP BY ALL HAVING count(*) > 1
              ) twice USING (prev_height, prev_pos, prev_vout)
              WHERE r.bucket = {k}) WHERE n > 1"""
        )
    con.execute(
        """CREATE OR REPLACE TABLE tx_in AS
        SELECT b.hash AS block_hash, f.position, f.input_value, f.resolved
        FROM (SELECT height, pos AS position, sum(value)::UBIGINT AS input_value,
                     count(value) = count(*) AS resolved
              FROM res GROUP BY ALL) f
        JOIN best b ON b.height = f.height"""
    )
    return slices


def first_consensus_failure(
    con: duckdb.DuckDBPyConnection, network: str
) -> tuple[str, int, str] | None:
    """The lowest best-chain block that breaks a consensus rule: (hash, height, reason)."""
    info = _native.network_info(network)
    bip34, halving = int(info["bip34_height"]), int(info["halving_interval"])
    row = con.execute(
        f"""
        WITH failures AS (
          SELECT b.hash, b.height, 'bad-cb-height' AS reason, 0 AS rule
          FROM best b JOIN sb ON sb.hash = b.hash AND sb.valid
          WHERE b.height >= {bip34} AND sb.coinbase_height IS DISTINCT FROM b.height
          UNION ALL
          SELECT b.hash, r.height, 'bad-txns-inputs-missingorspent', 1
          FROM res r JOIN best b ON b.height = r.height WHERE r.value IS NULL
          UNION ALL
          SELECT b.hash, s.height, 'bad-txns-inputs-missingorspent', 1
          FROM spent_twice s JOIN best b ON b.height = s.height
          UNION ALL
          SELECT b.hash, r.height, 'bad-txns-premature-spend-of-coinbase', 2
          FROM res r JOIN best b ON b.height = r.height
          WHERE r.prev_pos = 0 AND r.height - r.prev_height < {COINBASE_MATURITY}
          UNION ALL
          SELECT t.block_hash, b.height, 'bad-txns-in-belowout', 3
          FROM tx_in f JOIN st t ON t.block_hash = f.block_hash AND t.position = f.position
          JOIN best b ON b.hash = t.block_hash
          WHERE f.resolved AND f.input_value < t.output_value
          UNION ALL
          SELECT cb.block_hash, b.height, 'bad-cb-amount', 4
          FROM st cb JOIN best b ON b.hash = cb.block_hash
          LEFT JOIN (
            SELECT f.block_hash, sum(f.input_value - t.output_value) AS fees
            FROM tx_in f JOIN st t ON t.block_hash = f.block_hash AND t.position = f.position
            WHERE f.resolved AND f.input_value >= t.output_value GROUP BY ALL
          ) fee ON fee.block_hash = cb.block_hash
          WHERE cb.position = 0 AND cb.output_value > coalesce(fee.fees, 0) +
            CASE WHEN b.height // {halving} >= 64 THEN 0
                 ELSE 5000000000 >> (b.height // {halving}) END
        )
        SELECT hash, height, reason FROM failures ORDER BY height, rule LIMIT 1
        """
    ).fetchall()
    return None if not row else (str(row[0][0]), int(row[0][1]), str(row[0][2]))
