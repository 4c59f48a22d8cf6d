"""``rechain btc tx``: one transaction with its inputs and outputs, found by the tx index."""

from __future__ import annotations

from typing import Any

import duckdb
from rechain.pipeline.errors import RechainError
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers import _native


def lookup_tx(data: DataDir, txid: str) -> dict[str, Any]:
    """``rechain btc tx``: one transaction with its inputs and outputs, found by the index."""
    try:
        key = bytes.fromhex(txid)[::-1]
    except ValueError as e:
        raise RechainError(f"not a txid: {txid!r}") from e
    loc = data.get(layout.CF_BTC_TXINDEX, key) if len(key) == 32 else None
    if loc is None:
        raise RechainError(f"transaction {txid} is not in the index (run --mode full)")
    try:
        (place,) = _native.decode_txindex_places([loc]).to_pylist()
    except ValueError as e:
        raise RechainError(f"transaction {txid}: {e}") from e
    position = place["position"]
    if place["best"]:
        height_range = ds.height_range(place["height"])
        where = f"height = {place['height']} AND in_best_chain"
    else:
        height_range = place["height_range"]
        where = f"block_hash = '{place['block_hash']}'"
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

    (tx,) = rows(ds.TRANSACTIONS, f"{where} AND position = {int(position)}", "position")
    tx.pop("height_range", None)
    tx["inputs"] = rows(ds.INPUTS, f"{where} AND tx_position = {int(position)}", "vin")
    tx["outputs"] = rows(ds.OUTPUTS, f"{where} AND tx_position = {int(position)}", "vout")
    for item in tx["inputs"] + tx["outputs"]:
        for k in ("txid", "block_hash", "height", "in_best_chain"):
            item.pop(k, None)
    con.close()
    return tx
