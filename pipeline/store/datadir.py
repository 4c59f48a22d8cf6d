"""The data folder: an exclusive lock, the RocksDB database and atomic Parquet publication.

Layout of DATADIR::

    LOCK                      held (flock) by the one run using the folder
    rocksdb/                  column families from rechain.schemas.rocksdb
    scan/                     Bitcoin scan-log segments (Arrow IPC) named by rocksdb/btc_scan
    parquet/<table>/<gen>/    Parquet parts of one published generation of a table
    tables/                   what readers see: one generation of each table (table_view)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from rechain.pipeline.errors import DataFolderBusy, RechainError
from rechain.pipeline.store.table_view import current_generation_name, publish_view
from rechain.schemas import rocksdb as layout
from rechain.schemas import tables
from rechain.workers import _native
from rechain.workers.fault_injection import kill_point
from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    IngestExternalFileOptions,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

if TYPE_CHECKING:  # pyarrow is loaded only by the stages that use it (a Flow replay never does)
    import pyarrow as pa

#: Keys or values for an SST file: an Arrow binary array, or a list of bytes.
KeyColumn: TypeAlias = "pa.Array | list[bytes]"

#: Rows turned into Python objects at a time while writing an SST file. The writer holds the GIL
#: for a whole slice (its loop runs in C), so slices stay a few milliseconds long: threads
#: writing Parquet beside it get the GIL back between slices.
INGEST_SLICE_ROWS = 8_192
#: RocksDB memtables, all column families together (each flushes at a quarter of it): at most
#: this, less when a run's memory budget gives them less (``memtable_bytes``).
MEMTABLE_BYTES = 32 << 20
MIN_MEMTABLE_BYTES = 4 << 20


def memtable_bytes(share: int) -> int:
    """The memtables of a run whose budget gives RocksDB ``share`` bytes for them."""
    return min(MEMTABLE_BYTES, max(MIN_MEMTABLE_BYTES, share))


#: Bloom filter bits per key of every column family; the Rust SST writer's
#: ``FILTER_MILLIBITS_PER_KEY`` writes the same filter for ingested files.
BLOOM_BITS_PER_KEY = 10
#: What an SST file being written holds until it closes (its filter's key hashes, 8 bytes a
#: key, and its index) before the next file starts: about two million keys a file.
SST_HELD_BYTES = 16 << 20
#: RocksDB's block cache, all column families together (left to itself, RocksDB gives each
#: family a cache of its own).
BLOCK_CACHE_BYTES = 16 << 20


class DataDir:
    """Opens DATADIR for one run (read-write, locked) or for reading (no lock, read-only)."""

    def __init__(
        self,
        path: str | Path,
        *,
        readonly: bool = False,
        create: bool = True,
        memtables: int = MEMTABLE_BYTES,
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._memtables = memtables
        self._lock_fd: int | None = None
        if readonly:
            if not (self.path / "rocksdb").exists():
                raise RechainError(f"{self.path}: no rechain data here (run a reindex first)")
        else:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
                self._lock_fd = os.open(self.path / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise RechainError(f"{self.path}: cannot use data folder: {e.strerror}") from e
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._lock_fd)
                self._lock_fd = None
                raise DataFolderBusy(
                    f"{self.path} is in use by another rechain run; "
                    "wait for it or use another --data"
                ) from None
        self.db = self._open_db(create and not readonly)
        self._cfs = {name: self.db.get_column_family(name) for name in layout.COLUMN_FAMILIES}
        self._check_layout()

    def _open_db(self, create: bool) -> Rdict:
        opts = Options(raw_mode=True)
        opts.create_if_missing(create)
        opts.create_missing_column_families(True)
        opts.set_max_background_jobs(2)
        # Memtables of every column family together: the chain state writes its set and undo
        # data through them, and RocksDB's defaults (64 MiB per family, two each) would take
        # more than a small --memory-budget.
        opts.set_db_write_buffer_size(self._memtables)
        path = str(self.path / "rocksdb")
        try:
            existing = (
                Rdict.list_cf(path, opts) if (self.path / "rocksdb" / "CURRENT").exists() else []
            )
            self._block_cache = Cache(BLOCK_CACHE_BYTES)
            cfs = {name: self._cf_options() for name in set(layout.COLUMN_FAMILIES) | set(existing)}
            cfs.pop("default", None)
            if self.readonly:
                return Rdict(path, opts, column_families=cfs, access_type=AccessType.read_only())
            return Rdict(path, opts, column_families=cfs)
        except Exception as e:  # rocksdict raises plain Exception with RocksDB's message
            raise RechainError(f"{path}: cannot open RocksDB: {e}") from e

    def _check_layout(self) -> None:
        raw = self.meta_get(layout.META_LAYOUT)
        if raw is None:
            if not self.readonly:
                self.write(
                    {layout.CF_META: [(layout.META_LAYOUT, {"version": layout.LAYOUT_VERSION})]}
                )
            return
        if raw.get("version") != layout.LAYOUT_VERSION:
            raise RechainError(
                f"{self.path}: data layout version {raw.get('version')} is not "
                f"{layout.LAYOUT_VERSION}; reindex into a new --data folder"
            )

    # -- key/value access -------------------------------------------------------------------
    def cf(self, name: str) -> Any:
        return self._cfs[name]

    def get(self, cf: str, key: bytes) -> bytes | None:
        value = self._cfs[cf].get(key)
        return None if value is None else bytes(value)

    def meta_get(self, key: bytes) -> Any:
        raw = self.get(layout.CF_META, key)
        return None if raw is None else json.loads(raw)

    def items(self, cf: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Entries of ``cf`` under ``prefix`` in key order. A read error (a corrupt block)
        raises: RocksDB's iterator would just stop there, as if the data ended."""
        it = self._cfs[cf].iter()
        it.seek(prefix)
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(prefix):
                return
            yield key, bytes(it.value())
            it.next()
        try:
            it.status()
        except Exception as e:
            raise RechainError(f"{self.path}: column family {cf} cannot be read: {e}") from e

    def write(
        self,
        puts: dict[str, list[tuple[bytes, Any]]],
        deletes: dict[str, list[bytes]] | None = None,
        *,
        sync: bool = True,
    ) -> None:
        """One atomic write; dict/list values are stored as JSON."""
        columns = {
            cf: (
                [k for k, _ in pairs],
                [
                    bytes(v)
                    if isinstance(v, bytes | bytearray)
                    else json.dumps(v, sort_keys=True).encode()
                    for _, v in pairs
                ],
            )
            for cf, pairs in puts.items()
        }
        self.write_columns(columns, deletes, sync=sync)

    def write_columns(
        self,
        puts: dict[str, tuple[list[bytes], list[bytes]]],
        deletes: dict[str, list[bytes]] | None = None,
        *,
        sync: bool = True,
    ) -> None:
        """One atomic write of (keys, values) lists per column family, deletes first. The
        batch is filled from C (``map``), not by an interpreter loop per key."""
        wb = WriteBatch(raw_mode=True)
        for cf, keys in (deletes or {}).items():
            wb.set_default_column_family(self.db.get_column_family_handle(cf))
            deque(map(wb.delete, keys), maxlen=0)
        for cf, (keys, values) in puts.items():
            if len(keys) != len(values):
                raise ValueError(f"{cf}: {len(keys)} keys but {len(values)} values")
            wb.set_default_column_family(self.db.get_column_family_handle(cf))
            deque(map(wb.put, keys, values), maxlen=0)
        opts = WriteOptions()
        opts.sync = sync
        self.db.write(wb, opts)

    def ingest_sorted(
        self, cf: str, keys: pa.Array, values: pa.Array, *, compress: bool = True
    ) -> None:
        """Bulk load of key-sorted binary columns (built by the Rust core): one SST file, then
        moved into the column family by RocksDB's atomic ingestion."""
        self.ingest_sorted_slices(
            cf,
            len(keys),
            lambda lo, hi: (keys.slice(lo, hi - lo), values.slice(lo, hi - lo)),
            compress=compress,
        )

    def ingest_sorted_slices(
        self,
        cf: str,
        count: int,
        entries: Callable[[int, int], tuple[KeyColumn, KeyColumn]],
        *,
        compress: bool = True,
    ) -> None:
        """``ingest_sorted`` for ``count`` entries handed out in key order by ``entries(lo,
        hi)`` a slice at a time (a million keys as Python bytes at once would cost hundreds of
        MiB)."""
        slices = (
            entries(lo, min(lo + INGEST_SLICE_ROWS, count))
            for lo in range(0, count, INGEST_SLICE_ROWS)
        )
        self.ingest_sorted_batches(cf, slices, compress=compress)

    def ingest_sorted_batches(
        self,
        cf: str,
        batches: Iterator[tuple[KeyColumn, KeyColumn]],
        *,
        compress: bool = True,
        sort_chunks: bool = False,
    ) -> None:
        """The one SST writer: key-sorted (keys, values) chunks (keys increasing across
        chunks, each chunk of a bounded size) streamed into one SST file, then ingested.
        ``compress=False`` for values that are mostly hashes, where block compression costs
        time and saves nothing. ``sort_chunks``: each chunk is sorted by key on the way in
        (the chunks themselves still come in key order)."""
        files = self.write_sst(cf, batches, compress=compress, sort_chunks=sort_chunks)
        if files:
            self.ingest_sst(cf, files)

    def write_sst(
        self,
        cf: str,
        batches: Iterator[tuple[KeyColumn, KeyColumn]],
        *,
        compress: bool = True,
        sort_chunks: bool = False,
        max_held: int = SST_HELD_BYTES,
    ) -> list[Path]:
        """The SST files of ``ingest_sorted_batches`` (in ``sst_dir(cf)``), written by the
        Rust core (``workers/native/src/sst.rs``) without touching the database: a stage can
        build them while other work runs and ingest them with ``ingest_sst`` once everything
        is ready. A file closes once its filter's key hashes and index hold ``max_held``
        bytes, so memory stays bounded whatever the number of keys. Chunks are Arrow binary
        arrays or lists of bytes. No files when there were no rows."""
        writer = _native.SstWriter(str(self.sst_dir(cf) / f"{cf}.sst"), compress, max_held)
        for keys, values in batches:
            if len(keys) != len(values):
                raise ValueError(f"{cf}: {len(keys)} keys but {len(values)} values")
            writer.add(keys, values, sort_chunks)
        writer.finish()
        return [Path(f) for f in writer.files]

    def sst_dir(self, cf: str) -> Path:
        """Where several SST files for column family ``cf`` are built before ``ingest_sst``
        (``DATADIR/tmp/<cf>/``, emptied first)."""
        folder = self.path / "tmp" / cf
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        return folder

    def ingest_sst(self, cf: str, sst: Path | list[Path]) -> None:
        """Moves an SST file from ``write_sst`` (or several, whose keys do not overlap) into
        column family ``cf``, in one atomic ingestion."""
        ingest = IngestExternalFileOptions()
        ingest.set_move_files(True)
        files = sst if isinstance(sst, list) else [sst]
        self._cfs[cf].ingest_external_file([str(f) for f in files], ingest)

    def reset_column_family(self, name: str) -> None:
        """Drops and recreates a derived column family (rebuilt whole by its stage)."""
        self.db.drop_column_family(name)
        self._cfs[name] = self.db.create_column_family(name, self._cf_options())

    # -- Parquet publication ------------------------------------------------------------------
    def parquet_dir(self, table: str) -> Path:
        return self.path / "parquet" / table

    def stage_parquet_batches(
        self, table: str, generation: int, batches: Iterator[pa.RecordBatch]
    ) -> Path:
        """Publishes one generation of a table written as one part (see ``stage_parquet_parts``)."""
        return self.stage_parquet_parts(table, generation, [batches])

    def stage_parquet_parts(
        self, table: str, generation: int, parts: list[Iterator[pa.RecordBatch]]
    ) -> Path:
        """Writes a generation's parts (``part-00000.parquet``, ... in the order given, each on
        its own thread: Arrow's writer releases the GIL) into a temp folder, fsyncs them and
        renames the folder. Batches are streamed (bounded memory), in the table's declared
        schema and layout (``schemas/tables``: ``Table.pyarrow_options``)."""
        import pyarrow.parquet as pq

        declared = tables.TABLES[table]
        options = declared.pyarrow_options()
        row_group = options.pop("row_group_size")

        def part_writer(batches: Iterator[pa.RecordBatch]) -> Callable[[Path], None]:
            def write(part: Path) -> None:
                with pq.ParquetWriter(part, declared.schema, **options) as writer:
                    for batch in batches:
                        writer.write_batch(batch, row_group_size=row_group)
                _fsync_file(part)  # here, on the part's thread

            return write

        tmp = self.begin_generation(table, generation)
        paths = [tmp / part_file_name(i) for i in range(len(parts))]
        if len(parts) == 1:
            part_writer(parts[0])(paths[0])
        else:
            with ThreadPoolExecutor(len(parts), thread_name_prefix=f"{table}-parquet") as pool:
                for done in [
                    pool.submit(part_writer(p), path) for p, path in zip(parts, paths, strict=True)
                ]:
                    done.result()
        return self.publish_generation(table, generation, tmp)

    def stage_parquet_files(
        self, tables: list[str], generation: int, write: Callable[[list[Path]], object]
    ) -> list[Path]:
        """Publishes one generation of tables written together by ``write``, which gets the
        path of one part per table (in the order of ``tables``; the Rust core's writers)."""
        tmps = [self.begin_generation(t, generation) for t in tables]
        parts = [tmp / part_file_name(0) for tmp in tmps]
        write(parts)
        for part in parts:
            _fsync_file(part)
        return [
            self.publish_generation(t, generation, tmp) for t, tmp in zip(tables, tmps, strict=True)
        ]

    def begin_generation(self, table: str, generation: int) -> Path:
        """The empty temp folder a generation's parts are written into (by any writer; then
        ``publish_generation``). The one way a table generation is published."""
        base = self.parquet_dir(table)
        tmp = base / f".{generation:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(base / f"{generation:06d}", ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def publish_generation(self, table: str, generation: int, tmp: Path) -> Path:
        """Makes every file under a generation's temp folder durable, then renames the folder
        into place. A file with other links is a part already published or staged, made
        durable when it was written: only the folder holding its new link is synced."""
        for path in tmp.rglob("*"):
            st = path.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                _fsync_file(path)
        for folder in [p for p in tmp.rglob("*") if p.is_dir()]:
            fsync_dir(folder)
        base = self.parquet_dir(table)
        final = base / f"{generation:06d}"
        kill_point("store.generation_staged")
        os.rename(tmp, final)
        fsync_dir(base)
        kill_point("store.generation_renamed")
        return final

    def remove_other_generations(self, table: str, keep: int | None) -> None:
        """Removes a table's generations but ``keep`` and the one the table view holds
        (readers see it until the run switches the view: ``publish_view``)."""
        base = self.parquet_dir(table)
        if not base.exists():
            return
        kept = {
            f"{keep:06d}" if keep is not None else None,
            current_generation_name(self.path, table),
        }
        for child in base.iterdir():
            if child.name not in kept:
                shutil.rmtree(child, ignore_errors=True)

    def publish_view(self) -> None:
        """Makes the newest generation of every table the one readers see, all at once."""
        publish_view(self.path)

    def write_report(self, name: str, report: dict[str, Any]) -> Path:
        """The last run's report as ``DATADIR/reports/<name>.json`` (temp file, fsync, rename)."""
        folder = self.path / "reports"
        folder.mkdir(exist_ok=True)
        text = json.dumps(report, indent=1, sort_keys=True)
        return write_file_atomic(folder / f"{name}.json", lambda tmp: tmp.write_text(text))

    def close(self) -> None:
        # A column family's handle keeps the database open (and its lock held) while it lives:
        # dropped first, so this object lingering after a ``with`` block holds nothing.
        self._cfs.clear()
        try:
            self.db.close()
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _cf_options(self) -> Options:
        table = BlockBasedOptions()
        table.set_block_cache(self._block_cache)
        # Whole-key Bloom filters (full, not block-based), as the SST writer writes them:
        # a lookup of an absent key (most new txids) reads no data block.
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
        opts = Options(raw_mode=True)
        opts.set_write_buffer_size(self._memtables // 4)
        opts.set_block_based_table_factory(table)
        return opts

    def __enter__(self) -> DataDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_file_atomic(final: Path, write: Callable[[Path], object]) -> Path:
    """The one way a single file is made durable under its final name: ``write`` fills a
    temp file beside it, which is fsynced, renamed into place, and its folder fsynced. A
    killed writer leaves at most a ``.*.tmp`` file, never a torn ``final``."""
    write_files_atomic([final], lambda tmps: write(tmps[0]))
    return final


def write_files_atomic(finals: list[Path], write: Callable[[list[Path]], object]) -> None:
    """``write_file_atomic`` for files one writer fills together (in parallel, say): each
    is renamed into place once all are written and synced."""
    tmps = [tmp_path(final) for final in finals]
    for tmp in tmps:
        tmp.unlink(missing_ok=True)
    write(tmps)
    land_tmp_files(finals)


def tmp_path(final: Path) -> Path:
    """The temp file ``final`` is written as before it is renamed into place."""
    return final.with_name(f".{final.name}.tmp")


def land_tmp_files(finals: list[Path]) -> None:
    """Renames the written temp files of ``finals`` (``tmp_path``; by this process or by a
    worker sharing its file system) into place, each fsynced first, then their folders."""
    land_files([(tmp_path(final), final) for final in finals])


def land_files(moves: list[tuple[Path, Path]]) -> None:
    """The one landing of written files: each (temp, final) fsynced and renamed into place,
    then the folders of the finals fsynced. A kill leaves temp files, never a torn final."""
    for tmp, final in moves:
        _fsync_file(tmp)
        os.rename(tmp, final)
    for folder in dict.fromkeys(final.parent for _, final in moves):
        fsync_dir(folder)


def land_folder(tmp: Path, final: Path) -> None:
    """``land_files`` for a written folder of files: each fsynced, the folder renamed into
    place, then its parent fsynced."""
    for f in tmp.iterdir():
        _fsync_file(f)
    fsync_dir(tmp)
    os.rename(tmp, final)
    fsync_dir(final.parent)


def land_worker_files(moves: list[tuple[bytes | str | Path, Path, Path]]) -> None:
    """Lands what workers staged: (content, temp, final) where content is the file's bytes
    (a worker on another machine returned them; written here to ``temp``) or the path the
    worker wrote, which must be ``temp``."""
    for content, tmp, _ in moves:
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        elif Path(content) != tmp:
            raise ValueError(f"a worker staged {content}, not {tmp}")
    land_files([(tmp, final) for _, tmp, final in moves])


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def part_file_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
