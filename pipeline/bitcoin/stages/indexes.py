"""Stage ``indexes``: the transaction index in RocksDB, and the full-mode summary.

``btc_txindex`` maps every published transaction's txid to where the tables hold it. It is
built whole the first time (slice by slice in key order, streamed into an SST file, never
held whole in memory) and afterwards updated from what the publish stage changed: the txids
of the segments it wrote or dropped and of the off-chain rows, each resolved again among the
new rows unless its entry points at a block still on the best chain below the fork (which
outranks every new row). The record ``META_BTC_TXINDEX`` says which table generation the
index matches; this stage then removes the older generations.

The summary carries the UTXO set's count and amount, the chain state's running figures.
Core's ``hash_serialized_3`` is not computed here: it hashes the whole set, so its cost grows
with the set, not with the new blocks; ``btc status`` computes it on demand, as Core's
``gettxoutsetinfo`` does (``rechain.pipeline.bitcoin.status.utxo_set_info``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rechain.pipeline.bitcoin import body_parts, chain_parts
from rechain.pipeline.bitcoin.published import FULL_TABLES, OFFCHAIN, published_rows
from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.bitcoin.session import duckdb_memory_errors, sql_list
from rechain.pipeline.engine.driver import Done, Stage
from rechain.pipeline.errors import RechainError
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.table_view import newest_generation
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.fault_injection import kill_point

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger(__name__)
#: At most this many split tasks and txid ranges when the index is built on Ray.
MAX_RAY_TASKS = 64
#: The metrics label of the index's Ray tasks.
STAGE = "btc_txindex"


class IndexesStage(Stage[BtcRun]):
    name = "indexes"

    def pending(self, ctx: BtcRun) -> bool:
        """An index of another value format (an older rechain's) is built again."""
        record = ctx.data.meta_get(layout.META_BTC_TXINDEX)
        return record is not None and record.get("format") != layout.TXINDEX_FORMAT

    def reset(self, ctx: BtcRun, data: DataDir) -> None:
        """``--from-stage``: the tx index is built whole again."""
        data.write({}, {layout.CF_META: [layout.META_BTC_TXINDEX]})

    def output(self, ctx: BtcRun) -> Any:
        summary = ctx.data.meta_get(layout.META_BTC_FULL)
        blob = json.dumps(summary, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:32]

    def run(self, ctx: BtcRun) -> Done:
        data = ctx.data
        t = time.perf_counter()
        cp = chain_parts.checkpoint(data) or {"utxo_count": 0, "total_amount": 0}
        utxo = {"utxo_count": int(cp["utxo_count"]), "total_amount": int(cp["total_amount"])}
        with duckdb_memory_errors(data, ctx.opts.memory_budget):
            log.info("indexes: tx index")
            # On a cluster a whole build runs where the chain state's tasks ran.
            on_ray = ctx.executor.partitioned
            shared = ctx.executor.workers_share_data_folder
            stats: dict[str, float] = {}
            txs, how = update_txindex(
                ctx.session(), data, ctx.opts.memory_budget, on_ray, shared, stats, ctx.workers
            )
        ctx.add(stats)
        ctx.full["txindex_" + how] = ctx.full.get("txindex_" + how, 0) + 1
        generation = int(data.meta_get(layout.META_BTC_FULL_GENERATION) or 0)
        for table in FULL_TABLES:
            data.remove_other_generations(table, generation)
        kill_point("indexes.generations_removed")
        invalid = body_parts.invalid_blocks(data)
        summary = {
            **utxo,
            "tables": published_rows(data),
            "invalid_blocks": [{"hash": h, "reason": r} for h, r in sorted(invalid.items())],
        }
        data.write({layout.CF_META: [(layout.META_BTC_FULL, summary)]})
        kill_point("indexes.summary_written")
        ctx.full["utxo_s"] = ctx.full.get("utxo_s", 0.0) + time.perf_counter() - t
        return Done(rows=int(utxo["utxo_count"]), detail={"txindex": txs})


def update_txindex(
    con: duckdb.DuckDBPyConnection,
    data: DataDir,
    budget: int,
    on_ray: bool = False,
    shared: bool = True,
    stats: dict[str, float] | None = None,
    threads: int = 1,
) -> tuple[int, str]:
    """Brings ``btc_txindex`` to the current tables: (entries, "updated" or "rebuilt"); a
    rebuild on Ray with ``on_ray`` (``write_txindex``, which fills ``stats``), else here on
    ``threads`` threads."""
    record = data.meta_get(layout.META_BTC_TXINDEX)
    published = data.meta_get(layout.META_BTC_PUBLISHED) or {}
    generation = published.get("generation")
    tx_dir = data.parquet_dir(ds.TRANSACTIONS)
    if record is not None and record.get("format") != layout.TXINDEX_FORMAT:
        record = None
    if record is not None and generation is not None and record["generation"] == generation:
        return int(record["entries"]), "unchanged"
    if (
        record is None
        or generation is None
        or not (tx_dir / f"{record['generation']:06d}").is_dir()
    ):
        entries = write_txindex(data, budget, on_ray, shared, stats, threads)
        how = "rebuilt"
    else:
        entries = int(record["entries"]) + _apply_txindex_changes(con, data, record, published)
        how = "updated"
    # A segment is the same only with the same heights and the same block at its end: a reorg
    # can replace a segment by one of the same heights.
    segments = [[seg["path"], seg["hash"]] for seg in published.get("segments", [])]
    data.write(
        {
            layout.CF_META: [
                (
                    layout.META_BTC_TXINDEX,
                    {
                        "generation": generation,
                        "segments": segments,
                        "entries": entries,
                        "format": layout.TXINDEX_FORMAT,
                    },
                )
            ]
        }
    )
    kill_point("indexes.record_written")
    return entries, how


def _apply_txindex_changes(
    con: duckdb.DuckDBPyConnection,
    data: DataDir,
    record: dict[str, Any],
    published: dict[str, Any],
) -> int:
    """Updates the index from generation ``record`` to ``published``; returns the change in
    the number of entries."""
    tx_dir = data.parquet_dir(ds.TRANSACTIONS)
    old_dir = tx_dir / f"{record['generation']:06d}"
    new_dir = tx_dir / f"{published['generation']:06d}"
    old = {(path, block) for path, block in record["segments"]}
    new_segments = published["segments"]
    kept = [seg for seg in new_segments if (seg["path"], seg["hash"]) in old]
    kept_paths = {seg["path"] for seg in kept}
    # Kept segments are the chain below the fork: a prefix of the new segments.
    kept_tip = max((seg["last"] for seg in kept), default=-1)
    added = [str(new_dir / seg["path"]) for seg in new_segments if seg["path"] not in kept_paths]
    gone = [str(old_dir / p) for p in sorted({p for p, _ in old} - kept_paths)]
    # Off-chain files publish kept are the same files (links): their rows stay candidates
    # but change no entry; the others' txids are looked up again.
    old_off = {f.relative_to(old_dir): f for f in old_dir.glob(f"*/{OFFCHAIN}_*.parquet")}
    new_off = {f.relative_to(new_dir): f for f in new_dir.glob(f"*/{OFFCHAIN}_*.parquet")}
    same = {k for k, f in new_off.items() if k in old_off and os.path.samefile(f, old_off[k])}
    changed = [str(f) for k, f in sorted(new_off.items()) if k not in same]
    gone += [str(f) for k, f in sorted(old_off.items()) if k not in same]
    cand_files = added + [str(f) for f in new_off.values()]
    added += changed

    def rows(files: list[str], columns: str) -> str:
        if not files:
            return f"(SELECT {columns} FROM transactions_none)"
        source = f"read_parquet({sql_list(files)}, hive_partitioning = true)"
        return f"(SELECT {columns} FROM {source})"

    con.execute(
        "CREATE OR REPLACE TEMP TABLE transactions_none AS SELECT ''::VARCHAR AS txid, "
        "''::VARCHAR AS block_hash, 0::UINTEGER AS position, 0::UINTEGER AS height, "
        "false AS in_best_chain, 0::BIGINT AS height_range WHERE false"
    )
    cand_cols = "txid, block_hash, position, height, in_best_chain, height_range"
    con.execute(f"CREATE OR REPLACE TEMP TABLE cand AS {rows(cand_files, cand_cols)}")
    txids = con.sql(
        f"""SELECT txid, from_hex(txid) AS raw FROM (SELECT DISTINCT txid
        FROM (SELECT txid FROM {rows(added, "txid")} UNION ALL {rows(gone, "txid")}))"""
    ).to_arrow_table()
    if not txids.num_rows:
        return 0
    # Database keys: txids in internal byte order, sorted.
    affected = pa.table(
        {
            "txid": txids.column("txid").combine_chunks(),
            "k": _native.reversed_hashes(txids.column("raw").combine_chunks()),
        }
    )
    affected = affected.take(pc.sort_indices(affected.column("k")))
    con.register("affected", affected)
    existing = data.cf(layout.CF_BTC_TXINDEX)[affected.column("k").to_pylist()]
    stored = pa.Table.from_batches([_native.decode_txindex_places(existing)])
    con.register(
        "stored",
        stored.append_column("k", affected.column("k")).append_column(
            "v", pa.array(existing, pa.binary())
        ),
    )
    # An entry pointing at a best-chain block at or below the kept tip outranks every new row
    # (one stored by height was on the best chain when written, and the kept segments are the
    # chain below the fork); any other is resolved again among the new rows (best chain first,
    # then lowest, then by block hash, as a full build orders copies), or dropped when there
    # is none.
    winners = con.sql(
        f"""
        WITH keep AS (
          SELECT s.k FROM stored s WHERE s.best AND s.height <= {kept_tip}
          UNION ALL
          SELECT s.k FROM stored s JOIN headers h ON h.hash = s.block_hash
          WHERE NOT s.best AND h.in_best_chain AND h.height <= {kept_tip}
        ),
        winner AS (
          SELECT a.k, c.in_best_chain, c.height, c.height_range, c.block_hash, c.position
          FROM cand c JOIN affected a USING (txid)
          QUALIFY row_number() OVER (
            PARTITION BY c.txid ORDER BY c.in_best_chain DESC, c.height NULLS LAST,
                                         c.block_hash) = 1
        )
        SELECT a.k, w.in_best_chain, w.height, w.height_range::BIGINT AS height_range,
               w.block_hash, w.position, s.v AS old
        FROM affected a LEFT JOIN winner w USING (k) LEFT JOIN stored s USING (k)
        WHERE a.k NOT IN (SELECT k FROM keep)
        ORDER BY a.k"""
    ).to_arrow_table()
    con.unregister("stored")
    con.unregister("affected")
    new = _native.encode_txindex_places(
        *(
            winners.column(c).combine_chunks()
            for c in ("in_best_chain", "height", "height_range", "block_hash", "position")
        )
    )
    old = winners.column("old").combine_chunks()
    same = pc.fill_null(pc.equal(new, old), False)
    both_null = pc.and_(pc.is_null(new), pc.is_null(old))
    changes = pa.table({"k": winners.column("k"), "v": new, "old": old}).filter(
        pc.invert(pc.or_(same, both_null))
    )
    # A change with no winner deletes its entry; one with a winner and no stored entry adds one.
    put = pc.is_valid(changes.column("v"))
    puts = changes.filter(put)
    deletes = changes.filter(pc.invert(put)).column("k")
    data.write_columns(
        {layout.CF_BTC_TXINDEX: (puts.column("k").to_pylist(), puts.column("v").to_pylist())},
        {layout.CF_BTC_TXINDEX: deletes.to_pylist()},
    )
    kill_point("indexes.entries_updated")
    return int(pc.count(puts.column("old"), mode="only_null").as_py()) - len(deletes)


def write_txindex(
    data: DataDir,
    budget: int,
    on_ray: bool = False,
    shared: bool = True,
    stats: dict[str, float] | None = None,
    threads: int = 1,
) -> int:
    """txid -> where the published tables hold it; a txid in several blocks (BIP30 duplicates,
    side branches) points at its best-chain copy, else its lowest one. Built by the Rust core
    (``btc/txindex.rs``) from the staged txids of every decoded copy, which the tables hold
    once each, in sorted runs within the memory budget, merged into SST files: here, or on
    Ray (``on_ray``) in ranges of txids, each range's files built by a task of its own and
    all of them ingested at once (``shared``: the workers write into the data folder, else
    they hand back the files' bytes; ``stats`` gets the seconds of that, ``txindex_ray_s``).
    Here, the keys are cut into ``threads`` ranges whose files are written side by side."""
    gen = newest_generation(data.parquet_dir(ds.HEADERS))
    if gen is None:
        raise RechainError("the header pass published no headers table")
    headers = pq.read_table(gen, columns=["hash", "height", "in_best_chain"])
    work = data.path / "tmp" / "txindex"
    shutil.rmtree(work, ignore_errors=True)
    if on_ray:
        t0 = time.perf_counter()
        files, entries, unknown = _build_on_ray(data, headers, work, budget, shared)
        if stats is not None:
            stats["txindex_ray_s"] = time.perf_counter() - t0
    else:
        files, entries, unknown = _native.write_txindex(
            staged_txid_files(data),
            [],
            *_build_args(headers, budget, work / "runs", work / "sst", threads),
        )
    if unknown:
        log.warning("tx index: %d staged transaction(s) of blocks the headers lack", unknown)
    kill_point("indexes.sst_written")
    data.reset_column_family(layout.CF_BTC_TXINDEX)
    kill_point("indexes.index_reset")
    if files:
        data.ingest_sst(layout.CF_BTC_TXINDEX, [Path(f) for f in files])
    kill_point("indexes.sst_ingested")
    shutil.rmtree(work, ignore_errors=True)
    return int(entries)


def staged_txid_files(data: DataDir) -> list[str]:
    """Every staged transaction copy's txid, block hash and position: the body pass's parts
    (the copies it decoded) and the applied chain's ``transactions`` rows (the best chain,
    which the chain state decoded). A copy in both is the same entry twice."""
    return body_parts.txid_files(data) + chain_parts.transaction_files(data)


def _build_args(
    headers: pa.Table, budget: int, spill: Path, sst: Path, threads: int = 1
) -> tuple[Any, ...]:
    """``_native.write_txindex``'s arguments after the copies (files, batches): sorted runs
    spilled to ``spill``, SST files written to ``sst``, ranges of keys on ``threads``."""
    return (
        headers.column("hash").combine_chunks(),
        headers.column("height").combine_chunks(),
        headers.column("in_best_chain").combine_chunks(),
        ds.HEIGHT_RANGE_BLOCKS,
        # A whole build's sorted runs of index entries (40 bytes an entry) stay within this
        # share; more entries are spilled to sorted files and merged.
        budget_share(budget, "bitcoin", "indexes.txindex"),
        spill,
        sst,
        # An SST file holds its filter's key hashes and its index until it closes: a first
        # build closes each file once they take this share.
        budget_share(budget, "bitcoin", "indexes.sst"),
        # Keys are random txids and values carry a block hash: Snappy shrank no block of a
        # 3.35M-entry index by the eighth RocksDB requires, and took a fifth of the build.
        False,
        max(threads, 1),
    )


def _build_on_ray(
    data: DataDir, headers: pa.Table, work: Path, budget: int, shared: bool
) -> tuple[list[str], int, int]:
    """The index's SST files built on Ray: split tasks over runs of the staged txid files
    sort their rows into ranges of txids (the first two bytes of the key), a build task per
    range builds its files. Returns (files in key order, entries, unknown copies)."""
    import numpy as np
    import ray
    from rechain.pipeline.runtime.ray_cluster import ordered_results, record_nodes, spread_tasks

    files = staged_txid_files(data)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    ranges = min(2 * cpus, MAX_RAY_TASKS)
    runs = [r for r in np.array_split(np.array(files), min(ranges, len(files))) if len(r)]
    splits = spread_tasks(split_txids, [(tuple(str(f) for f in r), ranges) for r in runs], ranges)
    header_ref = ray.put(headers)
    folder = str(work) if shared else None
    units = ((k, [split[k] for split in splits]) for k in range(ranges))
    out: list[str] = []
    entries = unknown = 0
    window = max(2, 2 * cpus)
    results = ordered_results(_build_range, units, window, STAGE, header_ref, budget, folder)
    for (k, _), result in results:
        if isinstance(result, Exception):
            raise RechainError(f"tx index: range {k}: {result}")
        built, n, u = result
        entries += n
        unknown += u
        for i, content in enumerate(built):
            if isinstance(content, bytes):
                path = work / "sst" / f"{k:04d}" / f"{i:06d}.sst"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
                content = str(path)
            out.append(content)
    record_nodes(splits)
    return out, entries, unknown


def split_txids(files: tuple[str, ...], ranges: int) -> list[pa.Table]:
    """The staged copies of ``files`` (``txid``, ``block_hash``, ``position``), one table per
    range of txids: range ``k`` holds the keys (txids in internal order) whose first two
    bytes, read as a big-endian number, lie in ``[k, k + 1) * 65536 / ranges``."""
    import numpy as np

    table = pa.concat_tables(
        [
            _binary_hashes(pq.read_table(f, columns=["txid", "block_hash", "position"]))
            for f in files
        ],
        promote_options="permissive",
    )
    try:
        txids = table.column("txid").combine_chunks().cast(pa.binary(32))
    except pa.ArrowInvalid as e:
        raise RechainError(f"tx index: a staged txid that is not 32 bytes ({e})") from e
    if txids.null_count:
        raise RechainError("tx index: a staged copy without a txid")
    raw = np.frombuffer(txids.buffers()[1], np.uint8)
    grid = raw[txids.offset * 32 : (txids.offset + len(txids)) * 32].reshape(-1, 32)
    # The key reverses the staged (display) txid: its first bytes are the txid's last ones.
    top = grid[:, 31].astype(np.int64) * 256 + grid[:, 30]
    which = (top * ranges) >> 16
    order = np.argsort(which, kind="stable")
    table = table.take(pa.array(order))
    bounds = np.searchsorted(which[order], np.arange(ranges + 1))
    return [table.slice(lo, hi - lo) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def _binary_hashes(table: pa.Table) -> pa.Table:
    """``table`` with its hash columns as staged parts hold them (32 bytes, display order):
    the chain state's ``transactions`` rows hold them as display hex."""
    for name in ("txid", "block_hash"):
        column = table.column(name)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            raw = _native.hashes_from_hex(column.combine_chunks())
            table = table.set_column(table.schema.get_field_index(name), name, raw)
    return table


def _build_range(
    unit: tuple[int, list[Any]], headers: pa.Table, budget: int, work: str | None
) -> tuple[list[str | bytes], int, int]:
    """One range's SST files from its rows of every split (references), in ``work`` (the
    data folder's) or, for a worker that cannot reach it, as bytes."""
    import tempfile

    import ray

    k, refs = unit
    batches = [b for t in ray.get(refs) for b in t.to_batches() if b.num_rows]
    with tempfile.TemporaryDirectory(prefix="rechain-txindex-") as scratch:
        base = Path(work or scratch)
        spill, sst = base / "runs" / f"{k:04d}", base / "sst" / f"{k:04d}"
        built, entries, unknown = _native.write_txindex(
            [], batches, *_build_args(headers, budget, spill, sst)
        )
        shutil.rmtree(spill, ignore_errors=True)
        files: list[str | bytes] = [
            str(f) if work is not None else Path(f).read_bytes() for f in built
        ]
    return files, int(entries), int(unknown)
