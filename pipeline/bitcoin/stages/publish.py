"""Stage ``publish``: the ``blocks``, ``transactions``, ``inputs`` and ``outputs`` tables.

Hive-partitioned by height range, with heights, ``in_best_chain``, input values and fees. Each
publication is a new generation of each table (temp folder, fsync, rename), which then
becomes the current one.

The best chain's rows are published in *segments*, one per chain-state part (a run of
heights inside one partition, ``height_range=R/seg-FIRST-LAST.parquet``), listed in a manifest
(``META_BTC_PUBLISHED``). ``blocks``, ``transactions`` and ``inputs`` segments are the rows
the chain state wrote for its part, linked in as they are. ``outputs`` rows it wrote unspent
(the blocks that spend them come later); a new segment is that file copied with its ``spent``
column set from the best-chain spends of its outputs (``outputs_spent``: partitioned by
segment in one DuckDB pass, or shuffled through Ray's object store where the chain state ran on
Ray), in Rust, which copies the other columns' encoded pages as they are;
the staged file then becomes a link to the published one, so the outputs are on disk once.
A rerun keeps every segment whose heights are still a part and whose last block is still on
the best chain (hard links into the new generation) and writes the others. The one column of
old rows that new blocks change, ``outputs.spent``, is checked per segment by a fingerprint
of the best-chain spends into it; a segment whose fingerprint moved is copied the same way
from the published file. When the new parts only extend the chain, the fingerprints and
rewrites need only the new parts' spends (flags only turn on); after an unwind every
segment's are counted again. Rows of blocks off the best chain (side branches,
orphans, invalid blocks: few) are published in groups of the staged body parts holding any
(``offchain_GROUP_I.parquet``), a group kept while each of its parts holds the same off-chain
blocks (hash, height, status); parts whose blocks changed are written again, a group each.
A group's rows come from its parts' staged verdict rows (``blocks``) and from its off-chain
copies decoded again in full from their blk files (the body pass stages no other rows,
``OffchainDecoder``) into scratch files under ``DATADIR/tmp/offchain`` for the run.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from rechain.pipeline.bitcoin import body_parts, chain_parts
from rechain.pipeline.bitcoin.body_units import cut_units, unit_bytes
from rechain.pipeline.bitcoin.outputs_spent import Segment, copy_segments
from rechain.pipeline.bitcoin.published import FULL_TABLES, OFFCHAIN, count_rows
from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.bitcoin.session import (
    duckdb_memory_errors,
    hex_sql,
    spends_view,
    sql_list,
    staged_views,
)
from rechain.pipeline.engine.driver import Done, Stage
from rechain.pipeline.errors import RechainError
from rechain.pipeline.progress import Progress
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.runtime.local_runner import ordered_local
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.schemas import tables
from rechain.workers import _native
from rechain.workers.btc_decode import BodyUnit, decode_unit
from rechain.workers.fault_injection import kill_point

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger(__name__)

#: More staged parts than this with off-chain rows to write go in one group (one query).
OFFCHAIN_GROUP_PARTS = 8


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
        redecode = OffchainDecoder(
            ctx.paths, ctx.opts.network, ctx.key, unit_bytes(ctx.opts.memory_budget), ctx.workers
        )
        # On a cluster the outputs copies run where the chain state's tasks ran.
        on_ray = ctx.executor.partitioned
        with duckdb_memory_errors(data, ctx.opts.memory_budget):
            rows, work = publish_tables(
                ctx.session(),
                data,
                generation,
                ctx.opts.memory_budget,
                ctx.workers,
                redecode,
                on_ray,
                ctx.executor.workers_share_data_folder,
                ctx.opts.progress,
            )
        # The older generations stay until the indexes stage has read what changed.
        ctx.full["publish_s"] = ctx.full.get("publish_s", 0.0) + time.perf_counter() - t
        ctx.full.update({f"publish_{k}": v for k, v in work.items()})
        return Done(rows=sum(rows.values()), detail={"tables": rows, "generation": generation})


@dataclass(frozen=True)
class OffchainDecoder:
    """Decodes the off-chain copies of an off-chain group's staged parts again, in full, from
    their blk files (by file number in ``paths``), in units of ``unit_size`` block bytes on
    ``threads`` threads (the Rust core releases the GIL), and writes their transactions,
    inputs and outputs as Parquet files in a folder."""

    paths: dict[int, str]
    network: str
    key: bytes
    unit_size: int
    threads: int = 1

    def __call__(self, copies: pa.Table, folder: Path) -> dict[str, list[str]]:
        """The files of ``copies`` (``hash`` as staged, ``file``, ``offset``, ``size``) per
        table (``transactions``, ``inputs``, ``outputs``). A copy that no longer decodes to
        the valid block its verdict says (its file changed since the scan read it) stops the
        run: its rows would silently differ."""
        missing = set(copies.column("file").to_pylist()) - set(self.paths)
        if missing:
            raise RechainError(
                f"publish: blk file(s) {sorted(missing)} of staged off-chain blocks are gone: "
                "rerun the reindex"
            )
        units = cut_units(copies, self.paths, self.network, self.key, self.unit_size)
        places = zip(
            copies.column("file").to_pylist(), copies.column("offset").to_pylist(), strict=True
        )
        expect = dict(zip(places, copies.column("hash").to_pylist(), strict=True))
        folder.mkdir(parents=True, exist_ok=True)
        files: dict[str, list[str]] = {t: [] for t in ("transactions", "inputs", "outputs")}
        window = max(1, self.threads)
        for unit, got in ordered_local(decode_unit, units, self.threads, window):
            if isinstance(got, Exception):
                raise RechainError(f"publish: {Path(unit.path).name}: {got}") from got
            _check_redecoded(unit, got.blocks, expect)
            for table, batch in (
                ("transactions", got.transactions),
                ("inputs", got.inputs),
                ("outputs", got.outputs),
            ):
                path = folder / f"{unit.seq:06d}.{table}.parquet"
                options = tables.STAGED[ds.BODY_STAGED[table]].pyarrow_options()
                pq.write_table(pa.Table.from_batches([batch]), path, **options)
                files[table].append(str(path))
        return files


def _check_redecoded(unit: BodyUnit, blocks: pa.RecordBatch, expect: dict[Any, bytes]) -> None:
    """Each copy of ``unit`` decoded again is the valid block of hash ``expect[(file,
    offset)]``, as its staged verdict says."""
    hashes = blocks.column("hash").to_pylist()
    valid = blocks.column("valid").to_pylist()
    offsets = blocks.column("offset").to_pylist()
    for h, ok, off in zip(hashes, valid, offsets, strict=True):
        if not ok or h != expect.get((unit.file_no, off)):
            raise RechainError(
                f"publish: the block at {Path(unit.path).name}:{off} is no longer the block "
                "its staged verdict names (the file changed since its scan): rerun the reindex"
            )


def segment_path(first: int, last: int) -> str:
    """A segment's file, relative to a table generation."""
    return f"{tables.HEIGHT_RANGE}={ds.height_range(first)}/seg-{first:010d}-{last:010d}.parquet"


