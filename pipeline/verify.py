"""``rechain verify``: checks that RocksDB, the Parquet tables and the manifest agree, and prints
a content digest that is equal for equal content (timings and other run details excluded)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rechain.pipeline.query import current_generation
from rechain.pipeline.store import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

#: Meta keys that describe a run rather than the content.
VOLATILE_META = {
    layout.META_BTC_RUN,
    layout.META_BTC_GENERATION,
    layout.META_BTC_FULL_GENERATION,
}


def _work(bits: int) -> int:
    exponent, word = bits >> 24, bits & 0x007FFFFF
    target = word >> (8 * (3 - exponent)) if exponent <= 3 else word << (8 * (exponent - 3))
    if target == 0 or (word and bits & 0x00800000):
        return 0
    return (1 << 256) // (target + 1)


def headers_table(data: DataDir) -> pa.Table | None:
    base = data.parquet_dir(ds.HEADERS)
    gen = current_generation(base) if base.exists() else None
    return pq.read_table(gen) if gen else None


#: Column families that record how a run was split up rather than what it found.
STAGING_COLUMN_FAMILIES = {layout.CF_BTC_BODIES}


def full_tables_digest(data: DataDir) -> str | None:
    """Order-independent digest of the full-decode tables (row count and per-column sums of
    DuckDB row hashes): equal content gives an equal digest however units were cut."""
    import duckdb

    gen = data.meta_get(layout.META_BTC_FULL_GENERATION)
    if gen is None:
        return None
    h = hashlib.sha256()
    con = duckdb.connect(":memory:")
    try:
        for table in (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS):
            files = data.parquet_dir(table) / f"{int(gen):06d}" / "**" / "*.parquet"
            row = con.sql(
                f"SELECT count(*), sum(hash(COLUMNS(*))::HUGEINT) FROM "
                f"read_parquet('{files}', hive_partitioning = true)"
            ).fetchall()[0]
            h.update(f"{table}:{row}".encode())
    finally:
        con.close()
    return h.hexdigest()


def digest(data: DataDir) -> dict[str, str]:
    parts: dict[str, str] = {}
    for cf in layout.COLUMN_FAMILIES:
        if cf in STAGING_COLUMN_FAMILIES:
            continue
        h = hashlib.sha256()
        for key, value in data.items(cf):
            if cf == layout.CF_META and key in VOLATILE_META:
                continue
            h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
        parts[cf] = h.hexdigest()
    table = headers_table(data)
    h = hashlib.sha256()
    if table is not None:
        for row in table.combine_chunks().to_batches():
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, row.schema) as w:
                w.write_batch(row)
            h.update(sink.getvalue().to_pybytes())
    parts["parquet/headers"] = h.hexdigest()
    full = full_tables_digest(data)
    if full is not None:
        parts["parquet/full"] = full
    parts["content"] = hashlib.sha256("".join(parts[k] for k in sorted(parts)).encode()).hexdigest()
    return parts


def verify(data_path: Path) -> dict[str, Any]:
    problems: list[str] = []
    with DataDir(data_path, readonly=True) as data:
        summary = data.meta_get(layout.META_BTC_SUMMARY)
        if summary is None:
            problems.append("no completed Bitcoin reindex (meta btc/summary missing)")
            return {"ok": False, "problems": problems, "digest": digest(data)}
        if data.meta_get(layout.META_BTC_DIRTY):
            problems.append("scanned data not yet linked (a run was interrupted; rerun reindex)")
        table = headers_table(data)
        index_count = sum(1 for _ in data.items(layout.CF_BTC_INDEX))
        if table is None:
            problems.append("Parquet table headers missing")
        else:
            if table.num_rows != index_count:
                problems.append(f"headers has {table.num_rows} rows, block index {index_count}")
            linked = table.filter(pa.compute.is_valid(table.column("height")))
            if linked.num_rows != summary["blocks_indexed"]:
                problems.append(
                    f"{linked.num_rows} linked rows, manifest says {summary['blocks_indexed']}"
                )
            _check_best_chain(data, table, summary, problems)
        _check_full(data, problems)
        return {
            "ok": not problems,
            "problems": problems,
            "blocks_indexed": index_count,
            "digest": digest(data),
        }


def _check_full(data: DataDir, problems: list[str]) -> None:
    """Full mode: the UTXO set in RocksDB and the published tables agree with the manifest."""
    full = data.meta_get(layout.META_BTC_FULL)
    if full is None:
        return
    count = total = 0
    for _, value in data.items(layout.CF_BTC_UTXO):
        count += 1
        total += int.from_bytes(value[4:12], "little")
    if (count, total) != (full["utxo_count"], full["total_amount"]):
        problems.append(
            f"UTXO set holds {count} outputs / {total} sat, manifest says "
            f"{full['utxo_count']} / {full['total_amount']}"
        )
    from rechain.pipeline.query import run_query

    for table, rows in full["tables"].items():
        (got,) = run_query(data.path, f'SELECT count(*) FROM "{table}"')[1][0]
        if got != rows:
            problems.append(f"table {table} has {got} rows, manifest says {rows}")


def _check_best_chain(
    data: DataDir, table: pa.Table, summary: dict[str, Any], problems: list[str]
) -> None:
    best = table.filter(table.column("in_best_chain")).sort_by("height")
    heights = best.column("height").to_pylist()
    if heights != list(range(len(heights))):
        problems.append("best chain heights are not contiguous from 0")
        return
    hashes = best.column("hash").to_pylist()
    prevs = best.column("prev_hash").to_pylist()
    bits = best.column("bits").to_pylist()
    works = best.column("chainwork").to_pylist()
    total = 0
    for i, (h, p, b, w) in enumerate(zip(hashes, prevs, bits, works, strict=True)):
        if i and p != hashes[i - 1]:
            problems.append(f"best chain broken at height {i}")
            return
        total += _work(b)
        if int(w, 16) != total:
            problems.append(f"chainwork at height {i} is {w}, recomputed {total:064x}")
            return
        stored = data.get(layout.CF_BTC_BEST, layout.best_chain_key(i))
        if stored is None or _native.display_hash(stored) != h:
            problems.append(f"RocksDB best chain disagrees with Parquet at height {i}")
            return
    if hashes and (hashes[-1] != summary["tip_hash"] or works[-1] != summary["chainwork"]):
        problems.append("manifest tip differs from the best chain's last block")
