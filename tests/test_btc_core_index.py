"""Bitcoin Core's block index: rechain's export read by an independent reader
(blockchain-parser, on plyvel) and by Core's own engine (which starts on it and connects the
chain it names), the index-guided reindex equal to a full scan on rechain's index and on the
index Core's reindex wrote, and damaged indexes reported (file, offset, reason) or refused with
a fallback, never a crash."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plyvel
import pyarrow.parquet as pq
import pytest
from blockchain_parser.blockchain import Blockchain
from blockchain_parser.index import DBBlockIndex, _read_varint
from blockchain_parser.utils import format_hash
from rechain.pipeline.bitcoin.core_index import FileHints, guided_units
from rechain.pipeline.bitcoin.plan import BlkFile
from rechain.pipeline.verify import verify
from rechain.workers import _native
from rechain.workers.btc_scan import WorkUnit, scan_unit

from tests.conftest import CORPUS, cli, cli_json, gen_chain, reindex
from tests.test_btc_core_oracle import assert_same_end, core_oracle, run_core
from tests.test_btc_corpus import CASES

HAVE_DATA = 8


def query(data: Path, sql: str) -> list[dict[str, Any]]:
    return cli_json("query", "--data", data, sql, "--format", "json")


def export(data: Path, out: Path, *extra: str) -> dict[str, Any]:
    return cli_json("btc", "export-core-index", "--data", data, "--out", out, "--json", *extra)


def digest(data: Path) -> str:
    result = verify(data)
    assert result["ok"], result["problems"]
    return result["digest"]["content"]


def core_records(index: Path) -> dict[str, DBBlockIndex]:
    """The 'b' records as blockchain-parser decodes them (its own VARINT reader)."""
    db = plyvel.DB(str(index), compression=None)
    try:
        return {
            format_hash(k[1:]): DBBlockIndex(format_hash(k[1:]), v)
            for k, v in db.iterator(prefix=b"b")
        }
    finally:
        db.close()


def fresh_copy(index: Path, dest: Path) -> Path:
    shutil.copytree(index, dest)
    return dest


@pytest.fixture(scope="module")
def forked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A chain with side branches, orphans and several files (no XOR: blockchain-parser reads
    raw bytes), its full-scan reindex and rechain's export of it."""
    root = tmp_path_factory.mktemp("forked")
    gen_chain(
        root / "node",
        *("--blocks", "1200", "--side-branches", "4", "--orphans", "3"),
        *("--tx-per-block", "1:3", "--file-size", "96K", "--shuffle-window", "32"),
        *("--seed", "11", "--no-xor"),
    )
    blocks = root / "node" / "blocks"
    data = root / "data"
    reindex(blocks, data)
    index = root / "index"
    export(data, index)
    return {"blocks": blocks, "data": data, "index": index, "root": root}


def test_independent_reader_decodes_every_exported_record(forked: dict[str, Path]) -> None:
    records = core_records(forked["index"])
    linked = query(
        forked["data"],
        "SELECT hash, prev_hash, merkle_root, height, file, data_pos, copy_status, nonce "
        "FROM headers WHERE height IS NOT NULL",
    )
    orphans = query(forked["data"], "SELECT hash FROM headers WHERE status = 'orphan'")
    assert orphans, "the chain has orphans, which Core never indexes"
    assert set(records) == {r["hash"] for r in linked}
    for r in linked:
        got = records[r["hash"]]
        assert got.height == r["height"]
        assert (got.prev_hash, got.merkle_root, got.nonce) == (
            r["prev_hash"],
            r["merkle_root"],
            r["nonce"],
        )
        # Header mode: the tree is valid and the data present; transactions not validated.
        assert got.status == 2 | HAVE_DATA and got.n_tx == 0
        assert (got.file, got.data_pos) == (r["file"], r["data_pos"])


def test_file_records_and_last_file(forked: dict[str, Path]) -> None:
    rows = query(
        forked["data"],
        "SELECT file, count(*) AS n, min(height) AS h0, max(height) AS h1, min(time) AS t0, "
        "max(time) AS t1, max(data_pos + size) AS used FROM headers "
        "WHERE height IS NOT NULL AND copy_status = 'ok' GROUP BY file ORDER BY file",
    )
    assert len(rows) > 3
    db = plyvel.DB(str(forked["index"]))
    try:
        for r in rows:
            raw = db.get(b"f" + r["file"].to_bytes(4, "little"))
            fields, pos = [], 0
            while pos < len(raw):
                v, n = _read_varint(raw[pos:])
                fields.append(v)
                pos += n
            assert fields == [r["n"], r["used"], 0, r["h0"], r["h1"], r["t0"], r["t1"]]
        assert db.get(b"l") == rows[-1]["file"].to_bytes(4, "little")
        assert db.get(b"R") is None, "no reindex in progress"
        assert list(db.iterator(prefix=b"F")) == [], "an unpruned node writes no flags"
    finally:
        db.close()


