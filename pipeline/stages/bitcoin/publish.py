"""Stage ``publish``: the ``blocks``, ``transactions``, ``inputs`` and ``outputs`` tables.

Hive-partitioned by height range, with heights, ``in_best_chain``, input values and fees. Each
publication is a new generation of each table (temp folder, fsync, rename), which then
becomes the current one.

The best chain's rows are published in *segments*, one per chain-state part (a run of
heights inside one partition, ``height_range=R/seg-FIRST-LAST.parquet``), listed in a manifest
(``META_BTC_PUBLISHED``). ``transactions`` and ``inputs`` segments are the rows the chain
state wrote for its part, linked in as they are; ``blocks`` and ``outputs`` segments are
written by DuckDB (``session``) from the staged bodies, the headers and the parts' resolved
spends. A rerun keeps every segment whose heights are still a part and whose last block is
still on the best chain (hard links into the new generation) and writes the others. The one
column of old rows that new blocks change, ``outputs.spent``, is checked per segment by a
fingerprint of the best-chain spends into it; a segment whose fingerprint moved gets its
outputs file rewritten from the published one. Rows of blocks off the best chain (side
branches, orphans, invalid blocks: few) are written again each time (``offchain_*.parquet``)
from the staged bodies.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import duckdb
from rechain.pipeline import btc_bodies
from rechain.pipeline.stages.bitcoin import BtcRun, chain_state
from rechain.pipeline.stages.bitcoin.session import (
    duckdb_memory_errors,
    hex_sql,
    spends_view,
    sql_list,
    staged_views,
)
from rechain.pipeline.stages.engine import Done, Stage
from rechain.pipeline.store import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.schemas import tables
from rechain.workers import _native

log = logging.getLogger(__name__)

#: The tables this stage publishes, in publication order.
FULL_TABLES = (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS)
OFFCHAIN = "offchain"


class PublishStage(Stage[BtcRun]):
    name = "publish"

    def output(self, ctx: BtcRun) -> Any:
        return ctx.data.meta_get(layout.META_BTC_FULL_GENERATION)

    def reset(self, ctx: BtcRun, data: DataDir) -> None:
        """``--from-stage``: every segment is written again."""
        data.write({}, {layout.CF_META: [layout.META_BTC_PUBLISHED]})

    def run(self, ctx: BtcRun) -> Done:
        data = ctx.data
        t = time.perf_counter()
        generation = int(data.meta_get(layout.META_BTC_FULL_GENERATION) or 0) + 1
        with duckdb_memory_errors(data, ctx.opts.memory_budget):
            rows, work = publish_tables(ctx.session(), data, generation, ctx.opts.memory_budget)
        # The older generations stay until the indexes stage has read what changed.
        ctx.full["publish_s"] = ctx.full.get("publish_s", 0.0) + time.perf_counter() - t
        ctx.full.update({f"publish_{k}": v for k, v in work.items()})
        return Done(rows=sum(rows.values()), detail={"tables": rows, "generation": generation})


def _height_range(height: int) -> int:
    return height // ds.HEIGHT_RANGE_BLOCKS * ds.HEIGHT_RANGE_BLOCKS


def _bucket(height: int) -> int:
    return height // chain_state.SEGMENT_BLOCKS


def segment_path(first: int, last: int) -> str:
    """A segment's file, relative to a table generation."""
    return f"{tables.HEIGHT_RANGE}={_height_range(first)}/seg-{first:010d}-{last:010d}.parquet"


def _context(table: str) -> str:
    rng = ds.HEIGHT_RANGE_BLOCKS
    return (
        f"h.height, h.in_best_chain, "
        f"coalesce(h.height // {rng} * {rng}, -1)::BIGINT AS {tables.HEIGHT_RANGE}"
    )