def _context(table: str) -> str:
    rng = ds.HEIGHT_RANGE_BLOCKS
    return (
        f"h.height, h.in_best_chain, "
        f"coalesce(h.height // {rng} * {rng}, -1)::BIGINT AS {tables.HEIGHT_RANGE}"
    )


def _select_sql(table: str, s: str, where: str) -> str:
    """The rows of ``table`` whose block passes ``where`` (over ``h``, its headers row), read
    from the staged views with suffix ``s`` and the spends of their heights (view ``res{s}``).
    ``outputs`` rows get a ``spent`` flag only on the best chain, whose rows the chain state
    writes (and ``outputs_spent`` flags): here it is null.
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
          r.value, NULL::VARCHAR AS prev_script_pubkey, NULL::VARCHAR AS prev_script_type,
          NULL::VARCHAR AS prev_address, i.block_hash, i.tx_position, {context}
        FROM si{s} i JOIN headers h ON h.hash = i.block_hash
        LEFT JOIN (SELECT height, pos, vin, value FROM res{s}) r
          ON h.in_best_chain AND r.height = h.height AND r.pos = i.tx_position
             AND r.vin = i.vin
        WHERE {where}"""
    assert table == "outputs"
    return f"""
        SELECT o.txid, o.vout, o.value, o.script_type::VARCHAR AS script_type, o.address,
          {hex_sql("o.script_pubkey")} AS script_pubkey, o.block_hash, o.tx_position, {context},
          NULL::BOOLEAN AS spent
        FROM so{s} o JOIN headers h ON h.hash = o.block_hash
        WHERE {where}"""


