"""Bitcoin Core's block index (``blocks/index``, LevelDB): writing rechain's block tree in
Core's format, and reading a node's index to guide a reindex.

This module owns the LevelDB I/O (plyvel) and the planning around it; the byte layouts (keys,
VARINT, ``CDiskBlockIndex``, ``CBlockFileInfo``, ``nStatus``) live in the Rust core
(``workers/native/src/btc/core_index.rs``), which encodes and decodes whole columns at once.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rechain.pipeline.bitcoin.plan import BlkFile
from rechain.pipeline.errors import RechainError
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.table_view import newest_generation
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.btc_scan import WorkUnit

log = logging.getLogger(__name__)

#: LevelDB keys (one byte each) named in Core's index; their layouts are in core_index.rs.
KEY_BLOCK = b"b"
KEY_REINDEXING = b"R"
#: Puts per LevelDB write batch: large enough to amortise, small enough to bound memory.
WRITE_BATCH_PUTS = 200_000

EXPORT_COLUMNS = [
    "hash",
    "prev_hash",
    "merkle_root",
    "version",
    "time",
    "bits",
    "nonce",
    "height",
    "copy_status",
    "body_checked",
    "n_tx",
    "file",
    "data_pos",
    "size",
]


class CoreIndexError(RechainError):
    """The index cannot be read at all (not LevelDB, corrupt, missing)."""


def _with_full_decode_verdicts(data: DataDir, table: pa.Table, generation: int) -> pa.Table:
    """After ``--mode full`` every block whose body decoded and passed the checks counts as
    body-checked (Core's VALID_TRANSACTIONS), as after ``--check-bodies``."""
    blocks_dir = data.parquet_dir(ds.BLOCKS) / f"{generation:06d}"
    blocks = pq.read_table(blocks_dir, columns=["hash", "valid"])
    checked = blocks.filter(blocks.column("valid")).column("hash").combine_chunks()
    idx = table.schema.get_field_index("body_checked")
    verdict = pc.or_(table.column("body_checked"), pc.is_in(table.column("hash"), checked))
    return table.set_column(idx, "body_checked", verdict)


def export(data_path: Path, out: Path) -> dict[str, Any]:
    """Writes the linked block tree of ``data_path`` as a Core block index at ``out``."""
    import plyvel

    t0 = time.perf_counter()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RechainError(f"{out}: exists and is not an empty folder; choose a new --out")
    with DataDir(data_path, readonly=True) as data:
        network = data.meta_get(layout.META_BTC_NETWORK)
        if data.meta_get(layout.META_BTC_SUMMARY) is None or network is None:
            raise RechainError(f"{data_path}: no completed Bitcoin reindex to export")
        if data.meta_get(layout.META_BTC_DIRTY):
            raise RechainError(f"{data_path}: a reindex was interrupted; rerun it before export")
        base = data.parquet_dir(ds.HEADERS)
        generation = newest_generation(base) if base.exists() else None
        table = pq.read_table(generation, columns=EXPORT_COLUMNS) if generation else None
        full_generation = data.meta_get(layout.META_BTC_FULL_GENERATION)
        if table is not None and full_generation is not None:
            table = _with_full_decode_verdicts(data, table, int(full_generation))
    if table is None:
        raise RechainError(f"{data_path}: the headers table is missing")
    schema = _native.empty_batch("headers").schema
    cols = table.select(EXPORT_COLUMNS).combine_chunks()
    cols = cols.cast(pa.schema([schema.field(c) for c in EXPORT_COLUMNS]))
    batch = (
        cols.to_batches()[0]
        if cols.num_rows
        else pa.RecordBatch.from_pylist([], schema=cols.schema)
    )
    t_read = time.perf_counter()
    keys, values, summary = _native.core_index_encode(batch, network)
    t_encode = time.perf_counter()
    key_list = keys.to_pylist()
    value_list = values.to_pylist()
    # Core opens its index without compression; LevelDB needs no particular write order, but
    # keys arrive sorted so tables are written without overlap.
    db = plyvel.DB(
        str(out),
        create_if_missing=True,
        error_if_exists=True,
        compression=None,
        write_buffer_size=64 << 20,
    )
    try:
        for lo in range(0, len(key_list), WRITE_BATCH_PUTS):
            with db.write_batch() as wb:
                for k, v in zip(
                    key_list[lo : lo + WRITE_BATCH_PUTS],
                    value_list[lo : lo + WRITE_BATCH_PUTS],
                    strict=True,
                ):
                    wb.put(k, v)
        # Flush the log into sorted tables, as a node's index is after its last flush: LevelDB
        # never does it on close, and every reader would otherwise replay the whole log.
        db.compact_range()
    finally:
        db.close()
    t_write = time.perf_counter()
    unchecked = summary.with_data - summary.valid_transactions
    return {
        **summary.as_dict(),
        # Core holds a block's data only with its nTx, which it sets once the transactions
        # were checked: it loads these records but connects none of them.
        "warnings": [
            f"{unchecked:,} blocks have data whose transactions were not checked (header "
            "mode): Bitcoin Core loads this index but connects none of them; reindex with "
            "--check-bodies or --mode full before exporting an index for a node"
        ]
        if unchecked
        else [],
        "network": network,
        "out": str(out),
        "read_s": round(t_read - t0, 3),
        "encode_s": round(t_encode - t_read, 3),
        "write_s": round(t_write - t_encode, 3),
        "total_s": round(t_write - t0, 3),
    }


#: Records per chunk handed to the planner: the reader's Python objects for one chunk are
#: freed and their memory reused for the next (a million at once cost more in page faults).
READ_CHUNK_RECORDS = 65_536


@dataclass
class ReadPlan:
    """What :func:`read_and_plan` returns: the decoded index and the guided scan's plan."""

    #: Decoded entries: hash (internal), height, hinted (became a record start to check).
    entries: pa.RecordBatch
    #: Records that do not decode: (shown key, reason).
    problems: list[tuple[str, str]]
    #: Entries with data the files cannot hold: (file, offset, hash, reason).
    unplaceable: list[tuple[int, int, str, str]]
    #: Per present file: (file, offsets u64 LE, hashes, heights u32 LE, count).
    hints: list[tuple[int, bytes, bytes, bytes, int]]
    reindexing: bool
    #: Reading, with the decoding running alongside it.
    read_s: float
    #: Waiting for the last chunks' decode, and planning.
    plan_s: float


def read_and_plan(path: Path, present: list[int], threads: int) -> ReadPlan:
    """Reads the ``'b'`` records of a Core block index in one LevelDB session and plans the
    guided scan of the blk files numbered ``present``. Chunks of records go to the Rust
    planner as they are read, which decodes them on ``threads`` other threads meanwhile.
    Opens a private copy: LevelDB writes on open (log recovery, a new manifest) and a node's
    files are never modified."""
    import plyvel

    t0 = time.perf_counter()
    if not (path / "CURRENT").is_file():
        raise CoreIndexError(f"{path}: not a LevelDB folder (no CURRENT file)")
    # As many decode threads as cores: they share one with the reader until it is done.
    planner = _native.CoreIndexPlanner(present, threads)
    with tempfile.TemporaryDirectory(prefix="rechain-core-index-") as tmp:
        copy = Path(tmp) / "index"
        try:
            _private_copy(path, copy)
        except OSError as e:
            raise CoreIndexError(f"{path}: cannot copy the index: {e}") from e
        try:
            db = plyvel.DB(str(copy), create_if_missing=False, paranoid_checks=True)
            # A million (key, value) tuples would set off the cyclic collector again and
            # again, and none of them can be in a cycle.
            gc_was_on = gc.isenabled()
            gc.disable()
            try:
                records = db.iterator(prefix=KEY_BLOCK, verify_checksums=True)
                while chunk := list(itertools.islice(records, READ_CHUNK_RECORDS)):
                    planner.feed(chunk)
                reindexing = db.get(KEY_REINDEXING) is not None
            finally:
                db.close()
                if gc_was_on:
                    gc.enable()
        except plyvel.Error as e:
            detail = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
            detail = detail.replace(str(copy), str(path))
            raise CoreIndexError(f"{path}: damaged LevelDB: {detail}") from e
    t_read = time.perf_counter()
    entries, problems, unplaceable, hints = planner.finish()
    return ReadPlan(
        entries,
        problems,
        unplaceable,
        hints,
        reindexing,
        t_read - t0,
        time.perf_counter() - t_read,
    )


def _private_copy(src: Path, dest: Path) -> None:
    """A copy of a LevelDB folder that opening may change freely. Table files (``.ldb``,
    ``.sst``) are never rewritten, only replaced by new ones, so they are hard-linked when the
    file system allows; the log, manifest and CURRENT are copied."""
    dest.mkdir()
    for entry in src.iterdir():
        if entry.name == "LOCK" or not entry.is_file():
            continue
        target = dest / entry.name
        if entry.suffix in (".ldb", ".sst"):
            try:
                os.link(entry, target)
                continue
            except OSError:
                pass  # another file system, or links not allowed: copy it
        shutil.copy2(entry, target)


@dataclass(frozen=True)
class FileHints:
    """The record starts the index claims in one blk file, sorted: u64 LE offsets, hashes,
    and the index's u32 LE height of each."""

    offsets: bytes
    hashes: bytes
    heights: bytes
    count: int


def guided_units(
    f: BlkFile,
    start: int,
    hints: FileHints,
    chunk_bytes: int,
    network: str,
    key: bytes,
    check_bodies: bool,
    seq0: int,
) -> list[WorkUnit]:
    """Work units over ``[start, f.size)`` of one indexed file, cut about every
    ``chunk_bytes`` at an indexed record start (so each unit begins on a claimed record and
    threads share a big file); each unit carries the hints inside its range, the last one also
    those past the end of the file, which it reports."""
    offsets = np.frombuffer(hints.offsets, dtype="<u8")
    cuts = [start]
    for grid in range((start // chunk_bytes + 1) * chunk_bytes, f.size, chunk_bytes):
        i = int(np.searchsorted(offsets, grid))
        if i < len(offsets) and cuts[-1] < int(offsets[i]) < f.size:
            cuts.append(int(offsets[i]))
    cuts.append(f.size)
    units: list[WorkUnit] = []
    for lo, hi in itertools.pairwise(cuts):
        a = int(np.searchsorted(offsets, lo))
        b = len(offsets) if hi == f.size else int(np.searchsorted(offsets, hi))
        units.append(
            WorkUnit(
                seq0 + len(units),
                str(f.path),
                f.file_no,
                lo,
                hi,
                network,
                key,
                check_bodies,
                hints.offsets[a * 8 : b * 8],
                hints.hashes[a * 32 : b * 32],
            )
        )
    return units


def _linked_headers(data: DataDir, columns: list[str]) -> pa.Table | None:
    base = data.parquet_dir(ds.HEADERS)
    generation = newest_generation(base) if base.exists() else None
    if generation is None:
        return None
    return pq.read_table(generation, columns=columns)


def _height_text(index_height: int, linked_height: int | None) -> str:
    linked = "not connected to genesis" if linked_height is None else f"height {linked_height}"
    return f"index height {index_height}, the files give {linked}"


def position_disagreements(
    hints: dict[int, FileHints], missed: list[tuple[int, int]], positions: pa.Table
) -> list[dict[str, Any]]:
    """Blocks at a confirmed indexed record start whose index height differs from the height
    linking the files gives (``positions``: the linked file, offset, height)."""
    rows = _native.core_index_position_check(
        [(f, h.offsets, h.hashes, h.heights) for f, h in hints.items()],
        missed,
        positions.column("file").combine_chunks().cast(pa.uint32()),
        positions.column("offset").combine_chunks().cast(pa.uint64()),
        positions.column("height").combine_chunks().cast(pa.uint32()),
    )
    if not rows:
        return []
    picked = positions.take(pa.array([r for r, _, _ in rows], pa.uint32())).to_pylist()
    return [
        {
            "file": f"blk{r['file']:05d}.dat",
            "offset": r["offset"],
            "hash": hash_,
            "reason": _height_text(index_height, r["height"]),
        }
        for r, (_, index_height, hash_) in zip(picked, rows, strict=True)
    ]


def height_disagreements(entries: pa.RecordBatch, headers: pa.Table) -> list[dict[str, Any]]:
    """Blocks whose height in the index (``entries``: hash, height) differs from the height
    linking the files gives (or that the files do not connect to genesis at all)."""
    rows = _native.core_index_height_check(
        entries,
        headers.column("hash").combine_chunks().cast(pa.string()),
        headers.column("height").combine_chunks().cast(pa.uint32()),
    )
    if not rows:
        return []
    picked = headers.take(pa.array([r for r, _ in rows], pa.uint32()))
    out = []
    for r, (_, index_height) in zip(
        picked.select(["hash", "height", "file", "offset"]).to_pylist(), rows, strict=True
    ):
        linked_text = "not connected to genesis" if r["height"] is None else f"height {r['height']}"
        out.append(
            {
                "file": f"blk{r['file']:05d}.dat",
                "offset": r["offset"],
                "hash": r["hash"],
                "reason": f"index height {index_height}, the files give {linked_text}",
            }
        )
    out.sort(key=lambda d: d["hash"])
    return out


def locate_moved(misses: list[dict[str, Any]], headers: pa.Table | None) -> list[dict[str, Any]]:
    """Adds where each disagreeing block really is after the scan (``found_at``), or None."""
    if not misses or headers is None:
        return misses
    wanted = pa.array(sorted({m["hash"] for m in misses if m.get("hash")}), pa.string())
    rows = headers.filter(pc.is_in(headers.column("hash"), value_set=wanted))
    where = {
        r["hash"]: {"file": f"blk{r['file']:05d}.dat", "offset": r["offset"]}
        for r in rows.select(["hash", "file", "offset", "copy_status"]).to_pylist()
        if r["copy_status"] == "ok"
    }
    for m in misses:
        m["found_at"] = where.get(m.get("hash", ""))
    return misses


class CoreIndexGuide:
    """A reindex's use of a node's index: the hints per file, and everything the index and the
    files disagree on. A damaged index leaves no hints: the run falls back to a full scan."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hints: dict[int, FileHints] = {}
        self.fallback: str | None = None
        self.entries = 0
        self.with_data = 0
        self.read_s = 0.0
        self.plan_s = 0.0
        self.verified = 0
        self.searched_bytes = 0
        self.problems: list[dict[str, Any]] = []
        self.misses: list[dict[str, Any]] = []
        #: The decoded entries (hash, height), for the height check after linking.
        self.heights: pa.RecordBatch | None = None

    @classmethod
    def load(cls, path: Path, files: list[BlkFile], threads: int = 0) -> CoreIndexGuide:
        guide = cls(path)
        present = sorted({f.file_no for f in files})
        try:
            plan = read_and_plan(path, present, threads or os.cpu_count() or 1)
        except CoreIndexError as e:
            guide.fallback = str(e)
            log.warning("%s; falling back to scanning every blk file", e)
            return guide
        entries, problems, unplaceable = plan.entries, plan.problems, plan.unplaceable
        guide.read_s = plan.read_s
        guide.plan_s = plan.plan_s
        guide.entries = entries.num_rows
        guide.heights = entries
        guide.problems = [{"key": k, "reason": r} for k, r in problems]
        if problems:
            log.warning(
                "%s: %d block record(s) do not decode (reported in run.core_index); "
                "the blocks they name are found by scanning",
                path,
                len(problems),
            )
        if plan.reindexing:
            log.warning("%s: the node was mid-reindex when it wrote this index", path)
        guide.problems.extend(
            {"file": f"blk{f:05d}.dat", "offset": o, "hash": h, "reason": r}
            for f, o, h, r in unplaceable
        )
        guide.hints = {f: FileHints(o, h, ht, n) for f, o, h, ht, n in plan.hints}
        guide.with_data = sum(h.count for h in guide.hints.values()) + len(unplaceable)
        if not guide.hints:
            guide.fallback = f"{path}: the index names no block in these blk files"
            log.warning("%s; falling back to scanning every blk file", guide.fallback)
        return guide

    def collect(self, result: Any) -> None:
        """Takes one guided shard's hint report (called in commit order)."""
        hints = result.info.get("hints")
        if not hints:
            return
        self.verified += int(hints["verified"])
        self.searched_bytes += int(hints["searched_bytes"])
        name = Path(result.unit.path).name
        for offset, hash_, reason in hints["misses"]:
            self.misses.append(
                {
                    "file": name,
                    "offset": offset,
                    "hash": hash_,
                    "reason": reason,
                    "file_no": result.unit.file_no,
                }
            )

    def report(self, data: DataDir, linked: pa.RecordBatch | None = None) -> dict[str, Any]:
        """The guide's findings once the tree is linked (``data`` holds the new headers;
        ``linked``, when given, their file, offset and height columns in table order)."""
        t0 = time.perf_counter()
        disagreements = list(self.problems)
        positions = (
            pa.Table.from_batches([linked])
            if linked is not None
            else _linked_headers(data, ["file", "offset", "height"])
        )
        if positions is not None and self.heights is not None:
            # Confirmed starts are compared by position (integers only); the hash lookup is
            # left for the few entries the scan could not confirm where the index said.
            missed = [(m["file_no"], m["offset"]) for m in self.misses]
            by_position = position_disagreements(self.hints, missed, positions)
            unconfirmed = self.heights.filter(pc.invert(self.heights.column("hinted")))
            if self.misses:
                wanted = pa.array([bytes.fromhex(m["hash"])[::-1] for m in self.misses])
                missed_entries = self.heights.filter(
                    pc.is_in(self.heights.column("hash"), value_set=wanted.cast(pa.binary(32)))
                )
                unconfirmed = pa.concat_batches([unconfirmed, missed_entries])
            if self.misses or unconfirmed.num_rows:
                headers = _linked_headers(data, ["hash", "height", "file", "offset", "copy_status"])
                disagreements += locate_moved(self.misses, headers)
                if headers is not None:
                    by_hash = height_disagreements(unconfirmed, headers)
                    seen = {(d["file"], d["offset"]) for d in by_hash}
                    by_position = [d for d in by_position if (d["file"], d["offset"]) not in seen]
                    by_position += by_hash
            disagreements += sorted(by_position, key=lambda d: d["hash"])
        else:
            disagreements += self.misses
        for m in self.misses:
            m.pop("file_no", None)
        check_s = time.perf_counter() - t0
        if disagreements:
            log.warning(
                "%s and the blk files disagree on %d block(s): see run.core_index.disagreements",
                self.path,
                len(disagreements),
            )
        return {
            "path": str(self.path),
            "fallback": self.fallback,
            "entries": self.entries,
            "with_data": self.with_data,
            "hinted_files": len(self.hints),
            "verified": self.verified,
            "searched_bytes": self.searched_bytes,
            "read_s": round(self.read_s, 3),
            "plan_s": round(self.plan_s, 3),
            "check_s": round(check_s, 3),
            "disagreements": disagreements,
        }
