"""``rechain btc reindex --mode full``: the body pass after the header pass.

1. Decode: the copies the header pass chose (every linked, side-branch, orphan and unlinked
   block) are read by file and offset on Ray workers and decoded by the Rust core into staged
   parts (``pipeline/btc_bodies.py``); a copy that fails its checks is relinked away, so a valid
   copy of the same hash is decoded next.
2. Consensus over the best chain, set-based in DuckDB (spilling to disk under the memory
   budget): BIP34 coinbase heights, every spend resolved against earlier best-chain outputs
   (missing, double spends, immature coinbase, inputs below outputs), coinbase amount. Spends
   are resolved in slices by txid (``Slices``) sized to DuckDB's share of the budget, so no
   join spans the whole chain. The
   lowest failing block is marked invalid (descendants follow it) and the tree relinked, as
   Core would switch to the best valid chain.
3. Publish: ``blocks``, ``transactions``, ``inputs``, ``outputs`` with heights, ``in_best_chain``
   and fees, Hive-partitioned by height range; the UTXO set into RocksDB in chainstate order
   with Core's ``hash_serialized_3``, and the tx index, both slice by slice in key order.

Memory budget after the body pass (Ray stopped): DuckDB's buffer pool gets
``DUCKDB_BUDGET_SHARE`` of it (it spills to DATADIR/tmp/duckdb beyond that); the other half is
for what the coordinator holds beside the pool (see ``DUCKDB_BUDGET_SHARE``).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rechain.pipeline import btc_bodies, metrics
from rechain.pipeline.btc_committer import BtcCommitter
from rechain.pipeline.errors import RechainError
from rechain.pipeline.progress import Progress
from rechain.pipeline.query import current_generation
from rechain.pipeline.ray_runtime import release_ray
from rechain.pipeline.store import DataDir, fsync_dir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.btc_decode import BodyUnit, decode_and_stage_unit
from rechain.workers.memory import release_unused_memory

log = logging.getLogger(__name__)
STAGE = "btc_full"
#: Block bytes per body unit: big enough to amortise a task, small enough to spread files.
UNIT_BYTES = 32 << 20
#: The smallest unit a small memory budget cuts units down to (see ``unit_bytes``).
MIN_UNIT_BYTES = 4 << 20
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
#: A chain whose every block is invalid cannot loop forever: each round settles one block.
MAX_ROUNDS = 10_000
COINBASE_MATURITY = 100
PARTITION_FLUSH_ROWS = 16_384
#: Rows per batch streamed from DuckDB into an SST file: each batch is also held as Python
#: objects while the writer takes it, so it is kept small (a few MiB).
STREAM_BATCH_ROWS = 16_384
#: Scripts longer than this (bytes) are unspendable (Core's MAX_SCRIPT_SIZE).
MAX_SCRIPT_SIZE = 10_000


def unit_bytes(budget: int) -> int:
    """Block bytes per unit for a memory budget. A unit in flight is resident several times
    over in its worker (decoded columns, then Parquet pages being written to its staged files;
    results no longer go through Ray's object store, see ``StagedBody``), and two units are in
    flight per worker."""
    return int(min(UNIT_BYTES, max(MIN_UNIT_BYTES, budget // 64)))


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


def plan_units(
    data: DataDir,
    headers: pa.Table,
    paths: dict[int, str],
    network: str,
    key: bytes,
    unit_size: int = UNIT_BYTES,
) -> list[BodyUnit]:
    """Units for the chosen copies that have no staged verdict yet, by file and offset."""
    chosen = headers.filter(
        pc.and_(
            pc.equal(headers.column("copy_status"), "ok"),
            pc.not_equal(headers.column("status"), "invalid"),
        )
    ).select(["file", "offset", "size"])
    done = btc_bodies.staged_blocks(data, ["file", "offset"])
    todo = chosen.join(done, keys=["file", "offset"], join_type="left anti")
    todo = todo.filter(pc.is_in(todo.column("file"), pa.array(list(paths), pa.uint32())))
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
) -> dict[str, float]:
    """Runs the units on Ray, committing each result (in submission order) as it arrives.
    ``shared_folder``: the workers can write into the data folder (a Ray this process
    started); otherwise they return their staged files' bytes."""
    import ray
    from rechain.pipeline.ray_runtime import ordered_results

    remote = ray.remote(num_cpus=1, max_retries=3)(decode_and_stage_unit)
    window = max(1, min(2 * workers, budget // 2 // (4 * unit_bytes(budget))))
    # Workers write each unit's staged files here under temporary names (see StagedBody).
    folder = btc_bodies.stage_dir(data)
    folder.mkdir(parents=True, exist_ok=True)
    target = str(folder) if shared_folder else None
    bar = Progress(len(units), enabled=progress)
    stats = {"units": 0.0, "bytes_decoded": 0.0, "worker_decode_s": 0.0, "commit_s": 0.0}
    try:
        for unit, result in ordered_results(remote, units, window, STAGE, target):
            if isinstance(result, ray.exceptions.RayError):
                raise RechainError(f"{Path(unit.path).name} at {unit.offsets[0]}: {result}")
            t0 = time.perf_counter()
            btc_bodies.commit_part(data, result)
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


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


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
            source = f"read_parquet({_sql_list(files)})"
        else:
            empty = pa.Table.from_batches([ds.empty(ds.BODY_STAGED[table])])
            con.register(f"{alias}_empty", empty)
            source = f"{alias}_empty"
        # Staged hashes are raw bytes: the chain state joins them as such (``{alias}_raw``),
        # the published tables see them as display hex.
        con.execute(f"CREATE VIEW {alias}_raw AS SELECT * FROM {source}")
        hashes = ", ".join(
            f"{_hex(c)} AS {c}" for c in ds.staged_hash_columns(ds.BODY_STAGED[table])
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
        return f"read_parquet({_sql_list(files)})" if files else f"{name}_none"


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


def _hex(blob: str) -> str:
    """SQL for the published lower-case hex of a staged byte column (DuckDB's hex() is upper)."""
    return f"lower(hex({blob}))"


def _publish_sql(table: str) -> str:
    """The SELECT publishing one table. ``inputs`` and ``outputs`` keep the staged parts' order
    (file order, close to height order): sorting their witness and script payloads would not
    stay within a small memory budget, and partitions already bound heights."""
    rng = ds.HEIGHT_RANGE_BLOCKS
    height_range = f"coalesce(h.height // {rng} * {rng}, -1)::BIGINT AS height_range"
    context = "h.height, h.in_best_chain"
    if table == "blocks":
        return f"""
        SELECT h.hash, {context}, h.status,
          sb.valid AND h.status <> 'invalid' AS valid,
          coalesce(sb.invalid_reason, CASE WHEN h.status = 'invalid' THEN h.invalid_reason END)
            AS invalid_reason,
          h.version, h.time, h.bits, h.prev_hash, h.merkle_root,
          sb.size, sb.stripped_size, sb.weight, sb.n_tx, sb.n_inputs, sb.n_outputs,
          sb.output_value, fee.fees, sb.coinbase_height, sb.file, sb."offset", {height_range}
        FROM sb JOIN headers h ON h.file = sb.file AND h."offset" = sb."offset"
        LEFT JOIN (
          SELECT f.block_hash, sum(f.input_value - t.output_value)::BIGINT AS fees
          FROM tx_in f JOIN st t ON t.block_hash = f.block_hash AND t.position = f.position
          WHERE f.resolved GROUP BY ALL
        ) fee ON fee.block_hash = h.hash
        ORDER BY h.height NULLS LAST, h.hash"""
    if table == "transactions":
        return f"""
        SELECT t.txid, t.wtxid, t.block_hash, {context}, t.position, t.version, t.lock_time,
          t.size, t.vsize, t.weight, t.n_in, t.n_out, t.is_coinbase, t.has_witness,
          t.output_value, f.input_value,
          CASE WHEN f.resolved THEN f.input_value::BIGINT - t.output_value::BIGINT END AS fee,
          {height_range}
        FROM st t JOIN headers h ON h.hash = t.block_hash
        LEFT JOIN tx_in f ON f.block_hash = t.block_hash AND f.position = t.position"""
    if table == "inputs":
        return f"""
        SELECT i.txid, i.vin, i.prev_txid, i.prev_vout, {_hex("i.script_sig")} AS script_sig,
          i.sequence, i.witness_items, list_transform(i.witness, lambda w: {_hex("w")}) AS witness,
          r.value, i.block_hash, i.tx_position, {context},
          {height_range}
        FROM si i JOIN headers h ON h.hash = i.block_hash
        LEFT JOIN (SELECT height, pos, vin, value FROM res) r
          ON h.in_best_chain AND r.height = h.height AND r.pos = i.tx_position
             AND r.vin = i.vin"""
    assert table == "outputs"
    return f"""
        SELECT o.txid, o.vout, o.value, o.script_type::VARCHAR AS script_type, o.address,
          {_hex("o.script_pubkey")} AS script_pubkey, o.block_hash, o.tx_position, {context},
          CASE WHEN h.in_best_chain THEN s.prev_height IS NOT NULL END AS spent,
          {height_range}
        FROM so o JOIN headers h ON h.hash = o.block_hash
        LEFT JOIN (SELECT DISTINCT prev_height, prev_pos, prev_vout FROM res
                   WHERE value IS NOT NULL) s
          ON h.in_best_chain AND s.prev_height = h.height AND s.prev_pos = o.tx_position
             AND s.prev_vout = o.vout"""


def publish_tables(
    con: duckdb.DuckDBPyConnection, data: DataDir, generation: int, budget: int = 1 << 30
) -> dict[str, int]:
    # A row group is buffered whole before it is written: bound it in bytes as well as rows
    # (inputs and outputs rows carry scripts and witnesses).
    group_bytes = max(budget // 16, 1 << 20)
    rows = {}
    for table in (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS):
        base = data.parquet_dir(table)
        final = base / f"{generation:06d}"
        tmp = base / f".{generation:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        base.mkdir(parents=True, exist_ok=True)
        sql = _publish_sql(table)
        log.info("publish: %s", table)
        con.execute(
            f"COPY ({sql}) TO '{tmp}' (FORMAT PARQUET, PARTITION_BY (height_range), "
            f"COMPRESSION ZSTD, ROW_GROUP_SIZE {ds.ROW_GROUP_ROWS}, "
            f"ROW_GROUP_SIZE_BYTES {group_bytes})"
        )
        for f in tmp.rglob("*.parquet"):
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        # Row counts from the Parquet footers, not by running the query twice.
        written = con.execute(
            f"SELECT count(*) FROM read_parquet('{tmp}/**/*.parquet', hive_partitioning = true)"
        ).fetchall()
        rows[table] = int(written[0][0])
        os.rename(tmp, final)
        fsync_dir(base)
    return rows


def _internal_order(txid: str) -> str:
    """SQL for a staged (display-order) txid's bytes in internal order, as a sort key."""
    return f"regexp_replace(reverse(lower(hex({txid}))), '(.)(.)', '\\2\\1', 'g')"


def _stream(con: duckdb.DuckDBPyConnection, queries: Iterator[str]) -> Iterator[pa.RecordBatch]:
    """The batches of several queries, one query after the other (each slice's result is
    streamed before the next slice runs, so only one slice's sort is ever live)."""
    for sql in queries:
        yield from con.sql(sql).to_arrow_reader(STREAM_BATCH_ROWS)


def write_utxo_set(con: duckdb.DuckDBPyConnection, data: DataDir, slices: Slices) -> dict[str, Any]:
    """The unspent best-chain outputs into ``btc_utxo`` (chainstate order) and their digest."""

    def unspent(k: int) -> str:
        outputs = slices.source("outputs", k)
        return f"""
        SELECT lower(hex(bo.txid)) AS txid, bo.vout::UINTEGER AS vout,
               bo.height::UINTEGER AS height, bo.pos = 0 AS coinbase,
               bo.value::UBIGINT AS value, bo.script_pubkey
        FROM {outputs} bo ANTI JOIN (SELECT prev_height, prev_pos, prev_vout FROM res
                                     WHERE bucket = {k} AND value IS NOT NULL) s
          ON s.prev_height = bo.height AND s.prev_pos = bo.pos AND s.prev_vout = bo.vout
        -- Of an output id created twice (BIP30), only the latest copy is in the set.
        LEFT JOIN (SELECT txid, vout, max(height) AS latest FROM {outputs}
                   GROUP BY ALL HAVING count(*) > 1) d ON d.txid = bo.txid AND d.vout = bo.vout
        WHERE d.latest IS NULL OR bo.height = d.latest
        ORDER BY {_internal_order("bo.txid")}, bo.vout"""

    hasher = _native.UtxoHasher()
    done: dict[str, Any] = {}

    def chunks() -> Iterator[tuple[pa.Array, pa.Array]]:
        # Streamed into the SST file: the UTXO set is never held whole in memory.
        for batch in _stream(con, (unspent(k) for k in range(slices.count))):
            yield hasher.update(batch)
        last, done["hash_serialized_3"], done["utxo_count"], done["total_amount"] = hasher.finish()
        yield last

    data.reset_column_family(layout.CF_BTC_UTXO)
    data.ingest_sorted_batches(layout.CF_BTC_UTXO, chunks())
    return {k: done[k] for k in ("utxo_count", "total_amount", "hash_serialized_3")}


def write_txindex(con: duckdb.DuckDBPyConnection, data: DataDir, slices: Slices) -> int:
    """txid -> where the published tables hold it; a txid in several blocks (BIP30 duplicates,
    side branches) points at its best-chain copy, else its lowest one."""
    rng = ds.HEIGHT_RANGE_BLOCKS
    # Every staged transaction with its block's place, as ``transactions`` publishes it.
    slices.partition(
        con,
        "transactions",
        f"""SELECT {slices.bucket("t.txid")} AS bucket, t.txid, t.block_hash, t.position,
               h.height, h.in_best_chain,
               coalesce(h.height // {rng} * {rng}, -1)::BIGINT AS height_range
        FROM st_raw t JOIN headers h ON from_hex(h.hash) = t.block_hash""",
    )

    def index(k: int) -> str:
        return f"""
        SELECT from_hex({_internal_order("txid")}) AS k,
               encode(height_range::VARCHAR || ' ' || lower(hex(block_hash)) || ' '
                      || position::VARCHAR) AS v
        FROM {slices.source("transactions", k)}
        QUALIFY row_number() OVER (
            PARTITION BY txid ORDER BY in_best_chain DESC, height NULLS LAST, block_hash) = 1
        ORDER BY k"""

    rows = 0

    def chunks() -> Iterator[tuple[pa.Array, pa.Array]]:
        nonlocal rows
        for batch in _stream(con, (index(k) for k in range(slices.count))):
            rows += batch.num_rows
            yield batch.column("k"), batch.column("v")

    data.reset_column_family(layout.CF_BTC_TXINDEX)
    data.ingest_sorted_batches(layout.CF_BTC_TXINDEX, chunks())
    return rows


def lookup_tx(data: DataDir, txid: str) -> dict[str, Any]:
    """``rechain btc tx``: one transaction with its inputs and outputs, found by the index."""
    try:
        key = bytes.fromhex(txid)[::-1]
    except ValueError as e:
        raise RechainError(f"not a txid: {txid!r}") from e
    loc = data.get(layout.CF_BTC_TXINDEX, key) if len(key) == 32 else None
    if loc is None:
        raise RechainError(f"transaction {txid} is not in the index (run --mode full)")
    height_range, block_hash, position = loc.decode().split()
    gen = int(data.meta_get(layout.META_BTC_FULL_GENERATION) or 0)
    con = duckdb.connect(":memory:")

    def rows(table: str, where: str, order: str) -> list[dict[str, Any]]:
        files = data.parquet_dir(table) / f"{gen:06d}" / f"height_range={height_range}"
        rel = con.sql(
            f"SELECT * EXCLUDE (height_range, tx_position) FROM "
            f"read_parquet('{files}/*.parquet') WHERE {where} ORDER BY {order}"
            if table != ds.TRANSACTIONS
            else f"SELECT * FROM read_parquet('{files}/*.parquet') WHERE {where}"
        )
        return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]

    where = f"block_hash = '{block_hash}'"
    (tx,) = rows(ds.TRANSACTIONS, f"{where} AND position = {int(position)}", "position")
    tx.pop("height_range", None)
    tx["inputs"] = rows(ds.INPUTS, f"{where} AND tx_position = {int(position)}", "vin")
    tx["outputs"] = rows(ds.OUTPUTS, f"{where} AND tx_position = {int(position)}", "vout")
    for item in tx["inputs"] + tx["outputs"]:
        for k in ("txid", "block_hash", "height", "in_best_chain"):
            item.pop(k, None)
    con.close()
    return tx


def run_full(
    data: DataDir,
    committer: BtcCommitter,
    *,
    network: str,
    key: bytes,
    paths: dict[int, str],
    workers: int,
    budget: int,
    progress: bool,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Body pass, consensus rounds and publication; returns the full-mode summary."""
    t_start = time.perf_counter()
    removed = btc_bodies.remove_unregistered(data)
    if removed:
        log.info("removed %d staged body file(s) a killed run left unregistered", removed)
    stats: dict[str, float] = {"units": 0.0, "bytes_decoded": 0.0, "worker_decode_s": 0.0}
    rounds = 0
    invalid = btc_bodies.invalid_blocks(data)
    while True:
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise RechainError(f"full decode did not settle after {MAX_ROUNDS} rounds")
        gen = current_generation(data.parquet_dir(ds.HEADERS))
        assert gen is not None
        import pyarrow.parquet as pq

        headers = pq.read_table(gen, columns=["file", "offset", "size", "status", "copy_status"])
        units = plan_units(data, headers, paths, network, key, unit_bytes(budget))
        if units:
            from rechain.pipeline.ray_runtime import ensure_ray

            ensure_ray(ray_address, workers)
            t_decode = time.perf_counter()
            log.info("decode: %d unit(s), round %d", len(units), rounds)
            # Workers of a cluster given by address may run on other machines.
            shared = ray_address is None
            got = decode_units(units, data, workers, budget, progress, shared)
            got["decode_s"] = time.perf_counter() - t_decode
            for k, v in got.items():
                stats[k] = stats.get(k, 0.0) + v
            # Copies that failed their checks change which copy the linker picks.
            log.info("decode: relink")
            committer.link_and_publish()
            continue
        # The body pass is done: its Ray cluster and freed buffers go before DuckDB takes its
        # share of the budget (a consensus failure that needs another decode restarts Ray).
        if release_ray():
            log.info("decode: stopped the embedded Ray cluster")
        release_unused_memory()
        con = connect(data, budget, workers)
        work = data.path / "tmp" / "duckdb" / "slices"
        try:
            log.info("consensus: chain state, round %d", rounds)
            slices = build_chain_state(con, work, duckdb_bytes(budget))
            log.info("consensus: %d slice(s) by txid", slices.count)
            log.info("consensus: rules")
            failure = first_consensus_failure(con, network)
            if failure is not None:
                block_hash, height, reason = failure
                log.warning("block %s at height %d is invalid: %s", block_hash, height, reason)
                invalid[block_hash] = reason
                data.write({layout.CF_META: [(layout.META_BTC_INVALID_BLOCKS, invalid)]})
                con.close()
                committer.link_and_publish()
                continue
            t = time.perf_counter()
            generation = int(data.meta_get(layout.META_BTC_FULL_GENERATION) or 0) + 1
            rows = publish_tables(con, data, generation, budget)
            publish_s = time.perf_counter() - t
            t = time.perf_counter()
            log.info("publish: utxo set")
            utxo = write_utxo_set(con, data, slices)
            log.info("publish: tx index")
            write_txindex(con, data, slices)
            utxo_s = time.perf_counter() - t
        except (duckdb.OutOfMemoryException, OSError) as e:
            # A query streamed through Arrow (UTXO set, tx index) reports it as an OSError.
            if not isinstance(e, duckdb.OutOfMemoryException) and "Out of Memory" not in str(e):
                raise
            raise RechainError(
                f"the full decode needs more memory than --memory-budget {budget >> 20}M gives "
                f"DuckDB (it spills to {data.path / 'tmp' / 'duckdb'} where it can): {e}"
            ) from e
        finally:
            con.close()
            shutil.rmtree(work, ignore_errors=True)
        break
    summary = {
        **utxo,
        "tables": rows,
        "invalid_blocks": [{"hash": h, "reason": r} for h, r in sorted(invalid.items())],
    }
    data.write(
        {
            layout.CF_META: [
                (layout.META_BTC_FULL, summary),
                (layout.META_BTC_FULL_GENERATION, generation),
            ]
        }
    )
    for table in (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS):
        data.remove_other_generations(table, generation)
    run = {
        **stats,
        "rounds": rounds,
        "publish_s": publish_s,
        "utxo_s": utxo_s,
        "full_total_s": time.perf_counter() - t_start,
    }
    return {**summary, "run": run}
