"""Bitcoin Core's block index (``blocks/index``, LevelDB): writing rechain's block tree in
Core's format, and reading a node's index to guide a reindex.

This module owns the LevelDB I/O (plyvel) and the planning around it; the byte layouts (keys,
VARINT, ``CDiskBlockIndex``, ``CBlockFileInfo``, ``nStatus``) live in the Rust core
(``workers/native/src/btc/core_index.rs``), which encodes and decodes whole columns at once.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rechain.pipeline.btc_plan import BlkFile
from rechain.pipeline.errors import RechainError
from rechain.pipeline.query import current_generation
from rechain.pipeline.store import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

log = logging.getLogger(__name__)

#: LevelDB keys (one byte each) named in Core's index; their layouts are in core_index.rs.
KEY_BLOCK = b"b"
KEY_REINDEXING = b"R"
#: Puts per LevelDB write batch: large enough to amortise, small enough to bound memory.
WRITE_BATCH_PUTS = 200_000
#: Bytes in front of ``nDataPos``: the record's magic and size fields.
RECORD_PREFIX = 8

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
        generation = current_generation(base) if base.exists() else None
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
    finally:
        db.close()
    t_write = time.perf_counter()
    return {
        **dict(summary),
        "network": network,
        "out": str(out),
        "read_s": round(t_read - t0, 3),
        "encode_s": round(t_encode - t_read, 3),
        "write_s": round(t_write - t_encode, 3),
        "total_s": round(t_write - t0, 3),
    }


@dataclass
class CoreIndex:
    """A node's block index as columns: hash (internal), height, status, n_tx, file, data_pos."""

    path: Path
    entries: pa.Table
    #: Records that did not decode: {"key", "reason"}.
    problems: list[dict[str, Any]] = field(default_factory=list)
    reindexing: bool = False
    read_s: float = 0.0


def read(path: Path) -> CoreIndex:
    """Reads the ``'b'`` records of a Core block index. Opens a private copy: LevelDB writes on
    open (log recovery, a new manifest) and a node's files are never modified."""
    import plyvel

    t0 = time.perf_counter()
    if not (path / "CURRENT").is_file():
        raise CoreIndexError(f"{path}: not a LevelDB folder (no CURRENT file)")
    with tempfile.TemporaryDirectory(prefix="rechain-core-index-") as tmp:
        copy = Path(tmp) / "index"
        try:
            shutil.copytree(path, copy, ignore=shutil.ignore_patterns("LOCK"))
        except OSError as e:
            raise CoreIndexError(f"{path}: cannot copy the index: {e}") from e
        try:
            db = plyvel.DB(str(copy), create_if_missing=False, paranoid_checks=True)
            try:
                keys = list(
                    db.iterator(prefix=KEY_BLOCK, include_value=False, verify_checksums=True)
                )
                values = list(
                    db.iterator(prefix=KEY_BLOCK, include_key=False, verify_checksums=True)
                )
                reindexing = db.get(KEY_REINDEXING) is not None
            finally:
                db.close()
        except plyvel.Error as e:
            detail = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
            detail = detail.replace(str(copy), str(path))
            raise CoreIndexError(f"{path}: damaged LevelDB: {detail}") from e
    batch, problems = _native.core_index_decode(
        pa.array(keys, pa.binary()), pa.array(values, pa.binary())
    )
    return CoreIndex(
        path,
        pa.Table.from_batches([batch]),
        [{"key": k, "reason": r} for k, r in problems],
        reindexing,
        time.perf_counter() - t0,
    )


@dataclass(frozen=True)
class FileHints:
    """The record starts the index claims in one blk file, sorted: u64 LE offsets, hashes."""

    offsets: bytes
    hashes: bytes
    count: int