def _select_sql(table: str, s: str, where: str, spent: str) -> str:
    """The rows of ``table`` whose block passes ``where`` (over ``h``, its headers row), read
    from the staged views with suffix ``s``, the spends of their heights (view ``res{s}``)
    and the spends of their outputs (``spent``, a ``_spent_sql``).
    ``inputs`` and ``outputs`` keep the staged parts' order (file order, close to height
    order): sorting their witness and script payloads would not stay within a small budget."""
    context = _context(table)
    tx_in = f"""(SELECT b.hash AS block_hash, f.position, f.input_value, f.resolved
        FROM (SELECT height, pos AS position, sum(value)::UBIGINT AS input_value,
                     count(value) = count(*) AS resolved
              FROM res{s} GROUP BY ALL) f
        JOIN headers b ON b.in_best_chain AND b.height = f.height)"""
    if table == "blocks":
        return f"""
        SELECT h.hash, {context}, h.status,
          sb.valid AND h.status <> 'invalid' AS valid,
          coalesce(sb.invalid_reason, CASE WHEN h.status = 'invalid' THEN h.invalid_reason END)
            AS invalid_reason,
          h.version, h.time, h.bits, h.prev_hash, h.merkle_root,
          sb.size, sb.stripped_size, sb.weight, sb.n_tx, sb.n_inputs, sb.n_outputs,
          sb.output_value, fee.fees, sb.coinbase_height, sb.file, sb."offset"
        FROM sb{s} sb JOIN headers h ON h.file = sb.file AND h."offset" = sb."offset"
        LEFT JOIN (
          SELECT f.block_hash, sum(f.input_value - t.output_value)::BIGINT AS fees
          FROM {tx_in} f JOIN st{s} t ON t.block_hash = f.block_hash AND t.position = f.position
          WHERE f.resolved GROUP BY ALL
        ) fee ON fee.block_hash = h.hash
        WHERE {where}
        ORDER BY h.height NULLS LAST, h.hash"""
    if table == "transactions":
        return f"""
        SELECT t.txid, t.wtxid, t.block_hash, {context}, t.position, t.version, t.lock_time,
          t.size, t.vsize, t.weight, t.n_in, t.n_out, t.is_coinbase, t.has_witness,
          t.output_value, f.input_value,
          CASE WHEN f.resolved THEN f.input_value::BIGINT - t.output_value::BIGINT END AS fee
        FROM st{s} t JOIN headers h ON h.hash = t.block_hash
        LEFT JOIN {tx_in} f ON f.block_hash = t.block_hash AND f.position = t.position
        WHERE {where}"""
    if table == "inputs":
        return f"""
        SELECT i.txid, i.vin, i.prev_txid, i.prev_vout,
          {hex_sql("i.script_sig")} AS script_sig, i.sequence, i.witness_items,
          list_transform(i.witness, lambda w: {hex_sql("w")}) AS witness,
          r.value, i.block_hash, i.tx_position, {context}
        FROM si{s} i JOIN headers h ON h.hash = i.block_hash
        LEFT JOIN (SELECT height, pos, vin, value FROM res{s}) r
          ON h.in_best_chain AND r.height = h.height AND r.pos = i.tx_position
             AND r.vin = i.vin
        WHERE {where}"""
    assert table == "outputs"
    return f"""
        SELECT o.txid, o.vout, o.value, o.script_type::VARCHAR AS script_type, o.address,
          {hex_sql("o.script_pubkey")} AS script_pubkey, o.block_hash, o.tx_position, {context},
          CASE WHEN h.in_best_chain THEN s.prev_height IS NOT NULL END AS spent
        FROM so{s} o JOIN headers h ON h.hash = o.block_hash
        LEFT JOIN ({spent}) s
          ON h.in_best_chain AND s.prev_height = h.height AND s.prev_txid = o.txid
             AND s.prev_vout = o.vout
        WHERE {where}"""


def _spent_sql(res: str, first: int | None = None, last: int | None = None) -> str:
    """Best-chain spends as (prev_height, prev_txid hex, prev_vout), of outputs created at
    heights ``first`` to ``last`` when given."""
    where = "" if first is None else f"WHERE prev_height BETWEEN {first} AND {last}"
    return f"SELECT prev_height, lower(hex(prev_txid)) AS prev_txid, prev_vout FROM {res} {where}"