def test_blockchain_parser_iterates_the_chain_in_height_order(
    tmp_path: Path,
) -> None:
    # get_ordered_blocks resolves equal heights by looking 6 blocks ahead, so it is given a
    # chain without side branches (orphans stay: Core's index has none of them).
    gen_chain(
        tmp_path / "node",
        *("--blocks", "600", "--orphans", "2", "--file-size", "64K", "--no-xor"),
    )
    blocks = tmp_path / "node" / "blocks"
    reindex(blocks, tmp_path / "data")
    export(tmp_path / "data", tmp_path / "index")
    best = (tmp_path / "node" / "best_chain.txt").read_text().split()
    got = [
        (b.height, b.hash)
        for b in Blockchain(str(blocks)).get_ordered_blocks(str(tmp_path / "index"))
    ]
    assert got == list(enumerate(best))


def test_guided_reindex_equals_full_scan(forked: dict[str, Path], tmp_path: Path) -> None:
    result = reindex(forked["blocks"], tmp_path / "data", "--core-index", forked["index"])
    ci = result["run"]["core_index"]
    assert ci["fallback"] is None and ci["disagreements"] == []
    assert ci["verified"] == ci["with_data"] == ci["entries"]
    assert digest(tmp_path / "data") == digest(forked["data"])
    # Round trip: the guided run's export holds the same records as the first export.
    export(tmp_path / "data", tmp_path / "again")
    first, second = core_records(forked["index"]), core_records(tmp_path / "again")
    assert {h: vars(r) for h, r in first.items()} == {h: vars(r) for h, r in second.items()}


def test_tree_positions_are_the_published_table_columns(forked: dict[str, Path]) -> None:
    """The guided check takes file, offset and height from the linked tree instead of reading
    the headers table back: both must be the same columns, row for row."""
    from rechain.pipeline.bitcoin.scan_log import BtcCommitter
    from rechain.pipeline.store.datadir import DataDir
    from rechain.pipeline.store.table_view import newest_generation
    from rechain.schemas import bitcoin as ds
    from rechain.schemas import rocksdb as layout

    with DataDir(forked["data"], readonly=True) as data:
        log = BtcCommitter(data, "regtest").scan_log(layout.SEGMENT_RECORDS, ds.RECORDS)
        generation = newest_generation(data.parquet_dir(ds.HEADERS))
    assert generation is not None
    table = pq.read_table(generation, columns=["file", "offset", "height"])
    positions = _native.HeaderTree(log.to_batches(), "regtest").positions()
    assert positions.num_rows == table.num_rows > 1200
    assert positions.column("height").null_count > 0  # orphans are rows without a height
    for name in ("file", "offset", "height"):
        assert positions.column(name).to_pylist() == table.column(name).to_pylist(), name


def test_position_check_reports_table_rows_from_either_half() -> None:
    """The check splits the linked rows between threads; rows keep their table numbers."""
    import pyarrow as pa

    n = 10
    offsets = [100 * i for i in range(n)]
    hints = [
        (
            3,
            b"".join(o.to_bytes(8, "little") for o in offsets),
            b"".join(bytes([i]) * 32 for i in range(n)),
            b"".join(i.to_bytes(4, "little") for i in range(n)),
        )
    ]
    heights = list(range(n))
    heights[1], heights[8] = 50, None  # row 1 disagrees; row 8 is not linked
    rows = _native.core_index_position_check(
        hints,
        [(3, 500)],  # the scan missed this start: no verdict for row 5
        pa.array([3] * n, pa.uint32()),
        pa.array(offsets, pa.uint64()),
        pa.array([h if i != 5 else 99 for i, h in enumerate(heights)], pa.uint32()),
    )
    assert [(r, h) for r, h, _ in rows] == [(1, 1), (8, 8)]
    assert rows[1][2] == (bytes([8]) * 32).hex()