def plan_hints(
    index: CoreIndex, files: list[BlkFile]
) -> tuple[dict[int, FileHints], list[dict[str, Any]]]:
    """Per blk file, the indexed record starts (magic offsets); and the entries that cannot be
    hints at all (a file that does not exist, a position inside the first record header)."""
    t = index.entries
    t = t.filter(pc.is_valid(t.column("data_pos")))
    present = pa.array(sorted({f.file_no for f in files}), pa.uint32())
    missing_file = pc.invert(pc.is_in(t.column("file"), value_set=present))
    bad = pc.or_(missing_file, pc.less(t.column("data_pos"), RECORD_PREFIX))
    problems: list[dict[str, Any]] = []
    for r in t.filter(bad).to_pylist():
        problems.append(
            {
                "file": f"blk{r['file']:05d}.dat",
                "offset": r["data_pos"] - RECORD_PREFIX,
                "hash": _native.display_hash(r["hash"]),
                "reason": "file does not exist"
                if not pc.is_in(pa.array([r["file"]], pa.uint32()), value_set=present)[0].as_py()
                else f"data position {r['data_pos']} is inside the first record's header",
            }
        )
    good = t.filter(pc.invert(bad)).sort_by([("file", "ascending"), ("data_pos", "ascending")])
    good = good.combine_chunks()
    offsets = pc.subtract(good.column("data_pos").cast(pa.uint64()), RECORD_PREFIX)
    raw_offsets = _raw(offsets.combine_chunks(), 8)
    raw_hashes = _raw(good.column("hash").combine_chunks(), 32)
    counts = pc.value_counts(good.column("file"))  # in order of appearance: sorted by file
    hints: dict[int, FileHints] = {}
    lo = 0
    for f_no, n in zip(
        counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
    ):
        hi = lo + n
        hints[f_no] = FileHints(raw_offsets[lo * 8 : hi * 8], raw_hashes[lo * 32 : hi * 32], n)
        lo = hi
    return hints, problems


def _raw(arr: pa.Array, width: int) -> bytes:
    """The value bytes of a fixed-width array without nulls (u64 are little-endian here)."""
    buf = arr.buffers()[1]
    return buf.to_pybytes()[arr.offset * width : (arr.offset + len(arr)) * width]


def _linked_headers(data: DataDir) -> pa.Table | None:
    base = data.parquet_dir(ds.HEADERS)
    generation = current_generation(base) if base.exists() else None
    if generation is None:
        return None
    return pq.read_table(generation, columns=["hash", "height", "file", "offset", "copy_status"])


def height_disagreements(index_heights: pa.Table, headers: pa.Table) -> list[dict[str, Any]]:
    """Blocks whose height in the index differs from the height linking the files gives (or
    that the files do not connect to genesis at all)."""
    linked = headers.select(["hash", "height", "file", "offset"]).rename_columns(
        ["display_hash", "linked_height", "file", "offset"]
    )
    joined = index_heights.join(linked, "display_hash", join_type="inner")
    differs = pc.or_kleene(
        pc.is_null(joined.column("linked_height")),
        pc.not_equal(joined.column("height"), joined.column("linked_height")),
    )
    out = []
    for r in joined.filter(differs).sort_by("display_hash").to_pylist():
        linked_text = (
            "not connected to genesis"
            if r["linked_height"] is None
            else f"height {r['linked_height']}"
        )
        out.append(
            {
                "file": f"blk{r['file']:05d}.dat",
                "offset": r["offset"],
                "hash": r["display_hash"],
                "reason": f"index height {r['height']}, the files give {linked_text}",
            }
        )
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
        self.verified = 0
        self.searched_bytes = 0
        self.problems: list[dict[str, Any]] = []
        self.misses: list[dict[str, Any]] = []
        self.heights: pa.Table | None = None

    @classmethod
    def load(cls, path: Path, files: list[BlkFile]) -> CoreIndexGuide:
        guide = cls(path)
        try:
            index = read(path)
        except CoreIndexError as e:
            guide.fallback = str(e)
            log.warning("%s; falling back to scanning every blk file", e)
            return guide
        guide.read_s = index.read_s
        guide.entries = index.entries.num_rows
        guide.heights = index.entries.select(["display_hash", "height"])
        guide.problems = list(index.problems)
        if index.problems:
            log.warning(
                "%s: %d block record(s) do not decode (reported in run.core_index); "
                "the blocks they name are found by scanning",
                path,
                len(index.problems),
            )
        if index.reindexing:
            log.warning("%s: the node was mid-reindex when it wrote this index", path)
        guide.hints, unplaceable = plan_hints(index, files)
        guide.problems.extend(unplaceable)
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
            self.misses.append({"file": name, "offset": offset, "hash": hash_, "reason": reason})

    def report(self, data: DataDir) -> dict[str, Any]:
        """The guide's findings once the tree is linked (``data`` holds the new headers)."""
        t0 = time.perf_counter()
        headers = _linked_headers(data)
        disagreements = self.problems + locate_moved(self.misses, headers)
        if headers is not None and self.heights is not None:
            disagreements += height_disagreements(self.heights, headers)
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
            "check_s": round(check_s, 3),
            "disagreements": disagreements,
        }