def _copy(
    con: duckdb.DuckDBPyConnection, table: str, sql: str, dest: Path, group_bytes: int, **kw: Any
) -> None:
    """Writes ``sql`` cast to ``table``'s declared schema as Parquet at ``dest`` (one file, or
    a Hive-partitioned folder when ``partition`` is given)."""
    t = tables.TABLES[table]
    partition = kw.get("partition")
    cols = tables.duckdb_select(t, sql)
    if partition is None:
        cols = f"SELECT * EXCLUDE ({tables.HEIGHT_RANGE}) FROM ({cols})"
        extra = ""
    else:
        extra = f", PARTITION_BY ({t.partition_by}), FILENAME_PATTERN '{partition}_{{i}}'"
    dest.parent.mkdir(parents=True, exist_ok=True)
    con.execute(
        f"COPY ({cols}) TO '{dest}' (FORMAT PARQUET, COMPRESSION {t.compression.upper()}, "
        f"ROW_GROUP_SIZE {t.row_group_rows}, ROW_GROUP_SIZE_BYTES {group_bytes}{extra})"
    )


def _part_blocks(con: duckdb.DuckDBPyConnection, data: DataDir) -> dict[str, Any]:
    """Which staged parts hold which blocks: (part, height or None, in best chain)."""
    parts = btc_bodies.registered_parts(data)
    if not parts:
        return {"best": [], "off": set()}
    files = {str(btc_bodies.part_path(data, p, "blocks")): p for p in parts}
    rows = con.execute(
        f"""SELECT DISTINCT b.filename, h.height, coalesce(h.in_best_chain, false)
        FROM read_parquet({sql_list(list(files))}, filename = true) b
        JOIN headers h ON h.hash = {hex_sql("b.hash")}"""
    ).fetchall()
    best = [(files[f], int(height)) for f, height, on in rows if on]
    off = {files[f] for f, _, on in rows if not on}
    return {"best": best, "off": off}


