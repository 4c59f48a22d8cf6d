"""Stage ``indexes``: the UTXO set and the transaction index in RocksDB, and the summary.

The unspent best-chain outputs go to ``btc_utxo`` in Core's chainstate key order with Core's
``hash_serialized_3``, and every transaction to ``btc_txindex``, both slice by slice in key
order, streamed into SST files (never held whole in memory).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
from rechain.pipeline import btc_bodies
from rechain.pipeline.stages.bitcoin import BtcRun
from rechain.pipeline.stages.bitcoin.chain_state import Slices, duckdb_memory_errors
from rechain.pipeline.stages.bitcoin.publish import published_rows
from rechain.pipeline.stages.engine import Done, Stage
from rechain.pipeline.store import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

log = logging.getLogger(__name__)
#: Rows per batch streamed from DuckDB into an SST file: each batch is also held as Python
#: objects while the writer takes it, so it is kept small (a few MiB).
STREAM_BATCH_ROWS = 16_384


class IndexesStage(Stage[BtcRun]):
    name = "indexes"
    uses = ("chain_state",)

    def output(self, ctx: BtcRun) -> Any:
        summary = ctx.data.meta_get(layout.META_BTC_FULL)
        blob = json.dumps(summary, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:32]

    def run(self, ctx: BtcRun) -> Done:
        data = ctx.data
        assert ctx.con is not None and ctx.slices is not None
        t = time.perf_counter()
        with duckdb_memory_errors(data, ctx.opts.memory_budget):
            log.info("indexes: utxo set")
            utxo = write_utxo_set(ctx.con, data, ctx.slices)
            log.info("indexes: tx index")
            txs = write_txindex(ctx.con, data, ctx.slices)
        invalid = btc_bodies.invalid_blocks(data)
        summary = {
            **utxo,
            "tables": published_rows(data),
            "invalid_blocks": [{"hash": h, "reason": r} for h, r in sorted(invalid.items())],
        }
        data.write({layout.CF_META: [(layout.META_BTC_FULL, summary)]})
        ctx.full["utxo_s"] = ctx.full.get("utxo_s", 0.0) + time.perf_counter() - t
        return Done(rows=int(utxo["utxo_count"]), detail={"txindex": txs})


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