def _copy_offchain(
    con: duckdb.DuckDBPyConnection,
    table: str,
    queries: dict[str, str],
    dest: Path,
    group_bytes: int,
) -> dict[Path, str]:
    """Writes each group's query (``queries``: group -> SQL), cast to ``table``'s declared
    schema, as Parquet under ``dest`` in one ``COPY`` partitioned by height range and group:
    each query costs as much as the rows it has, not a fixed planning and writing cost per
    group. Returns each file, relative to ``dest``, with its published name
    (``HEIGHT_RANGE=R/offchain_GROUP_I.parquet``)."""
    if not queries:
        return {}
    t = tables.TABLES[table]
    groups = sorted(queries)
    union = " UNION ALL ".join(
        f"SELECT *, {i} AS _group FROM ({tables.duckdb_select(t, queries[g])})"
        for i, g in enumerate(groups)
    )
    dest.parent.mkdir(parents=True, exist_ok=True)
    con.execute(
        f"COPY ({union}) TO '{dest}' (FORMAT PARQUET, COMPRESSION {t.compression.upper()}, "
        f"ROW_GROUP_SIZE {t.row_group_rows}, ROW_GROUP_SIZE_BYTES {group_bytes}, "
        f"PARTITION_BY ({t.partition_by}, _group), FILENAME_PATTERN '{OFFCHAIN}_{{i}}')"
    )
    names: dict[Path, str] = {}
    for f in dest.rglob("*.parquet"):
        rel = f.relative_to(dest)
        folder, group_dir = rel.parts[0], rel.parts[1]
        group = groups[int(group_dir.removeprefix("_group="))]
        n = f.stem.removeprefix(f"{OFFCHAIN}_")
        names[rel] = f"{folder}/{OFFCHAIN}_{group}_{n}.parquet"
    return names


def _part_blocks(con: duckdb.DuckDBPyConnection, data: DataDir) -> dict[str, Any]:
    """Which staged parts hold blocks off the best chain: ``off``, per such part, a print of
    those blocks (hash, height, status), which is all its off-chain rows depend on besides
    the part itself."""
    parts = body_parts.registered_parts(data)
    if not parts:
        return {"off": {}}
    files = {str(body_parts.part_path(data, p, "blocks")): p for p in parts}
    rows = con.execute(
        f"""SELECT b.filename, sum(hash(h.hash, h.height, h.status, h.invalid_reason))
        FROM read_parquet({sql_list(list(files))}, filename = true) b
        JOIN headers h ON h.hash = {hex_sql("b.hash")}
        WHERE NOT coalesce(h.in_best_chain, false)
        GROUP BY ALL"""
    ).fetchall()
    return {"off": {files[f]: str(int(h) % (1 << 64)) for f, h in rows}}


def _offchain_copies(con: duckdb.DuckDBPyConnection, data: DataDir, parts: list[str]) -> pa.Table:
    """The copies staged in ``parts`` whose rows an off-chain group publishes: valid ones
    (only those have transactions, inputs and outputs) of blocks off the best chain."""
    files = [str(body_parts.part_path(data, p, "blocks")) for p in parts]
    return con.sql(
        f"""SELECT b.hash, b.file, b."offset", b.size
        FROM read_parquet({sql_list(files)}) b JOIN headers h ON h.hash = {hex_sql("b.hash")}
        WHERE b.valid AND NOT coalesce(h.in_best_chain, false)"""
    ).to_arrow_table()