def publish_tables(
    con: duckdb.DuckDBPyConnection, data: DataDir, generation: int, budget: int = 1 << 30
) -> tuple[dict[str, int], dict[str, float]]:
    """Publishes ``generation`` of the four tables; returns (rows per table, what it did:
    segments kept, written, outputs rewritten, seconds per phase)."""
    # A row group is buffered whole before it is written: bound it in bytes as well as rows
    # (inputs and outputs rows carry scripts and witnesses).
    group_bytes = max(budget // 16, 1 << 20)
    manifest = data.meta_get(layout.META_BTC_PUBLISHED) or {}
    old_gen = manifest.get("generation")
    old = [] if old_gen is None else list(manifest["segments"])
    if old_gen is not None and not all(
        (data.parquet_dir(t) / f"{old_gen:06d}").is_dir() for t in FULL_TABLES
    ):
        old = []
    best = chain_state.best_chain(data)

    def best_hash(h: int) -> str:
        return str(_native.display_hash(best[32 * h : 32 * h + 32]))

    # Segments of the same heights still ending on the best chain are kept; every other
    # chain-state part is a new segment.
    by_range = {(seg["first"], seg["last"], seg["hash"]): seg for seg in old}
    kept: list[dict[str, Any]] = []
    new: list[tuple[int, int, str]] = []
    for first, last, part in chain_state.parts(data):
        seg = by_range.get((first, last, best_hash(last)))
        if seg is None:
            new.append((first, last, part))
        else:
            kept.append(seg)

    clock = time.perf_counter()
    seconds = dict.fromkeys(("prints_s", "kept_s", "new_s", "offchain_s", "sync_s"), 0.0)

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[phase] += now - clock
        clock = now

    spends_view(con, "res_all", chain_state.spend_files(data))
    # Fingerprint of the spends into each segment's outputs: a moved one means some of its
    # ``spent`` flags changed.
    segs = sorted([(s["first"], s["last"]) for s in kept] + [(a, b) for a, b, _ in new])
    prints = _spent_prints(con, segs)
    placement = _part_blocks(con, data)
    lap("prints_s")
    # The staged parts holding best-chain blocks, by SEGMENT_BLOCKS run of heights.
    buckets: dict[int, set[str]] = {}
    for part, h in placement["best"]:
        buckets.setdefault(_bucket(h), set()).add(part)

    rows: dict[str, int] = {}
    work: dict[str, float] = {"segments_kept": 0, "segments_written": 0, "outputs_rewritten": 0}
    segments_out: list[dict[str, Any]] = []
    for name in FULL_TABLES:
        log.info("publish: %s", name)
        tmp = data.begin_generation(name, generation)
        old_dir = None if old_gen is None else data.parquet_dir(name) / f"{old_gen:06d}"
        for seg in kept:
            dest = tmp / seg["path"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            assert old_dir is not None
            if name == ds.OUTPUTS and prints[(seg["first"], seg["last"])] != seg["spent"]:
                _rewrite_outputs(con, old_dir / seg["path"], dest, seg, group_bytes)
                work["outputs_rewritten"] += 1
            else:
                os.link(old_dir / seg["path"], dest)
        lap("kept_s")
        for first, last, part in new:
            if name in chain_state.ROW_TABLES:
                dest = tmp / segment_path(first, last)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.link(chain_state.rows_dir(data, name) / part, dest)
                continue
            runs = range(_bucket(first), _bucket(last) + 1)
            parts = sorted(set().union(*(buckets.get(b, set()) for b in runs)))
            staged_views(con, data, parts, "_seg")
            spends_view(con, "res_seg", chain_state.spend_files(data, first, last))
            where = f"h.in_best_chain AND h.height BETWEEN {first} AND {last}"
            sql = _select_sql(name, "_seg", where, _spent_sql("res_all", first, last))
            _copy(con, name, sql, tmp / segment_path(first, last), group_bytes)
        lap("new_s")
        # Rows of blocks off the best chain, from the parts that hold any.
        staged_views(con, data, sorted(placement["off"]), "_off")
        spends_view(con, "res_off", [])
        off = tmp.parent / f".{generation:06d}.{OFFCHAIN}"
        shutil.rmtree(off, ignore_errors=True)
        off_chain = "NOT coalesce(h.in_best_chain, false)"
        sql = _select_sql(name, "_off", off_chain, _spent_sql("res_off"))
        _copy(con, name, sql, off, group_bytes, partition=OFFCHAIN)
        for f in off.rglob("*.parquet"):
            dest = tmp / f.relative_to(off)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(f, dest)
        shutil.rmtree(off, ignore_errors=True)
        lap("offchain_s")
        # Row counts from the Parquet footers, not by running the queries twice.
        written = con.execute(
            f"SELECT count(*) FROM read_parquet('{tmp}/**/*.parquet', hive_partitioning = true)"
        ).fetchall()
        rows[name] = int(written[0][0])
        data.publish_generation(name, generation, tmp)
        lap("sync_s")
    work.update(seconds)
    work["segments_kept"] = len(kept)
    work["segments_written"] = len(new)
    for first, last in segs:
        segments_out.append(
            {
                "first": first,
                "last": last,
                "hash": best_hash(last),
                "path": segment_path(first, last),
                "spent": prints[(first, last)],
            }
        )
    data.write(
        {
            layout.CF_META: [
                (layout.META_BTC_FULL_GENERATION, generation),
                (layout.META_BTC_PUBLISHED, {"generation": generation, "segments": segments_out}),
            ]
        }
    )
    return rows, work


def _spent_prints(
    con: duckdb.DuckDBPyConnection, segs: list[tuple[int, int]]
) -> dict[tuple[int, int], str]:
    """Per segment (first, last): count and hash sum of the best-chain spends of its outputs."""
    if not segs:
        return {}
    import pyarrow as pa

    con.register(
        "segs",
        pa.table({"first": [a for a, _ in segs], "last": [b for _, b in segs]}),
    )
    got = con.execute(
        """SELECT g.first, g.last, count(r.prev_height),
                  coalesce(sum(hash(r.prev_height, r.prev_txid, r.prev_vout)::HUGEINT), 0)
        FROM segs g LEFT JOIN res_all r ON r.prev_height BETWEEN g.first AND g.last
        GROUP BY ALL"""
    ).fetchall()
    con.unregister("segs")
    return {(int(a), int(b)): f"{n}:{h}" for a, b, n, h in got}


def _rewrite_outputs(
    con: duckdb.DuckDBPyConnection, src: Path, dest: Path, seg: dict[str, Any], group_bytes: int
) -> None:
    """A published outputs segment again, with ``spent`` from the current spends."""
    _copy(
        con,
        ds.OUTPUTS,
        f"""SELECT o.* REPLACE (s.prev_height IS NOT NULL AS spent),
               {_height_range(seg["first"])}::BIGINT AS {tables.HEIGHT_RANGE}
        FROM read_parquet('{src}') o
        LEFT JOIN ({_spent_sql("res_all", seg["first"], seg["last"])}) s
          ON s.prev_height = o.height AND s.prev_txid = o.txid AND s.prev_vout = o.vout""",
        dest,
        group_bytes,
    )


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
