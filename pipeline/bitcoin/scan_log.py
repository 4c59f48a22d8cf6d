"""The Bitcoin committer: the only writer of the data folder during a reindex.

It receives shard results in (file, offset) order, stitches neighbouring shards into exactly
what one sequential scan of the file would report, and commits each shard's records, events and
the file's new progress in one atomic RocksDB write (so a killed run resumes where it stopped).
When scanning is done it links the block tree (in the Rust core), rebuilds the block index and
best chain, and publishes the ``headers`` Parquet table as a new generation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rechain.pipeline import metrics
from rechain.pipeline.bitcoin.body_parts import apply_verdicts
from rechain.pipeline.bitcoin.plan import FINGERPRINT_BYTES, BlkFile
from rechain.pipeline.errors import RechainError
from rechain.pipeline.store.datadir import DataDir, write_file_atomic
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.schemas import tables
from rechain.workers import _native
from rechain.workers.btc_scan import ShardResult, scan_unit
from rechain.workers.fault_injection import kill_point

log = logging.getLogger(__name__)
STAGE = "btc_headers"


def segment_dir(data: DataDir) -> Path:
    return data.path / layout.SCAN_SEGMENT_DIR


def segment_name(value: bytes) -> str:
    """The file a scan-log value points at (see ``rechain.schemas.rocksdb.CF_BTC_SCAN``)."""
    if value[:1] != bytes([layout.SCAN_SEGMENT_VERSION]):
        raise ValueError(f"unknown scan segment version {value[:1]!r}")
    return value[1:].decode()


def write_segment(data: DataDir, key: bytes, table: pa.Table) -> bytes:
    """Writes a scan-log segment as an Arrow IPC file, durable before any RocksDB write names
    it, and returns the value that names it. Equal content gets an equal name (key and row
    count), so resumed runs leave the same log as uninterrupted ones."""
    folder = segment_dir(data)
    folder.mkdir(exist_ok=True)
    name = f"{key.hex()}-{table.num_rows}.arrow"

    def write(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)

    write_file_atomic(folder / name, write)
    return bytes([layout.SCAN_SEGMENT_VERSION]) + name.encode()


def read_segment(data: DataDir, value: bytes) -> pa.Table:
    """A scan-log segment, memory-mapped (no copy of its columns)."""
    path = segment_dir(data) / segment_name(value)
    try:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowInvalid) as e:
        raise RechainError(
            f"{path}: scan log segment unreadable ({e}); reindex into a new --data folder"
        ) from e


def remove_unreferenced_segments(data: DataDir) -> None:
    """Deletes segment files no scan-log entry names: written by a run killed before its
    RocksDB commit, or replaced or forgotten after it."""
    folder = segment_dir(data)
    if not folder.exists():
        return
    named = {segment_name(v) for _, v in data.items(layout.CF_BTC_SCAN)}
    for path in folder.iterdir():
        if path.name not in named:
            path.unlink(missing_ok=True)


@dataclass
class Pending:
    """A gap left open by the last shard: began at ``start``, scanned through ``through``."""

    start: int
    through: int
    all_zero: bool


@dataclass
class FileState:
    file: BlkFile
    pending: Pending
    entry: dict[str, Any]
    #: A resumed file's provisional tail: the rows an earlier run logged at or past the resume
    #: position (records, events), taken out of the log when the file was resumed. The rescan
    #: of the tail is compared with them to tell whether the index must be relinked.
    provisional: tuple[pa.Table, pa.Table] | None = None
    #: This run's rows of a resumed file (records, events), compared with ``provisional``.
    rescanned: list[tuple[pa.RecordBatch, pa.RecordBatch]] = field(default_factory=list)
    #: The last record this run logged in the file: (magic offset, declared size, status).
    last_record: tuple[int, int, str] | None = None


@dataclass
class CommitStats:
    records: int = 0
    events: int = 0
    bytes_read: int = 0
    shards: int = 0
    rescans: int = 0
    commit_seconds: float = 0.0
    decode_seconds: float = 0.0
    link: dict[str, float] = field(default_factory=dict)


def gap_event(file_no: int, start: int, end: int, all_zero: bool, at_eof: bool) -> dict[str, Any]:
    kind = {
        (True, True): "zero_tail",
        (True, False): "zero_gap",
        (False, True): "trailing_garbage",
        (False, False): "garbage",
    }[(all_zero, at_eof)]
    return {
        "file": file_no,
        "offset": start,
        "end": end,
        "kind": kind,
        "declared": None,
        "consumed": None,
        "reason": None,
    }


def stitch(
    p: Pending, info: dict[str, Any], file_no: int
) -> tuple[dict[str, Any] | None, Pending] | None:
    """Joins a shard onto the open state of its file: (gap event it closes, new open state),
    or None when the shard must be rescanned from ``p.through``.

    The previous shard left a gap open from ``p.start`` through ``p.through``. If this shard
    starts there, its leading gap simply continues that one. If the previous record ran past
    this shard's start, the shard's findings before that point are inside the record: they are
    dropped when they are a gap of raw zeros, and otherwise the shard is rescanned from the
    record's end, so the result always equals one sequential scan of the file.
    """
    s = int(info["start"])
    empty = bool(info["empty"])
    lead = info["leading_gap"]
    shard_pending = Pending(
        int(info["pending_start"]), int(info["pending_through"]), bool(info["pending_all_zero"])
    )
    if p.through == s:
        if empty:
            return None, Pending(
                p.start, shard_pending.through, p.all_zero and shard_pending.all_zero
            )
        first = int(lead[0]) if lead else s
        zero = p.all_zero and (bool(lead[1]) if lead else True)
        gap = gap_event(file_no, p.start, first, zero, False) if p.start < first else None
        return gap, shard_pending
    if p.through < s:
        return None
    # The previous record extends past this shard's start (so p.start == p.through).
    if empty:
        if shard_pending.through <= p.through:
            return None, p
        return (
            (None, Pending(p.start, shard_pending.through, True))
            if shard_pending.all_zero
            else None
        )
    first = int(lead[0]) if lead else s
    if first < p.through or (first > p.through and not (lead and bool(lead[1]))):
        return None
    gap = gap_event(file_no, p.start, first, True, False) if p.start < first else None
    return gap, shard_pending


def with_gap(events: pa.RecordBatch, gap: dict[str, Any] | None) -> pa.RecordBatch:
    """Prepends a gap event (which precedes every event of the shard) to its events."""
    if gap is None:
        return events
    batch = pa.RecordBatch.from_pylist([gap], schema=events.schema)
    if not events.num_rows:
        return batch
    return pa.Table.from_batches([batch, events]).combine_chunks().to_batches()[0]


class BtcCommitter:
    def __init__(self, data: DataDir, network: str, *, root_hash: str | None = None) -> None:
        self.data = data
        self.network = network
        self.root_hash = root_hash
        self.files: dict[int, FileState] = {}
        self.stats = CommitStats()
        #: This run's committed records, kept when the run started from an empty scan log:
        #: then they are the whole log, and linking need not read it back from RocksDB.
        self.run_records: list[pa.RecordBatch] | None = None
        #: Set to keep the last linked table's file, offset and height columns (table order)
        #: in ``linked_positions``, for checks that would otherwise read the table back.
        self.keep_positions = False
        self.linked_positions: pa.RecordBatch | None = None
        #: Whether the index needed a relink before this run, and whether this run changed
        #: the log (a rescanned provisional tail that came out the same changes nothing).
        self.dirty_at_start = bool(data.meta_get(layout.META_BTC_DIRTY))
        self.run_changed = False

    def keep_records_if_fresh(self) -> None:
        """Keeps this run's records in memory if nothing was committed before it (call once
        planning is done). The tree holds the same batches when it links, so this moves the
        memory peak earlier but does not raise it."""
        fresh = next(self.data.items(layout.CF_BTC_SCAN), None) is None
        self.run_records = [] if fresh else None

    # -- planning helpers --
    def file_entry(self, file_no: int) -> dict[str, Any] | None:
        import json

        raw = self.data.get(layout.CF_BTC_FILES, layout.file_key(file_no))
        return None if raw is None else json.loads(raw)

    def resume_position(self, f: BlkFile, head: bytes) -> int:
        """Where scanning of ``f`` resumes; resets a file that shrank or was replaced."""
        import hashlib

        entry = self.file_entry(f.file_no)
        if entry is None:
            return 0
        fp_len = entry["fingerprint_len"]
        same_head = (
            len(head) >= fp_len
            and hashlib.sha256(head[:fp_len]).hexdigest() == entry["fingerprint"]
        )
        if f.size < entry["committed_pos"] or not same_head:
            log.warning(
                "%s changed since the last run (shrunk or replaced): rescanning it", f.path.name
            )
            self.forget_file(f.file_no)
            return 0
        return int(entry["committed_pos"])

    def forget_missing_files(self, present: set[int]) -> None:
        """Drops what earlier runs committed from blk files that are gone now (pruned, moved)."""
        for key, value in list(self.data.items(layout.CF_BTC_FILES)):
            file_no = int.from_bytes(key, "big")
            if file_no not in present:
                import json

                log.warning(
                    "%s is gone since the last run: its blocks leave the index",
                    json.loads(value)["name"],
                )
                self.forget_file(file_no)

    def forget_file(self, file_no: int) -> None:
        from rechain.pipeline.bitcoin.body_parts import forget_file_parts

        prefix = layout.file_key(file_no)
        segments = list(self.data.items(layout.CF_BTC_SCAN, prefix))
        keys = [k for k, _ in segments]
        self.data.write(
            {layout.CF_META: [(layout.META_BTC_DIRTY, True)]},
            {
                layout.CF_BTC_SCAN: keys,
                layout.CF_BTC_FILES: [prefix],
                layout.CF_BTC_BODIES: forget_file_parts(self.data, file_no),
            },
        )
        for _, value in segments:
            (segment_dir(self.data) / segment_name(value)).unlink(missing_ok=True)

    def begin_file(self, f: BlkFile, start: int, head: bytes) -> None:
        import hashlib

        fp_len = min(FINGERPRINT_BYTES, f.size)
        entry = {
            "v": layout.FILE_ENTRY_VERSION,
            "name": f.path.name,
            "size": f.size,
            "fingerprint_len": fp_len,
            "fingerprint": hashlib.sha256(head[:fp_len]).hexdigest(),
            "committed_pos": start,
            "tail": None,
        }
        state = FileState(f, Pending(start, start, True), entry)
        if self.file_entry(f.file_no) is not None:
            state.provisional = self._take_provisional(f.file_no, start)
        self.files[f.file_no] = state

    def _take_provisional(self, file_no: int, start: int) -> tuple[pa.Table, pa.Table]:
        """Takes the rows logged at or past ``start`` out of the file's scan log, with the
        staged body verdicts that failed there, in one write: they describe the provisional
        tail of a file a node may still be writing (see ``provisional_start``), which is
        scanned again now. Returns the rows taken (records, events)."""
        from rechain.pipeline.bitcoin.body_parts import forget_failed_parts

        taken: dict[bytes, list[pa.Table]] = {layout.SEGMENT_RECORDS: [], layout.SEGMENT_EVENTS: []}
        puts: list[tuple[bytes, bytes]] = []
        deletes: list[bytes] = []
        replaced: list[str] = []
        for key, value in list(self.data.items(layout.CF_BTC_SCAN, layout.file_key(file_no))):
            _, cell, kind = layout.parse_segment_key(key)
            if cell + layout.SCAN_CELL_BYTES <= start:
                continue
            table = read_segment(self.data, value)
            column = "magic_offset" if kind == layout.SEGMENT_RECORDS else "offset"
            late = pc.greater_equal(table.column(column), start)
            if not pc.any(late).as_py():
                continue
            taken[kind].append(table.filter(late))
            kept = table.filter(pc.invert(late))
            replaced.append(segment_name(value))
            if kept.num_rows:
                puts.append((key, write_segment(self.data, key, kept)))
            else:
                deletes.append(key)
        parts = forget_failed_parts(self.data, file_no, start)
        records = pa.concat_tables(taken[layout.SEGMENT_RECORDS] or [_empty_table(ds.RECORDS)])
        events = pa.concat_tables(taken[layout.SEGMENT_EVENTS] or [_empty_table(ds.EVENTS)])
        if puts or deletes or parts:
            self.data.write(
                {layout.CF_META: [(layout.META_BTC_DIRTY, True)], layout.CF_BTC_SCAN: puts},
                {layout.CF_BTC_SCAN: deletes, layout.CF_BTC_BODIES: parts},
            )
            for name in replaced:
                if name not in {segment_name(v) for _, v in puts}:
                    (segment_dir(self.data) / name).unlink(missing_ok=True)
            # Failed verdicts in the tail were for bytes that may since have been completed.
            self.run_changed = self.run_changed or bool(parts)
        return records, events

    # -- ordered apply --
    def apply(self, result: ShardResult) -> None:
        """Stitches one shard onto its file's open state and commits it atomically."""
        state = self.files[result.unit.file_no]
        self.stats.decode_seconds += result.seconds
        metrics.SHARD_DECODE_SECONDS.labels(STAGE).observe(result.seconds)
        t0 = time.perf_counter()
        file_no = state.file.file_no
        stitched = stitch(state.pending, result.info, file_no)
        if stitched is None:
            self.stats.rescans += 1
            result = scan_unit(result.unit, start=state.pending.through)
            stitched = stitch(state.pending, result.info, file_no)
            assert stitched is not None, "a rescan starts exactly where the last shard ended"
        closing_gap, new_pending = stitched
        info = result.info
        events = with_gap(result.events, closing_gap)
        state.pending = new_pending
        at_eof = int(info["bound"]) >= state.file.size
        records = result.records
        if records.num_rows:
            last = records.num_rows - 1
            state.last_record = (
                int(records.column("magic_offset")[last].as_py()),
                int(records.column("declared_size")[last].as_py()),
                str(records.column("status")[last].as_py()),
            )
        entry = state.entry
        entry["committed_pos"] = new_pending.start
        entry["tail"] = None
        if at_eof:
            entry["committed_pos"] = provisional_start(
                state.last_record, new_pending.start, state.file.size
            )
            if new_pending.start < state.file.size:
                entry["tail"] = gap_event(
                    state.file.file_no,
                    new_pending.start,
                    state.file.size,
                    new_pending.all_zero,
                    True,
                )
        entry_changed = self.file_entry(state.file.file_no) != entry
        puts: dict[str, list[tuple[bytes, Any]]] = {
            layout.CF_BTC_FILES: [(layout.file_key(state.file.file_no), dict(entry))],
        }
        if state.provisional is None:
            changed = bool(records.num_rows or events.num_rows) or entry_changed
        else:
            # A resumed file's rows are judged together when its last shard lands.
            state.rescanned.append((records, events))
            changed = entry_changed or (at_eof and self._rescan_differs(state))
        if changed:
            self.run_changed = True
            puts[layout.CF_META] = [(layout.META_BTC_DIRTY, True)]
        elif at_eof and state.provisional is not None and not self.run_changed:
            # The tail came out as logged before: the index is as current as it was.
            puts[layout.CF_META] = [(layout.META_BTC_DIRTY, self.dirty_at_start)]
        replaced: list[str] = []
        scan_puts = self._cell_segments(
            file_no, result.records, "magic_offset", layout.SEGMENT_RECORDS, replaced
        )
        scan_puts += self._cell_segments(file_no, events, "offset", layout.SEGMENT_EVENTS, replaced)
        if scan_puts:
            puts[layout.CF_BTC_SCAN] = scan_puts
        self.data.write(puts)
        kill_point("scan.shard_committed")
        for name in replaced:
            (segment_dir(self.data) / name).unlink(missing_ok=True)
        if self.run_records is not None and result.records.num_rows:
            self.run_records.append(result.records)
        # The segments are in RocksDB now: hand the shard's copies back to the OS (Arrow's
        # allocator keeps freed pages, and shards are tens of MiB each).
        del scan_puts, puts
        pa.default_memory_pool().release_unused()
        dt = time.perf_counter() - t0
        self.stats.commit_seconds += dt
        self.stats.shards += 1
        self.stats.records += result.records.num_rows
        self.stats.events += events.num_rows
        self.stats.bytes_read += int(info["bytes_read"])
        metrics.COMMIT_SECONDS.labels(STAGE).observe(dt)
        metrics.RECORDS.labels(STAGE).inc(result.records.num_rows)
        metrics.BYTES_READ.labels(STAGE).inc(int(info["bytes_read"]))
        if events.num_rows:
            for kind, count in zip(*_value_counts(events.column("kind")), strict=True):
                if kind not in ds.NORMAL_EVENT_KINDS:
                    metrics.SKIPS.labels(STAGE, kind).inc(count)

    def _rescan_differs(self, state: FileState) -> bool:
        """Whether a resumed file's rows this run differ from those its tail had logged."""
        assert state.provisional is not None
        old_records, old_events = state.provisional
        new_records = pa.Table.from_batches(
            [r for r, _ in state.rescanned], schema=ds.schema(ds.RECORDS)
        )
        new_events = pa.Table.from_batches(
            [e for _, e in state.rescanned], schema=ds.schema(ds.EVENTS)
        )
        return not (
            new_records.combine_chunks().equals(old_records.combine_chunks())
            and new_events.combine_chunks().equals(old_events.combine_chunks())
        )

    def _cell_segments(
        self,
        file_no: int,
        batch: pa.RecordBatch,
        offset_column: str,
        kind: bytes,
        replaced: list[str],
    ) -> list[tuple[bytes, bytes]]:
        """Scan-log puts for a batch: rows go to the segment of the cell holding their offset,
        after any rows that cell already has (committed in order, so offsets stay sorted).
        Segment files the puts supersede are added to ``replaced``, to delete after commit."""
        if not batch.num_rows:
            return []
        cells = pc.divide(batch.column(offset_column), layout.SCAN_CELL_BYTES)
        puts = []
        for cell in pc.unique(cells).to_pylist():
            part = pa.Table.from_batches([batch.filter(pc.equal(cells, cell))])
            key = layout.segment_key(file_no, cell * layout.SCAN_CELL_BYTES, kind)
            existing = self.data.get(layout.CF_BTC_SCAN, key)
            if existing is not None:
                part = pa.concat_tables([read_segment(self.data, existing), part])
            value = write_segment(self.data, key, part)
            if existing is not None and existing != value:
                replaced.append(segment_name(existing))
            puts.append((key, value))
        return puts

    # -- after scanning --
    def scan_log(self, kind: bytes, dataset: str) -> pa.Table:
        tables = [
            read_segment(self.data, v)
            for k, v in self.data.items(layout.CF_BTC_SCAN)
            if layout.parse_segment_key(k)[2] == kind
        ]
        if not tables:
            return pa.Table.from_batches([ds.empty(dataset)])
        return pa.concat_tables(tables)

    def link_and_publish(self) -> dict[str, Any]:
        """Links every committed record into the block tree and publishes index and Parquet.

        The tree hands out the table and the index in slices: the Parquet part is written
        on a second thread (Arrow and the Rust slices release the GIL) while this one feeds
        the block index to RocksDB, and no complete copy of either output is ever held."""
        timings: dict[str, float] = {}
        t = time.perf_counter()
        if self.run_records is not None:
            log = pa.Table.from_batches(self.run_records, schema=ds.schema(ds.RECORDS))
            # Later links (the full decode relinks with its verdicts) read the log back.
            self.run_records = None
        else:
            log = self.scan_log(layout.SEGMENT_RECORDS, ds.RECORDS)
        log_table = apply_verdicts(self.data, log)
        timings["load_s"] = time.perf_counter() - t
        t = time.perf_counter()
        tree = _native.HeaderTree(log_table.to_batches(), self.network, self.root_hash)
        linked = tree.summary()
        if self.keep_positions:
            self.linked_positions = tree.positions()
        timings["link_s"] = time.perf_counter() - t
        t = time.perf_counter()
        # Until the new index is complete, a killed run must relink when it resumes.
        self.data.write({layout.CF_META: [(layout.META_BTC_DIRTY, True)]})
        for cf in layout.DERIVED_COLUMN_FAMILIES:
            self.data.reset_column_family(cf)
        kill_point("link.index_reset")
        generation = int(self.data.meta_get(layout.META_BTC_GENERATION) or 0) + 1
        rows = tables.HEADERS.row_group_rows
        # Two parts, cut at a row group, written on two threads while this one writes the index.
        n = len(tree)
        cut = min(n, -(-n // 2 // rows) * rows)

        def part(lo: int, hi: int) -> Iterator[pa.RecordBatch]:
            return (tree.headers(a, min(a + rows, hi)) for a in range(lo, hi, rows))

        with ThreadPoolExecutor(1, thread_name_prefix="headers-parquet") as pool:
            parquet = pool.submit(
                self.data.stage_parquet_parts,
                ds.HEADERS,
                generation,
                [part(0, cut), part(cut, n)] if 0 < cut < n else [part(0, n)],
            )
            self.data.ingest_sorted_slices(
                layout.CF_BTC_INDEX, len(tree), tree.index_entries, compress=False
            )
            self.data.ingest_sorted_slices(
                layout.CF_BTC_BEST, tree.best_buckets(), tree.best_entries, compress=False
            )
            self.data.ingest_sorted_slices(
                layout.CF_BTC_BEST_MTP,
                tree.best_buckets(),
                partial(tree.best_entries, median_times=True),
                compress=False,
            )
            kill_point("link.index_ingested")
            timings["index_s"] = time.perf_counter() - t
            t = time.perf_counter()
            parquet.result()
        kill_point("link.published")
        # The Parquet writer ran alongside the index: this is only the wait after it.
        timings["parquet_s"] = time.perf_counter() - t
        t = time.perf_counter()
        summary = {
            "network": self.network,
            "tip_hash": linked.tip_hash,
            "tip_height": linked.tip_height,
            "chainwork": linked.chainwork,
            "blocks_indexed": linked.blocks_indexed,
            "distinct_hashes": linked.distinct,
            "records": log_table.num_rows,
            "orphans": linked.orphans,
            "duplicates": linked.duplicates,
            "invalid": [h.as_dict() for h in linked.invalid],
            "body_checked": bool(pc.any(log_table.column("body_checked")).as_py() or False),
        }
        timings["summary_s"] = time.perf_counter() - t
        self.data.write(
            {
                layout.CF_META: [
                    (layout.META_BTC_SUMMARY, summary),
                    (layout.META_BTC_GENERATION, generation),
                    (layout.META_BTC_DIRTY, False),
                ]
            }
        )
        kill_point("link.summary_written")
        self.data.remove_other_generations(ds.HEADERS, generation)
        self.stats.link = timings
        return summary

    def skipped(self) -> list[dict[str, Any]]:
        return skipped_from(self.data)


def provisional_start(
    last_record: tuple[int, int, str] | None, gap_start: int, file_size: int
) -> int:
    """Where a file's next run resumes once its end was scanned: the start of the trailing
    gap, or of the file's last record when that record may still be completed by the node
    writing the file (it failed to frame, its declared size runs past the end of the file,
    or bytes other than its declared end follow it). Such a record is a torn write, not a
    bad block, until more bytes prove otherwise: the next run reads it again."""
    if last_record is None:
        return gap_start
    magic_offset, declared_size, status = last_record
    complete = status == "ok" and magic_offset + 8 + declared_size == file_size
    return min(gap_start, magic_offset) if not complete else gap_start


def _empty_table(dataset: str) -> pa.Table:
    return pa.Table.from_batches([ds.empty(dataset)])


def _value_counts(column: pa.Array) -> tuple[list[str], list[int]]:
    vc = pc.value_counts(column)
    return vc.field("values").to_pylist(), vc.field("counts").to_pylist()


def skipped_from(data: DataDir) -> list[dict[str, Any]]:
    """Every reported skip or anomaly: scan events, file tails, and damaged record copies."""
    import json

    names = {}
    tails = []
    for key, value in data.items(layout.CF_BTC_FILES):
        entry = json.loads(value)
        file_no = int.from_bytes(key, "big")
        names[file_no] = entry["name"]
        if entry.get("tail"):
            tails.append(entry["tail"])
    rows: list[dict[str, Any]] = []
    for key, value in data.items(layout.CF_BTC_SCAN):
        _, _, kind = layout.parse_segment_key(key)
        table = read_segment(data, value)
        if kind == layout.SEGMENT_EVENTS:
            rows.extend(table.to_pylist())
        else:
            bad = table.filter(pc.equal(table.column("status"), "invalid_body"))
            for r in bad.select(["file", "magic_offset", "status", "reason"]).to_pylist():
                rows.append(
                    {
                        "file": r["file"],
                        "offset": r["magic_offset"],
                        "end": None,
                        "kind": "invalid_body",
                        "declared": None,
                        "consumed": None,
                        "reason": r["reason"],
                    }
                )
    rows.extend(tails)
    # Copies the full decode rejected (its verdicts live in the staged body parts).
    from rechain.pipeline.bitcoin.body_parts import staged_blocks

    body = staged_blocks(data, ["file", "offset", "valid", "invalid_reason"])
    for r in body.filter(pc.invert(body.column("valid"))).to_pylist():
        rows.append(
            {
                "file": r["file"],
                "offset": r["offset"],
                "end": None,
                "kind": "invalid_body",
                "declared": None,
                "consumed": None,
                "reason": r["invalid_reason"],
            }
        )
    out = []
    for e in sorted(rows, key=lambda e: (e["file"], e["offset"])):
        if e["kind"] in ds.NORMAL_EVENT_KINDS:
            continue
        item: dict[str, Any] = {
            "file": names.get(e["file"], f"blk{e['file']:05d}.dat"),
            "offset": e["offset"],
            "reason": e["kind"],
        }
        for k in ("end", "declared", "consumed"):
            if e.get(k) is not None:
                item[k] = e[k]
        if e.get("reason"):
            item["detail"] = e["reason"]
        out.append(item)
    return out