def test_guided_units_cut_at_indexed_starts_equal_a_full_scan(
    forked: dict[str, Path], tmp_path: Path
) -> None:
    """Small shards cut every indexed file into several units, each starting on an indexed
    record; stitched, they equal the full scan, run in this process (no Ray start-up)."""
    result = reindex(
        forked["blocks"], tmp_path / "data", "--core-index", forked["index"], "--shard-size", "8K"
    )
    run = result["run"]
    files = len(list(forked["blocks"].glob("blk*.dat")))
    assert run["shards"] > 3 * files, "every indexed file is split into several units"
    assert run["ray_start_s"] == 0.0
    ci = run["core_index"]
    assert ci["disagreements"] == [] and ci["verified"] == ci["entries"]
    assert digest(tmp_path / "data") == digest(forked["data"])


def test_guided_units_carry_their_own_hints_and_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "blk00000.dat"
    path.write_bytes(bytes(1000))
    offsets = [0, 90, 250, 400, 610, 990, 5000]  # the last two: past the end of a record / file
    hints = FileHints(
        b"".join(o.to_bytes(8, "little") for o in offsets),
        b"".join(bytes([i]) * 32 for i in range(len(offsets))),
        b"".join(i.to_bytes(4, "little") for i in range(len(offsets))),
        len(offsets),
    )
    units = guided_units(BlkFile(0, path, 1000), 50, hints, 300, "regtest", bytes(8), False, 4)
    # Cuts at the first indexed start at or after each 300-byte grid point.
    assert [(u.start, u.bound) for u in units] == [(50, 400), (400, 610), (610, 990), (990, 1000)]
    assert [u.seq for u in units] == [4, 5, 6, 7]
    got = [
        [
            int.from_bytes(u.hint_offsets[i : i + 8], "little")
            for i in range(0, len(u.hint_offsets), 8)
        ]
        for u in units
    ]
    assert got == [[90, 250], [400], [610], [990, 5000]]
    assert units[3].hint_hashes == bytes([5]) * 32 + bytes([6]) * 32


def test_damaged_records_are_reported_and_the_result_still_equals_a_full_scan(
    forked: dict[str, Path], tmp_path: Path
) -> None:
    index = fresh_copy(forked["index"], tmp_path / "index")
    rows = query(
        forked["data"],
        "SELECT hash, file, data_pos FROM headers WHERE height > 10 AND copy_status = 'ok' "
        "ORDER BY height LIMIT 7",
    )
    files = {f.name for f in forked["blocks"].glob("blk*.dat")}
    db = plyvel.DB(str(index))
    keys = [b"b" + bytes.fromhex(r["hash"])[::-1] for r in rows]
    values = [db.get(k) for k in keys]

    def moved(value: bytes, new_pos: int, height_change: int = 0) -> bytes:
        rec = DBBlockIndex("", value)
        out = bytearray()
        for v in (259_900, rec.height + height_change, rec.status, rec.n_tx, rec.file, new_pos):
            out += varint(v)
        return bytes(out) + value[-80:]

    db.put(keys[0], moved(values[0], rows[0]["data_pos"] + 3))  # inside its own record
    db.put(keys[1], moved(values[1], 10_000_000))  # past the end of the file
    db.put(keys[2], b"\xff" * 12 + values[2][-80:])  # impossible VARINT
    db.put(keys[3], values[4])  # key is not the hash of the header
    db.delete(keys[5])  # the index lacks a block: scanning finds it
    db.put(keys[6], moved(values[6], rows[6]["data_pos"], height_change=5))  # wrong height
    db.put(b"b" + b"\x07" * 32, values[4][:-80][:5])  # truncated value
    db.close()
    result = reindex(forked["blocks"], tmp_path / "data", "--core-index", index)
    assert digest(tmp_path / "data") == digest(forked["data"])
    found = {
        (d.get("hash") or d.get("key")): d for d in result["run"]["core_index"]["disagreements"]
    }
    h = [r["hash"] for r in rows]
    assert found[h[0]]["reason"].startswith(
        f"not a record start: inside the record at offset {rows[0]['data_pos'] - 8} "
    )
    assert found[h[0]]["offset"] == rows[0]["data_pos"] + 3 - 8
    assert found[h[0]]["file"] in files
    assert found[h[0]]["found_at"] == {
        "file": f"blk{rows[0]['file']:05d}.dat",
        "offset": rows[0]["data_pos"] - 8,
    }
    assert found[h[1]]["reason"].startswith("offset past the end of the file")
    assert found[h[2]]["reason"] == "VARINT too large for its field"
    assert found[h[3]]["reason"] == "key is not the hash of the stored header"
    assert found["07" * 32]["reason"] == "value truncated"
    assert h[5] not in found
    height = DBBlockIndex("", values[6]).height
    assert found[h[6]]["reason"] == f"index height {height + 5}, the files give height {height}"
    assert found[h[6]]["offset"] == rows[6]["data_pos"] - 8
    assert len(found) == 6


