"""Stage ``publish``: the ``blocks``, ``transactions``, ``inputs`` and ``outputs`` tables.

Written by DuckDB (``session``) from the staged bodies, the headers and the chain state's
resolved spends, with heights, ``in_best_chain``, input values and fees,
Hive-partitioned by height range, as a new generation of each table (temp folder, fsync,
rename), which then becomes the current one.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import duckdb
from rechain.pipeline.stages.bitcoin import BtcRun
from rechain.pipeline.stages.bitcoin.session import duckdb_memory_errors, hex_sql
from rechain.pipeline.stages.engine import Done, Stage
from rechain.pipeline.store import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.schemas import tables

log = logging.getLogger(__name__)


class PublishStage(Stage[BtcRun]):
    name = "publish"

    def output(self, ctx: BtcRun) -> Any:
        return ctx.data.meta_get(layout.META_BTC_FULL_GENERATION)

    def run(self, ctx: BtcRun) -> Done:
        data = ctx.data
        t = time.perf_counter()
        generation = int(data.meta_get(layout.META_BTC_FULL_GENERATION) or 0) + 1
        with duckdb_memory_errors(data, ctx.opts.memory_budget):
            rows = publish_tables(ctx.session(), data, generation, ctx.opts.memory_budget)
        data.write({layout.CF_META: [(layout.META_BTC_FULL_GENERATION, generation)]})
        for table in FULL_TABLES:
            data.remove_other_generations(table, generation)
        ctx.full["publish_s"] = ctx.full.get("publish_s", 0.0) + time.perf_counter() - t
        return Done(rows=sum(rows.values()), detail={"tables": rows, "generation": generation})


#: The tables this stage publishes, in publication order.
FULL_TABLES = (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS)


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
        SELECT i.txid, i.vin, i.prev_txid, i.prev_vout,
          {hex_sql("i.script_sig")} AS script_sig, i.sequence, i.witness_items,
          list_transform(i.witness, lambda w: {hex_sql("w")}) AS witness,
          r.value, i.block_hash, i.tx_position, {context},
          {height_range}
        FROM si i JOIN headers h ON h.hash = i.block_hash
        LEFT JOIN (SELECT height, pos, vin, value FROM res) r
          ON h.in_best_chain AND r.height = h.height AND r.pos = i.tx_position
             AND r.vin = i.vin"""
    assert table == "outputs"
    return f"""
        SELECT o.txid, o.vout, o.value, o.script_type::VARCHAR AS script_type, o.address,
          {hex_sql("o.script_pubkey")} AS script_pubkey, o.block_hash, o.tx_position, {context},
          CASE WHEN h.in_best_chain THEN s.prev_height IS NOT NULL END AS spent,
          {height_range}
        FROM so o JOIN headers h ON h.hash = o.block_hash
        LEFT JOIN (SELECT prev_height, lower(hex(prev_txid)) AS prev_txid, prev_vout FROM res) s
          ON h.in_best_chain AND s.prev_height = h.height AND s.prev_txid = o.txid
             AND s.prev_vout = o.vout"""


def publish_tables(
    con: duckdb.DuckDBPyConnection, data: DataDir, generation: int, budget: int = 1 << 30
) -> dict[str, int]:
    # A row group is buffered whole before it is written: bound it in bytes as well as rows
    # (inputs and outputs rows carry scripts and witnesses).
    group_bytes = max(budget // 16, 1 << 20)
    rows = {}
    for name in FULL_TABLES:
        table = tables.TABLES[name]
        tmp = data.begin_generation(name, generation)
        # Cast to the declared schema: the files' schema is the declaration's, whatever SQL.
        sql = tables.duckdb_select(table, _publish_sql(name))
        log.info("publish: %s", name)
        con.execute(
            f"COPY ({sql}) TO '{tmp}' (FORMAT PARQUET, PARTITION_BY ({table.partition_by}), "
            f"COMPRESSION {table.compression.upper()}, ROW_GROUP_SIZE {table.row_group_rows}, "
            f"ROW_GROUP_SIZE_BYTES {group_bytes}, OVERWRITE_OR_IGNORE)"
        )
        # Row counts from the Parquet footers, not by running the query twice.
        written = con.execute(
            f"SELECT count(*) FROM read_parquet('{tmp}/**/*.parquet', hive_partitioning = true)"
        ).fetchall()
        rows[name] = int(written[0][0])
        data.publish_generation(name, generation, tmp)
    return rows


def published_rows(data: DataDir) -> dict[str, int]:
    """Row counts of the current generation's tables, from their Parquet footers."""
    gen = int(data.meta_get(layout.META_BTC_FULL_GENERATION) or 0)
    con = duckdb.connect(":memory:")
    try:
        rows = {}
        for table in FULL_TABLES:
            folder = data.parquet_dir(table) / f"{gen:06d}"
            n = con.execute(
                f"SELECT count(*) FROM read_parquet('{folder}/**/*.parquet', "
                "hive_partitioning = true)"
            ).fetchall()
            rows[table] = int(n[0][0])
        return rows
    finally:
        con.close()
