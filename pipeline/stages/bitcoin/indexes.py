"""Stage ``indexes``: the transaction index in RocksDB, and the full-mode summary.

Every transaction goes to ``btc_txindex``, slice by slice in key order, streamed into an SST
file (never held whole in memory). The summary carries the UTXO set's figures: count and
amount as the chain state keeps them, checked against Core's ``hash_serialized_3`` computed
over ``btc_utxo`` in key order.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
from rechain.pipeline import btc_bodies
from rechain.pipeline.errors import RechainError
from rechain.pipeline.stages.bitcoin import BtcRun, chain_state
from rechain.pipeline.stages.bitcoin.publish import published_rows
from rechain.pipeline.stages.bitcoin.session import (
    Slices,
    duckdb_bytes,
    duckdb_memory_errors,
    slice_bits,
)
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

    def output(self, ctx: BtcRun) -> Any:
        summary = ctx.data.meta_get(layout.META_BTC_FULL)
        blob = json.dumps(summary, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:32]

    def run(self, ctx: BtcRun) -> Done:
        data = ctx.data
        t = time.perf_counter()
        log.info("indexes: utxo set digest")
        utxo = utxo_figures(data)
        with duckdb_memory_errors(data, ctx.opts.memory_budget):
            log.info("indexes: tx index")
            txs = write_txindex(ctx.session(), data, ctx.opts.memory_budget)
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


def utxo_figures(data: DataDir) -> dict[str, Any]:
    """Count, amount and ``hash_serialized_3`` of ``btc_utxo``, which must agree with the
    chain state's running count and amount."""
    digest, count, total = _native.hash_utxo_entries(data.cf(layout.CF_BTC_UTXO).items())
    cp = chain_state.checkpoint(data) or {"utxo_count": 0, "total_amount": 0}
    if (count, total) != (cp["utxo_count"], cp["total_amount"]):
        raise RechainError(
            f"the UTXO set holds {count} outputs / {total} sat but the chain state applied "
            f"{cp['utxo_count']} / {cp['total_amount']}: rerun with --from-stage chain_state"
        )
    return {"utxo_count": count, "total_amount": total, "hash_serialized_3": digest}


def write_txindex(con: duckdb.DuckDBPyConnection, data: DataDir, budget: int) -> int:
    """txid -> where the published tables hold it; a txid in several blocks (BIP30 duplicates,
    side branches) points at its best-chain copy, else its lowest one."""
    rng = ds.HEIGHT_RANGE_BLOCKS
    count = con.execute("SELECT count(*) FROM st_raw").fetchall()[0][0]
    work = data.path / "tmp" / "duckdb" / "slices"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    slices = Slices(work, slice_bits(int(count), duckdb_bytes(budget)))
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
    shutil.rmtree(work, ignore_errors=True)
    return rows