def varint(v: int) -> bytes:
    """Core's VARINT, written here independently of rechain's encoder for test values."""
    out = [v & 0x7F]
    while v > 0x7F:
        v = (v >> 7) - 1
        out.append(0x80 | (v & 0x7F))
    return bytes(reversed(out))


@pytest.mark.parametrize("damage", ["not_leveldb", "corrupt_table", "missing"])
def test_unreadable_index_falls_back_to_scanning(
    forked: dict[str, Path], tmp_path: Path, damage: str
) -> None:
    index = tmp_path / "index"
    if damage == "not_leveldb":
        index.mkdir()
        (index / "CURRENT").write_text("MANIFEST-000099\n")
    elif damage == "corrupt_table":
        fresh_copy(forked["index"], index)
        tables = sorted(index.glob("*.ldb")) + sorted(index.glob("*.log"))
        biggest = max(tables, key=lambda p: p.stat().st_size)
        raw = bytearray(biggest.read_bytes())
        raw[len(raw) // 2 : len(raw) // 2 + 4096] = b"\x5a" * 4096
        biggest.write_bytes(bytes(raw))
    code, out, err = cli(
        "btc",
        "reindex",
        "--blocks",
        forked["blocks"],
        "--data",
        tmp_path / "data",
        "--network",
        "regtest",
        "--no-progress",
        "--json",
        "--core-index",
        index,
    )
    assert code == 0, err
    ci = json.loads(out)["run"]["core_index"]
    if damage == "corrupt_table" and ci["fallback"] is None:
        # LevelDB may skip a damaged log record: the blocks it held are reported as problems
        # or simply found by scanning; either way the result is the full scan's.
        assert ci["verified"] < ci["entries"] or ci["disagreements"]
    else:
        assert "damaged LevelDB" in ci["fallback"] or "not a LevelDB" in ci["fallback"]
        assert str(index) in ci["fallback"]
    assert digest(tmp_path / "data") == digest(forked["data"])


def test_export_refuses_an_existing_folder_and_an_empty_data_dir(
    forked: dict[str, Path], tmp_path: Path
) -> None:
    code, _, err = cli(
        "btc", "export-core-index", "--data", forked["data"], "--out", forked["index"]
    )
    assert code == 2 and "not an empty folder" in err
    code, _, err = cli(
        "btc", "export-core-index", "--data", tmp_path / "nothing", "--out", tmp_path / "out"
    )
    assert code == 2 and "run a reindex first" in err


@pytest.mark.parametrize("checks", [["--check-bodies"], ["--mode", "full"]])
def test_body_checks_mark_valid_transactions(tmp_path: Path, checks: list[str]) -> None:
    gen_chain(tmp_path / "node", "--blocks", "120", "--tx-per-block", "1:4", "--no-xor")
    reindex(tmp_path / "node" / "blocks", tmp_path / "data", *checks)
    export(tmp_path / "data", tmp_path / "index")
    n_tx = {
        r["hash"]: r["n_tx"] for r in query(tmp_path / "data", "SELECT hash, n_tx FROM headers")
    }
    records = core_records(tmp_path / "index")
    assert len(records) == 120
    for h, rec in records.items():
        # VALID_TRANSACTIONS | HAVE_DATA | OPT_WITNESS (segwit is active from regtest genesis).
        assert rec.status == 3 | HAVE_DATA | 128
        assert rec.n_tx == n_tx[h] >= 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_guided_scan_equals_plain_scan_on_the_corpus(name: str) -> None:
    """Hints at the true records, at bogus offsets and past the end never change the scan."""
    case = CASES[name]
    key = bytes.fromhex(case["read_with_xor_key"]) if case["read_with_xor_key"] else bytes(8)
    path = CORPUS / name
    size = path.stat().st_size
    network = {"regtest": "regtest", "main": "main", "testnet3": "testnet"}[case["network"]]
    plain = scan_unit(WorkUnit(0, str(path), 0, 0, size, network, key))
    offsets = plain.records.column("magic_offset").to_pylist()
    hashes = plain.records.column("hash").to_pylist()
    bogus = [(o + 5, h) for o, h in zip(offsets, hashes, strict=True)] + [(size + 100, b"\1" * 32)]
    hints = sorted([*zip(offsets, hashes, strict=True), *bogus])
    unit = WorkUnit(
        0,
        str(path),
        0,
        0,
        size,
        network,
        key,
        False,
        b"".join(o.to_bytes(8, "little") for o, _ in hints),
        b"".join(h for _, h in hints),
    )
    guided = scan_unit(unit)
    assert guided.records.equals(plain.records)
    assert guided.events.equals(plain.events)
    plain_info = {k: v for k, v in plain.info.items() if k != "bytes_read"}
    assert {k: v for k, v in guided.info.items() if k not in ("bytes_read", "hints")} == plain_info
    report = guided.info["hints"]
    statuses = plain.records.column("status").to_pylist()
    assert report["verified"] == statuses.count("ok")
    missed = {o for o, _, _ in report["misses"]}
    assert missed >= {o for o, _ in bogus}
    assert _native.display_hash(b"\1" * 32) in {h for _, h, _ in report["misses"]}


# Bitcoin Core itself on both sides of the index (tests/bitcoin_core, built as
# test_btc_core_oracle.py builds it): Core's engine starts on a data directory whose
# blocks/index rechain exported, and rechain's --core-index reads the index Core's reindex wrote.

#: nStatus bits (Core's chain.h): the validity level's mask and two levels, HAVE_UNDO.
VALID_MASK, VALID_TRANSACTIONS, VALID_SCRIPTS, HAVE_UNDO = 7, 3, 5, 16


@contextlib.contextmanager
def read_copy(index: Path) -> Iterator[Path]:
    """A copy to read: LevelDB rewrites its folder on open, and Core's own index must stay as
    Core left it for the guided reindex that reads it."""
    with tempfile.TemporaryDirectory() as tmp:
        yield shutil.copytree(index, Path(tmp) / "index")


def index_records(index: Path) -> dict[str, dict[str, Any]]:
    """Every 'b' record as blockchain-parser decodes it, as plain fields."""
    with read_copy(index) as copy:
        return {h: vars(r) for h, r in core_records(copy).items()}


def file_records(index: Path) -> tuple[dict[int, list[int]], bytes | None]:
    """The 'f' records (CBlockFileInfo's seven VARINTs) by file number, and 'l'."""
    with read_copy(index) as copy:
        db = plyvel.DB(str(copy))
        try:
            files = {}
            for k, raw in db.iterator(prefix=b"f"):
                fields, pos = [], 0
                while pos < len(raw):
                    v, n = _read_varint(raw[pos:])
                    fields.append(v)
                    pos += n
                files[int.from_bytes(k[1:], "little")] = fields
            return files, db.get(b"l")
        finally:
            db.close()


@pytest.fixture(scope="module")
def core() -> Path:
    return core_oracle()


def node_datadir(blocks: Path, index: Path, dest: Path) -> Path:
    """A node's data directory: the blk files and xor.dat, and ``index`` as blocks/index."""
    (dest / "blocks").mkdir(parents=True)
    for f in [*blocks.glob("blk*.dat"), blocks / "xor.dat"]:
        shutil.copy2(f, dest / "blocks" / f.name)
    shutil.copytree(index, dest / "blocks" / "index")
    return dest


@pytest.fixture(scope="module")
def with_core(core: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A shuffled, XORed regtest chain over several files with side branches, orphans and a
    reorg; rechain's full reindex of it and its export; Core's own reindex of the same files in
    a data directory that is kept (Core's blocks/index)."""
    root = tmp_path_factory.mktemp("with_core")
    gen_chain(
        root / "node",
        *("--blocks", "300", "--side-branches", "3", "--orphans", "2", "--reorg", "3"),
        *("--tx-per-block", "1:4", "--file-size", "64K", "--shuffle-window", "8"),
        *("--seed", "23"),
    )
    blocks = root / "node" / "blocks"
    data = root / "data"
    # Full mode: the export then marks bodies VALID_TRANSACTIONS with nTx, which Core needs
    # to connect a block it did not store itself.
    reindex(blocks, data, "--mode", "full")
    export(data, root / "index")
    reindexed = run_core(
        core, "regtest", "--blocks", blocks, "--datadir", root / "core", "--list-chain"
    )
    assert reindexed["mode"] == "reindex" and reindexed["invalid_blocks"] == []
    return {
        "blocks": blocks,
        "data": data,
        "index": root / "index",
        "core_datadir": root / "core",
        "core_reindex": reindexed,
    }


def rechain_positions(data: Path) -> dict[str, tuple[int, int, int]]:
    rows = query(data, "SELECT hash, height, file, data_pos FROM headers WHERE in_best_chain")
    return {r["hash"]: (r["height"], r["file"], r["data_pos"]) for r in rows}


def test_core_opens_rechains_block_index(
    core: Path, with_core: dict[str, Any], tmp_path: Path
) -> None:
    """Core starts on rechain's blocks/index as a restarted node does (no reindex): it loads
    every record, connects the best chain from the blk files at the positions the records name
    (reading each block there and checking its hash) and ends where rechain and Core's own
    reindex of the same files end."""
    datadir = node_datadir(with_core["blocks"], with_core["index"], tmp_path / "node")
    exported = index_records(with_core["index"])
    out = run_core(core, "regtest", "--open", datadir, "--list-chain")
    assert out["mode"] == "open"
    assert out["invalid_blocks"] == [] and out["log_errors"] == [], out["log_errors"]
    # Tip, chainwork, best chain and UTXO set: rechain's (btc status, headers table).
    assert_same_end(out, with_core["data"])
    theirs = with_core["core_reindex"]
    assert out["best_chain"] == theirs["best_chain"]
    for key in ("tip_hash", "tip_height", "chainwork", "utxo_count", "hash_serialized_3"):
        assert out[key] == theirs[key], key

    # What Core flushed to the index after connecting: every best-chain record rewritten by
    # Core (scripts checked, undo data written), at the position rechain's table names.
    opened = index_records(datadir / "blocks" / "index")
    positions = rechain_positions(with_core["data"])
    assert set(positions) == set(out["best_chain"])
    for h, (height, file, data_pos) in positions.items():
        rec = opened[h]
        assert exported[h]["status"] & VALID_MASK < VALID_SCRIPTS, "rechain claims no scripts"
        # Genesis is never connected as such: no scripts, no undo data (spec §6.3).
        if height > 0:
            assert rec["status"] & VALID_MASK == VALID_SCRIPTS and rec["status"] & HAVE_UNDO, h
        assert (rec["height"], rec["file"], rec["data_pos"]) == (height, file, data_pos), h

    # Core's own reindex of the same files ends with the same index: same blocks (side
    # branches included, orphans excluded), heights, positions, nTx, status and undo positions.
    own = index_records(with_core["core_datadir"] / "blocks" / "index")
    assert len(own) > len(positions), "side branches are indexed too"
    assert opened == own
    # And rechain's export says of each block what Core's reindex says, but for what only
    # connecting adds (script validity, undo data).
    for h, rec in own.items():
        mine = exported[h]
        assert {k: v for k, v in mine.items() if k not in ("status", "undo_pos")} == {
            k: v for k, v in rec.items() if k not in ("status", "undo_pos")
        }, h
        # Core's status with its validity capped at rechain's level and no undo data.
        level = min(rec["status"] & VALID_MASK, VALID_TRANSACTIONS)
        assert mine["status"] == rec["status"] & ~(VALID_MASK | HAVE_UNDO) | level, h
    # File records: rechain writes no undo sizes (it writes no rev files); the rest is Core's.
    mine_files, mine_last = file_records(with_core["index"])
    own_files, own_last = file_records(with_core["core_datadir"] / "blocks" / "index")
    assert mine_last == own_last
    assert {f: v[:2] + v[3:] for f, v in mine_files.items()} == {
        f: v[:2] + v[3:] for f, v in own_files.items()
    }
    assert file_records(datadir / "blocks" / "index") == (own_files, own_last)


def test_core_refuses_an_index_record_at_another_blocks_position(
    core: Path, with_core: dict[str, Any], tmp_path: Path
) -> None:
    """Core reads each block where the index says: one record pointed at the next block's
    position, and Core stops there instead of connecting past it."""
    index = fresh_copy(with_core["index"], tmp_path / "index")
    positions = rechain_positions(with_core["data"])
    by_height = {height: (h, file, pos) for h, (height, file, pos) in positions.items()}
    victim, _, _ = by_height[150]
    other, other_file, other_pos = by_height[151]
    db = plyvel.DB(str(index))
    key = b"b" + bytes.fromhex(victim)[::-1]
    value = db.get(key)
    rec = DBBlockIndex("", value)
    version, _ = _read_varint(value)
    moved = b"".join(
        varint(v) for v in (version, rec.height, rec.status, rec.n_tx, other_file, other_pos)
    )
    db.put(key, moved + value[-80:])
    db.close()
    datadir = node_datadir(with_core["blocks"], index, tmp_path / "node")
    proc = subprocess.run(
        [str(core), "--network", "regtest", "--open", str(datadir), "--verbose"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode != 0, proc.stdout[-2000:]
    # Connected up to the block before, then read the next block's bytes at the named place.
    assert f"new best={by_height[149][0]} height=149 " in proc.stderr, proc.stderr[-4000:]
    assert " height=150 " not in proc.stderr
    assert "GetHash() doesn't match index" in proc.stderr
    assert f"({other} != {victim})" in proc.stderr, proc.stderr[-4000:]


def test_a_header_mode_export_warns_that_core_connects_nothing_from_it(
    core: Path, with_core: dict[str, Any], tmp_path: Path
) -> None:
    """A header-mode export gives blocks their positions but no nTx (their transactions were
    never checked), a state Core never writes itself (CheckBlockIndex: data iff nTx > 0): Core
    loads it and connects nothing, not even genesis. The export says so; after --check-bodies
    the same chain's export is one Core connects."""
    reindex(with_core["blocks"], tmp_path / "data")
    result = export(tmp_path / "data", tmp_path / "index")
    assert result["valid_transactions"] == 0 and result["with_data"] > 0
    [warning] = result["warnings"]
    assert f"{result['with_data']:,} blocks have data" in warning
    datadir = node_datadir(with_core["blocks"], tmp_path / "index", tmp_path / "node")
    proc = subprocess.run(
        [str(core), "--network", "regtest", "--open", str(datadir)], capture_output=True, text=True
    )
    assert proc.returncode != 0 and "active chain is empty" in proc.stderr, proc.stderr[-2000:]

    reindex(with_core["blocks"], tmp_path / "checked", "--check-bodies")
    checked = export(tmp_path / "checked", tmp_path / "checked-index")
    assert checked["warnings"] == [] and checked["valid_transactions"] == checked["with_data"]
    datadir = node_datadir(with_core["blocks"], tmp_path / "checked-index", tmp_path / "node2")
    out = run_core(core, "regtest", "--open", datadir)
    assert out["tip_hash"] == with_core["core_reindex"]["tip_hash"]


def test_guided_reindex_reads_the_index_core_wrote(
    with_core: dict[str, Any], tmp_path: Path
) -> None:
    """rechain's --core-index on a node's blocks folder as Core left it (its own index, rev
    files beside the blk files): every record Core wrote is used and verified, and the result
    equals the full scan's."""
    node_blocks = with_core["core_datadir"] / "blocks"
    core_index = node_blocks / "index"
    assert sorted(node_blocks.glob("rev*.dat")), "Core wrote undo files"
    own = index_records(core_index)
    before = {p.name: p.read_bytes() for p in core_index.iterdir() if p.is_file()}
    result = reindex(node_blocks, tmp_path / "data", "--mode", "full", "--core-index", core_index)
    ci = result["run"]["core_index"]
    assert ci["fallback"] is None and ci["disagreements"] == []
    assert ci["entries"] == ci["with_data"] == ci["verified"] == len(own)
    assert digest(tmp_path / "data") == digest(with_core["data"])
    assert result["tip_hash"] == with_core["core_reindex"]["tip_hash"]
    # Tip and positions: Core's.
    assert_same_end(with_core["core_reindex"], tmp_path / "data")
    for h, (height, file, data_pos) in rechain_positions(tmp_path / "data").items():
        assert (height, file, data_pos) == (own[h]["height"], own[h]["file"], own[h]["data_pos"])
    # The node's index is read through a private copy: Core's files are untouched.
    assert {p.name: p.read_bytes() for p in core_index.iterdir() if p.is_file()} == before
