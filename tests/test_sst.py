"""The Rust SST writer (``workers/native/src/sst.rs``) against RocksDB itself: its files are
ingested into a real database, read back whole and by key, survive a reopen and a compaction,
hold exactly what RocksDB's own ``SstFileWriter`` gives for the same entries, and carry block
checksums RocksDB checks."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from rechain.pipeline.errors import RechainError
from rechain.pipeline.store import datadir as store
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rocksdict import BlockBasedOptions, IngestExternalFileOptions, Options, Rdict, SstFileWriter


def entries(n: int, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """Sorted distinct keys of 0 to 40 bytes (shared prefixes and all), values from empty to
    several blocks long."""
    rng = random.Random(seed)
    keys = {rng.randbytes(rng.choice((0, 1, 2, 8, 32, 40))) for _ in range(n)}
    keys |= {b"tx" + i.to_bytes(4, "big") for i in range(n // 4)}
    sizes = (0, 1, 20, 80, 300, 5000, 20_000)
    return [(k, rng.randbytes(rng.choice(sizes))) for k in sorted(keys)]


def ingest(db_path: Path, sst: Path) -> Rdict:
    db = Rdict(str(db_path), Options(raw_mode=True))
    opts = IngestExternalFileOptions()
    opts.set_move_files(True)
    db.ingest_external_file([str(sst)], opts)
    return db


def write_ours(path: Path, items: list[tuple[bytes, bytes]], compress: bool, chunk: int) -> int:
    writer = _native.SstWriter(str(path), compress)
    for at in range(0, len(items), chunk):
        part = items[at : at + chunk]
        keys, values = [k for k, _ in part], [v for _, v in part]
        if at // chunk % 2:  # Arrow arrays and lists of bytes alike
            writer.add(pa.array(keys, pa.binary()), pa.array(values, pa.large_binary()))
        else:
            writer.add(keys, values)
    return int(writer.finish())


@pytest.mark.parametrize("compress", [False, True])
def test_rocksdb_ingests_and_reads_back_every_entry(tmp_path: Path, compress: bool) -> None:
    items = entries(6000)
    sst = tmp_path / "ours.sst"
    assert write_ours(sst, items, compress, chunk=1000) == len(items)
    db = ingest(tmp_path / "db", sst)
    assert list(db.items()) == items
    rng = random.Random(1)
    for key, value in rng.sample(items, 200):
        assert db[key] == value
    present = {k for k, _ in items}
    for _ in range(200):
        missing = rng.randbytes(rng.choice((3, 9, 33)))
        if missing not in present:
            assert db.get(missing) is None
    db.close()
    # Reopened (the manifest's record of the file checks out), then compacted with
    # overlapping writes (RocksDB reads every block of the file and rewrites it).
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    assert list(db.items()) == items
    db[items[10][0]] = b"changed"
    db[b"tx\xff"] = b"new"
    db.compact_range(None, None)
    expected = dict(items) | {items[10][0]: b"changed", b"tx\xff": b"new"}
    assert list(db.items()) == sorted(expected.items())
    db.close()


def test_same_database_content_as_rocksdbs_own_writer(tmp_path: Path) -> None:
    items = entries(3000, seed=11)
    theirs = tmp_path / "theirs.sst"
    writer = SstFileWriter(Options(raw_mode=True))
    writer.open(str(theirs))
    for key, value in items:
        writer[key] = value
    writer.finish()
    ours = tmp_path / "ours.sst"
    write_ours(ours, items, True, chunk=700)
    a, b = ingest(tmp_path / "a", theirs), ingest(tmp_path / "b", ours)
    assert list(a.items()) == list(b.items()) == items
    a.close()
    b.close()


def test_sorted_chunks_and_refused_orders(tmp_path: Path) -> None:
    items = entries(2000, seed=3)
    first, second = items[:1000], items[1000:]
    writer = _native.SstWriter(str(tmp_path / "s.sst"), False)
    for part in (first, second):
        shuffled = random.Random(5).sample(part, len(part))
        writer.add([k for k, _ in shuffled], [v for _, v in shuffled], True)
    assert writer.finish() == len(items)
    db = ingest(tmp_path / "db", tmp_path / "s.sst")
    assert list(db.items()) == items
    db.close()

    writer = _native.SstWriter(str(tmp_path / "bad.sst"), False)
    writer.add([b"a", b"c"], [b"1", b"2"])
    with pytest.raises(ValueError, match="entry 2: keys must be strictly increasing"):
        writer.add([b"c"], [b"3"])  # equal to the last key of the chunk before
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        writer.add([b"d", b"e"], [b"4"])
    with pytest.raises(ValueError, match="binary"):
        writer.add(pa.array([1, 2]), pa.array([1, 2]))
    assert writer.finish() == 2
    with pytest.raises(ValueError, match="already finished"):
        writer.add([b"z"], [b"z"])

    empty = tmp_path / "empty.sst"
    assert _native.SstWriter(str(empty), True).finish() == 0
    assert not empty.exists()


def test_a_flipped_byte_is_caught_by_rocksdbs_block_checksum(tmp_path: Path) -> None:
    items = [(i.to_bytes(4, "big"), b"value %d" % i) for i in range(5000)]
    sst = tmp_path / "ours.sst"
    write_ours(sst, items, False, chunk=5000)
    clean = sst.read_bytes()

    def flipped(at: int) -> Path:
        raw = bytearray(clean)
        raw[at] ^= 0x01
        sst.write_bytes(bytes(raw))
        return sst

    # In the first data block, ingestion itself reads it.
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    with pytest.raises(Exception, match="block checksum mismatch"):
        db.ingest_external_file([str(flipped(100))], IngestExternalFileOptions())
    db.close()
    # In a middle block, the first read of it does; RocksDB's iterator would only stop
    # there as if the data ended, and DataDir.items says so instead.
    with DataDir(tmp_path / "data") as data:
        data.ingest_sst(layout.CF_BTC_TXINDEX, flipped(len(clean) // 3))
        with pytest.raises(RechainError, match="cannot be read.*block checksum mismatch"):
            list(data.items(layout.CF_BTC_TXINDEX))
        assert data.get(layout.CF_BTC_TXINDEX, items[0][0]) == items[0][1]


def test_datadir_ingests_through_it(tmp_path: Path) -> None:
    keys = [i.to_bytes(32, "big") for i in range(1, 4001)]
    values = [b"v%d" % i for i in range(1, 4001)]
    with DataDir(tmp_path / "data") as data:
        data.ingest_sorted_slices(
            layout.CF_BTC_TXINDEX,
            len(keys),
            lambda lo, hi: (pa.array(keys[lo:hi], pa.binary(32)), values[lo:hi]),
        )
        assert list(data.cf(layout.CF_BTC_TXINDEX).items()) == list(zip(keys, values, strict=True))
        assert not any((tmp_path / "data" / "tmp" / layout.CF_BTC_TXINDEX).iterdir())


def test_rocksdb_reads_our_bloom_filter(tmp_path: Path) -> None:
    """RocksDB with the store's filter policy uses the filter our writer puts in each file: no
    key of any length up to XXPH3's mid-size limit is filtered out (a wrong hash or layout
    would lose nearly all), and about 99% of absent-key lookups end at the filter. A file
    with a longer key has no filter and is read as before."""
    rng = random.Random(9)
    lengths = (0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 32, 33, 64, 65, 96, 97, 128, 129, 200, 240)
    keys = sorted({rng.randbytes(rng.choice(lengths)) for _ in range(30_000)} | {b""})
    present = set(keys)
    absent = [k for k in (rng.randbytes(rng.choice(lengths)) for _ in range(10_000))]
    absent = [k for k in absent if k not in present]
    for long_key in (False, True):
        items = keys + [b"\xff" * 241] if long_key else keys
        sst = tmp_path / f"f{long_key}.sst"
        writer = _native.SstWriter(str(sst), False)
        writer.add(items, [b"v"] * len(items))
        writer.finish()
        opts = Options(raw_mode=True)
        table = BlockBasedOptions()
        table.set_bloom_filter(store.BLOOM_BITS_PER_KEY, False)
        opts.set_block_based_table_factory(table)
        opts.enable_statistics()
        db = Rdict(str(tmp_path / f"db{long_key}"), opts)
        db.ingest_external_file([str(sst)], IngestExternalFileOptions())
        assert all(db.get(k) == b"v" for k in items)
        assert all(db.get(k) is None for k in absent)
        stats = dict(
            line.split(" COUNT : ")
            for line in opts.get_statistics().splitlines()
            if " COUNT : " in line
        )
        useful = int(stats["rocksdb.bloom.filter.useful"])
        if long_key:
            assert useful == 0
        else:
            assert useful >= 0.97 * len(absent)
        db.close()


def test_files_close_at_the_held_bytes_and_ingest_together(tmp_path: Path) -> None:
    """A writer given `max_held` starts a new file once the open one holds that many bytes
    (its filter's 8-byte key hashes and its index): the files keep key order, never overlap,
    and RocksDB ingests them together to the same content as one file."""
    items = [(i.to_bytes(8, "big"), b"value %05d" % i) for i in range(20_000)]
    with DataDir(tmp_path / "data") as data:
        files = data.write_sst(
            layout.CF_BTC_TXINDEX,
            iter([([k for k, _ in items], [v for _, v in items])]),
            max_held=32 << 10,
        )
        # 160 KB of key hashes and a few KiB of index, closed at 32 KiB: five files.
        assert len(files) == 5, files
        assert files[0].name == f"{layout.CF_BTC_TXINDEX}.sst"
        assert files[1].name == f"{layout.CF_BTC_TXINDEX}-000001.sst"
        data.ingest_sst(layout.CF_BTC_TXINDEX, files)
        assert list(data.cf(layout.CF_BTC_TXINDEX).items()) == items
        assert data.write_sst(layout.CF_BTC_TXINDEX, iter([])) == []