def _share_staged_outputs(data: DataDir, generation: int, new: list[tuple[int, int, str]]) -> None:
    """Each new part's staged ``outputs`` file replaced by a link to its published segment:
    the same rows, with flags a later copy sets again from all the spends into it."""
    published = data.parquet_dir(ds.OUTPUTS) / f"{generation:06d}"
    staged = chain_parts.rows_dir(data, ds.OUTPUTS)
    for first, last, part in new:
        link = staged / f"{part}.link"
        link.unlink(missing_ok=True)
        os.link(published / segment_path(first, last), link)
        os.replace(link, staged / part)


def publish_tables(
    con: duckdb.DuckDBPyConnection,
    data: DataDir,
    generation: int,
    budget: int,
    threads: int = 1,
    redecode: Callable[[pa.Table, Path], dict[str, list[str]]] | None = None,
    on_ray: bool = False,
    shared: bool = True,
    progress: bool = False,
) -> tuple[dict[str, int], dict[str, float]]:
    """Publishes ``generation`` of the four tables; returns (rows per table, what it did:
    segments kept, written, outputs rewritten, seconds per phase). ``redecode`` (an
    ``OffchainDecoder``) gives the rows of the off-chain copies of a group to write.
    ``on_ray``: the ``outputs`` copies run as Ray tasks, written into the data folder by
    workers that share it (``shared``), else handed back as bytes."""
    # A row group is buffered whole before it is written: bound it in bytes as well as rows
    # (inputs and outputs rows carry scripts and witnesses).
    group_bytes = max(budget_share(budget, "bitcoin", "publish.row_groups"), 1 << 20)
    manifest = data.meta_get(layout.META_BTC_PUBLISHED) or {}
    old_gen = manifest.get("generation")
    old = [] if old_gen is None else list(manifest["segments"])
    if old_gen is not None and not all(
        (data.parquet_dir(t) / f"{old_gen:06d}").is_dir() for t in FULL_TABLES
    ):
        old = []
    best = chain_parts.best_chain(data)

    def best_hash(h: int) -> str:
        return str(_native.display_hash(best[32 * h : 32 * h + 32]))

    # Segments of the same heights still ending on the best chain are kept; every other
    # chain-state part is a new segment.
    by_range = {(seg["first"], seg["last"], seg["hash"]): seg for seg in old}
    kept: list[dict[str, Any]] = []
    new: list[tuple[int, int, str]] = []
    for first, last, part in chain_parts.parts(data):
        seg = by_range.get((first, last, best_hash(last)))
        if seg is None:
            new.append((first, last, part))
        else:
            kept.append(seg)

    clock = time.perf_counter()
    seconds = dict.fromkeys(
        ("prints_s", "offchain_decode_s", "kept_s", "new_s", "offchain_s", "sync_s"), 0.0
    )

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[phase] += now - clock
        clock = now

    # Appended: every old segment is kept and every new one lies above them. The spends that
    # can set a ``spent`` flag are then those of the new parts (a spend follows its output),
    # and flags only turn on. Otherwise (an unwind removed spends) every segment's spends are
    # counted again from all parts.
    appended = len(kept) == len(old) and (
        not new or not kept or min(a for a, _, _ in new) > max(seg["last"] for seg in kept)
    )
    all_files = chain_parts.spend_files(data)
    new_files = [str(chain_parts.spends_dir(data) / name) for _, _, name in new]
    spends_view(con, "res_all", all_files)
    spends_view(con, "res_new", new_files)
    changes, change_files = ("res_new", new_files) if appended else ("res_all", all_files)
    # Fingerprint of the spends into each segment's outputs: a moved one means some of its
    # ``spent`` flags changed.
    segs = sorted([(s["first"], s["last"]) for s in kept] + [(a, b) for a, b, _ in new])
    prints = _spent_prints(con, segs, changes)
    if appended:
        for seg in kept:
            key = (seg["first"], seg["last"])
            prints[key] = _add_prints(seg["spent"], prints[key])
    placement = _part_blocks(con, data)
    off_kept, off_new = _offchain_groups(manifest.get("offchain") if old else None, placement)
    lap("prints_s")
    # Views over each off-chain group's staged verdicts and its off-chain copies decoded
    # again, made once for the four tables (binding a view reads its files' footers). No
    # spend is resolved off the best chain: their ``res`` views are empty.
    off_views = {group: f"_off{i}" for i, group in enumerate(sorted(off_new))}
    scratch = data.path / "tmp" / OFFCHAIN
    shutil.rmtree(scratch, ignore_errors=True)
    off_copies = 0
    for group, suffix in off_views.items():
        parts = sorted(off_new[group])
        copies = _offchain_copies(con, data, parts)
        off_copies += copies.num_rows
        if redecode is None:
            raise ValueError("publish_tables: off-chain rows to write need a redecode")
        decoded = redecode(copies, scratch / group) if copies.num_rows else {}
        blocks = [str(body_parts.part_path(data, p, "blocks")) for p in parts]
        staged_views(con, {"blocks": blocks, **decoded}, suffix)
        spends_view(con, f"res{suffix}", [])
    lap("offchain_decode_s")
    rows: dict[str, int] = {}
    work: dict[str, float] = {"segments_kept": 0, "segments_written": 0, "outputs_rewritten": 0}
    segments_out: list[dict[str, Any]] = []
    seg_rows: dict[str, dict[str, int]] = {}
    for name in FULL_TABLES:
        log.info("publish: %s", name)
        tmp = data.begin_generation(name, generation)
        old_dir = None if old_gen is None else data.parquet_dir(name) / f"{old_gen:06d}"
        rewrite: list[dict[str, Any]] = []
        for seg in kept:
            dest = tmp / seg["path"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            assert old_dir is not None
            if name == ds.OUTPUTS and prints[(seg["first"], seg["last"])] != seg["spent"]:
                rewrite.append(seg)
            else:
                os.link(old_dir / seg["path"], dest)
        lap("kept_s")
        if name == ds.OUTPUTS:
            # Every segment whose flags change is copied with its ``spent`` column set from
            # the spends of its outputs (known only now): kept ones from the published file,
            # new ones from the chain state's unspent rows.
            assert old_dir is not None or not rewrite
            segments = [
                Segment(
                    s["first"], s["last"], str(old_dir / s["path"]), str(tmp / s["path"]), appended
                )
                for s in rewrite
            ]
            segments += [
                Segment(
                    first,
                    last,
                    str(chain_parts.rows_dir(data, name) / part),
                    str(tmp / segment_path(first, last)),
                    False,
                )
                for first, last, part in new
            ]
            bar = Progress(
                sum(s.last - s.first + 1 for s in segments),
                enabled=progress,
                label="publish outputs",
                unit="blocks",
            )
            copy_segments(
                segments, con, changes, change_files, threads, budget, on_ray, shared, bar
            )
            bar.close()
            work["outputs_rewritten"] += len(rewrite)
        else:
            # The rows the chain state wrote for the part, final as they are.
            for first, last, part in new:
                dest = tmp / segment_path(first, last)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.link(chain_parts.rows_dir(data, name) / part, dest)
        lap("new_s")
        for group in sorted(off_kept):
            assert old_dir is not None
            for f in old_dir.glob(f"*/{OFFCHAIN}_{group}_*.parquet"):
                dest = tmp / f.relative_to(old_dir)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.link(f, dest)
        # Rows of blocks off the best chain, from the parts of each group written.
        off_chain = "NOT coalesce(h.in_best_chain, false)"
        off = tmp.parent / f".{generation:06d}.{OFFCHAIN}"
        shutil.rmtree(off, ignore_errors=True)
        queries = {g: _select_sql(name, suffix, off_chain) for g, suffix in off_views.items()}
        for rel, published in _copy_offchain(con, name, queries, off, group_bytes).items():
            dest = tmp / published
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(off / rel, dest)
        shutil.rmtree(off, ignore_errors=True)
        lap("offchain_s")
        rewritten = {seg["path"] for seg in rewrite}
        linked = {seg["path"]: seg for seg in kept if seg["path"] not in rewritten}
        rows[name] = count_rows(tmp, linked, name, seg_rows)
        data.publish_generation(name, generation, tmp)
        if name == ds.OUTPUTS:
            _share_staged_outputs(data, generation, new)
            kill_point("publish.outputs_shared")
        lap("sync_s")
    shutil.rmtree(scratch, ignore_errors=True)
    work.update(seconds)
    work["segments_kept"] = len(kept)
    work["segments_written"] = len(new)
    work["offchain_parts_kept"] = sum(len(off_kept[g]) for g in off_kept)
    work["offchain_parts_written"] = sum(len(off_new[g]) for g in off_new)
    work["offchain_blocks_decoded"] = off_copies
    work["spends_appended"] = int(appended)
    for first, last in segs:
        segments_out.append(
            {
                "first": first,
                "last": last,
                "hash": best_hash(last),
                "path": segment_path(first, last),
                "spent": prints[(first, last)],
                "rows": seg_rows.get(segment_path(first, last), {}),
            }
        )
    data.write(
        {
            layout.CF_META: [
                (layout.META_BTC_FULL_GENERATION, generation),
                (
                    layout.META_BTC_PUBLISHED,
                    {
                        "generation": generation,
                        "segments": segments_out,
                        "offchain": {**off_kept, **off_new},
                        "rows": rows,
                    },
                ),
            ]
        }
    )
    kill_point("publish.manifest_written")
    return rows, work


def _offchain_groups(
    old: Any, placement: dict[str, Any]
) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """The groups of staged parts whose off-chain rows share files (``offchain_GROUP_I``):
    (kept, to write), each group as {part: print of its off-chain blocks}. An old group is
    kept while each of its parts holds the same off-chain blocks and no other part joined it.
    The other parts are written in a group each, or in one group when many are (a first run:
    one query per table, not one per part)."""
    prints: dict[str, str] = placement["off"]
    old_groups = old if isinstance(old, dict) else {}
    kept = {
        group: parts
        for group, parts in old_groups.items()
        if isinstance(parts, dict) and all(prints.get(p) == h for p, h in parts.items())
    }
    grouped = {p for parts in kept.values() for p in parts}
    rest = sorted(set(prints) - grouped)
    if len(rest) > OFFCHAIN_GROUP_PARTS:
        name = hashlib.sha256("\n".join(rest).encode()).hexdigest()[:16]
        return kept, {name: {p: prints[p] for p in rest}}
    return kept, {p: {p: prints[p]} for p in rest}


def _add_prints(a: str, b: str) -> str:
    """The print of two disjoint sets of spends (count and hash sum add up)."""
    (na, ha), (nb, hb) = (map(int, p.split(":")) for p in (a, b))
    return f"{na + nb}:{ha + hb}"


def _spent_prints(
    con: duckdb.DuckDBPyConnection, segs: list[tuple[int, int]], spends: str
) -> dict[tuple[int, int], str]:
    """Per segment (first, last; sorted, disjoint): count and hash sum of the spends (view
    ``spends``) of its outputs. The spends are summed per spent height first, and each height
    finds its segment by an as-of join on the segments' first heights: the work grows with
    the spends and the heights, not with spends times segments as a range join of every
    spend against every segment does (DuckDB runs one as a nested loop; a mainnet chain has
    tens of thousands of segments)."""
    if not segs:
        return {}
    import pyarrow as pa

    for a, b in itertools.pairwise(segs):
        if b[0] <= a[1]:
            raise RechainError(f"publish: segments {a} and {b} overlap or are out of order")
    con.register(
        "segs",
        pa.table({"first": [a for a, _ in segs], "last": [b for _, b in segs]}),
    )
    got = con.execute(
        f"""WITH per_height AS (
              SELECT prev_height, count(*) AS n,
                     sum(hash(prev_height, prev_row)::HUGEINT) AS h
              FROM {spends} WHERE prev_height IS NOT NULL GROUP BY prev_height),
            placed AS (
              SELECT g.first, g.last, p.n, p.h
              FROM per_height p ASOF JOIN segs g ON p.prev_height >= g.first
              WHERE p.prev_height <= g.last)
        SELECT g.first, g.last, coalesce(sum(x.n), 0)::BIGINT, coalesce(sum(x.h), 0)
        FROM segs g LEFT JOIN placed x ON x.first = g.first AND x.last = g.last
        GROUP BY ALL"""
    ).fetchall()
    con.unregister("segs")
    return {(int(a), int(b)): f"{n}:{h}" for a, b, n, h in got}
