"""End-to-end Bitcoin header reindex on generated chains: expected facts, arrival orders,
resume after appends, locking, queries, metrics, and an independent library on the hashes."""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from prometheus_client import REGISTRY
from rechain.pipeline.bitcoin.scan_log import segment_name
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import verify
from rechain.schemas import rocksdb as layout

from tests.conftest import cli, cli_json, gen_chain, reindex

REGTEST_MAGIC = bytes.fromhex("fabfb5da")


def headers(data: Path) -> list[dict[str, Any]]:
    return cli_json(
        "query", "--data", data, "SELECT * FROM headers ORDER BY hash", "--format", "json"
    )


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("chain")
    facts = gen_chain(
        root,
        "--blocks",
        "3000",
        "--side-branches",
        "6",
        "--orphans",
        "4",
        "--tx-per-block",
        "1:5",
        "--file-size",
        "256K",
        "--shuffle-window",
        "64",
        "--seed",
        "7",
    )
    return root, facts


@pytest.fixture(scope="module")
def indexed(chain: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("data")
    reindex(chain[0] / "blocks", data, "--shard-size", "96K")
    return data


def test_status_matches_the_generators_expected_facts(chain: Any, indexed: Path) -> None:
    root, facts = chain
    st = cli_json("btc", "status", "--data", indexed, "--json")
    for key in ("tip_hash", "tip_height", "chainwork", "blocks_indexed", "duplicates"):
        assert st[key] == facts[key], key
    assert sorted(st["orphans"]) == sorted(facts["orphans"])
    assert st["invalid"] == [] and st["skipped"] == []
    assert st["network"] == "regtest"
    best = (root / "best_chain.txt").read_text().split()
    got = cli_json(
        "query",
        "--data",
        indexed,
        "SELECT hash FROM headers WHERE in_best_chain ORDER BY height",
        "--format",
        "json",
    )
    assert [r["hash"] for r in got] == best
    result = verify(indexed)
    assert result["ok"], result["problems"]


def test_block_lookup_by_height_and_hash(chain: Any, indexed: Path) -> None:
    by_height = cli_json("btc", "block", "--data", indexed, "--height", "1234", "--json")
    by_hash = cli_json("btc", "block", "--data", indexed, "--hash", by_height["hash"], "--json")
    assert by_height == by_hash
    assert by_height["height"] == 1234 and by_height["in_best_chain"] is True
    for field in (
        "version",
        "prev_hash",
        "merkle_root",
        "time",
        "bits",
        "nonce",
        "chainwork",
        "file",
        "offset",
        "size",
        "n_tx",
    ):
        assert field in by_height
    code, _, err = cli("btc", "block", "--data", indexed, "--height", "999999")
    assert code == 2 and "no block at height" in err


def test_headers_table_agrees_with_an_independent_library(chain: Any, indexed: Path) -> None:
    """python-bitcoinlib parses every record's 80 header bytes and hashes them itself."""
    from bitcoin.core import CBlockHeader, b2lx

    root, _ = chain
    key = (root / "blocks" / "xor.dat").read_bytes()
    rows = headers(indexed)
    assert len(rows) > 3000
    cache: dict[int, bytes] = {}
    for r in rows:
        raw = cache.setdefault(
            r["file"], (root / "blocks" / f"blk{r['file']:05d}.dat").read_bytes()
        )
        off = r["data_pos"]
        hdr = bytes(b ^ key[(off + i) % 8] for i, b in enumerate(raw[off : off + 80]))
        h = CBlockHeader.deserialize(hdr)
        assert b2lx(h.GetHash()) == r["hash"]
        assert (
            b2lx(h.hashPrevBlock),
            b2lx(h.hashMerkleRoot),
            h.nTime,
            h.nBits,
            h.nNonce,
            h.nVersion,
        ) == (r["prev_hash"], r["merkle_root"], r["time"], r["bits"], r["nonce"], r["version"])


def test_query_formats(indexed: Path) -> None:
    code, out, _ = cli(
        "query", "--data", indexed, "SELECT count(*) AS n FROM headers", "--format", "csv"
    )
    assert code == 0 and out.splitlines()[0] == "n" and int(out.splitlines()[1]) > 3000
    code, out, _ = cli(
        "query",
        "--data",
        indexed,
        "SELECT height, status FROM headers WHERE height < 3 ORDER BY height",
    )
    lines = out.splitlines()
    assert lines[0].split() == ["height", "status"] and lines[-1] == "(3 rows)"
    code, _, err = cli("query", "--data", indexed, "SELECT nope FROM headers")
    assert code == 2 and "query failed" in err
    meta = pq.ParquetFile(next((indexed / "parquet" / "headers").glob("*/*.parquet"))).metadata
    stats = meta.row_group(0).column(2).statistics
    assert stats is not None and stats.has_min_max


@pytest.mark.parametrize("window,seed_shards", [(1, "1M"), (500, "40K"), (3000, "7K")])
def test_arrival_order_and_sharding_do_not_change_the_tree(
    tmp_path: Path, window: int, seed_shards: str
) -> None:
    # Without side branches and orphans the blocks are the same for a seed; only the
    # arrival order (and the file cut) changes with the shuffle window.
    root = tmp_path / "g"
    facts = gen_chain(
        root,
        "--blocks",
        "1500",
        "--shuffle-window",
        str(window),
        "--seed",
        "3",
        "--file-size",
        "64K",
        "--tx-per-block",
        "1:3",
    )
    data = tmp_path / "d"
    reindex(root / "blocks", data, "--shard-size", seed_shards)
    rows = headers(data)
    tree = [
        (r["hash"], r["prev_hash"], r["height"], r["chainwork"], r["in_best_chain"]) for r in rows
    ]
    # Each case against a model built in Python from the files themselves, so a case run
    # alone checks as much as the three together.
    assert tree == tree_model(root / "blocks")
    assert facts["tip_height"] == 1499 and len(tree) == 1500


def tree_model(blocks: Path) -> list[tuple[str, str, int, str, bool]]:
    """The block tree of a folder of regtest blk files, rebuilt with python-bitcoinlib:
    (hash, prev_hash, height, chainwork, in_best_chain) per header, ordered by hash."""
    from bitcoin.core import CBlockHeader, b2lx

    key = (blocks / "xor.dat").read_bytes()
    parent: dict[str, str] = {}
    work: dict[str, int] = {}
    for path in sorted(blocks.glob("blk*.dat")):
        raw = path.read_bytes()
        plain = bytes(b ^ key[i % 8] for i, b in enumerate(raw)) if any(key) else raw
        pos = 0
        while pos + 8 <= len(plain) and plain[pos : pos + 4] == REGTEST_MAGIC:
            size = int.from_bytes(plain[pos + 4 : pos + 8], "little")
            h = CBlockHeader.deserialize(plain[pos + 8 : pos + 88])
            bits = h.nBits
            target = (bits & 0x7FFFFF) << (8 * ((bits >> 24) - 3))
            parent[b2lx(h.GetHash())] = b2lx(h.hashPrevBlock)
            work[b2lx(h.GetHash())] = (1 << 256) // (target + 1)
            pos += 8 + size
    height: dict[str, int] = {}
    chainwork: dict[str, int] = {}

    zero = "00" * 32
    for start in parent:
        h, walk = start, []
        while h not in height:
            if parent[h] == zero:  # genesis
                height[h], chainwork[h] = 0, work[h]
                break
            walk.append(h)
            h = parent[h]
        for c in reversed(walk):
            height[c] = height[parent[c]] + 1
            chainwork[c] = chainwork[parent[c]] + work[c]
    tip = max(chainwork, key=lambda h: chainwork[h])
    best = {tip}
    while parent[tip] != zero:
        tip = parent[tip]
        best.add(tip)
    return [(h, parent[h], height[h], f"{chainwork[h]:064x}", h in best) for h in sorted(parent)]


def test_append_then_rerun_reads_only_new_bytes(chain: Any, tmp_path: Path) -> None:
    root, facts = chain
    full = root / "blocks"
    files = sorted(full.glob("blk*.dat"))
    partial = tmp_path / "blocks"
    partial.mkdir()
    shutil.copy(full / "xor.dat", partial / "xor.dat")
    # The node's state earlier on: fewer files, the last one cut at a record boundary and
    # followed by its zero-filled preallocation, as Core leaves the file it is writing.
    for f in files[:-3]:
        shutil.copy(f, partial / f.name)
    last = files[-3]
    data_full = tmp_path / "full"
    reindex(full, data_full)
    offsets = [
        r["offset"]
        for r in cli_json(
            "query",
            "--data",
            data_full,
            f'SELECT "offset" FROM headers WHERE file = {len(files) - 3} ORDER BY "offset"',
            "--format",
            "json",
        )
    ]
    cut = offsets[len(offsets) // 2]
    raw = last.read_bytes()
    (partial / last.name).write_bytes(raw[:cut] + bytes(len(raw) - cut))
    data = tmp_path / "inc"
    first = reindex(partial, data)
    assert first["tip_height"] < facts["tip_height"]
    # The node writes into the preallocated tail and starts new files.
    for f in files[-3:]:
        shutil.copy(f, partial / f.name)
    second = reindex(partial, data)
    run = second["run"]
    assert run["bytes_planned"] < run["file_bytes"] / 2
    assert run["records_scanned"] < facts["records"] / 2
    for key in ("tip_hash", "tip_height", "chainwork", "blocks_indexed"):
        assert second[key] == facts[key]
    with DataDir(data, readonly=True) as a, DataDir(data_full, readonly=True) as b:
        from rechain.pipeline.verify import digest

        assert digest(a) == digest(b)
    # Nothing new: only the last file's last record and its preallocated zero tail are looked
    # at again (the node may still be writing that record, or write after it next); that
    # record comes out as before, so the tree is not relinked.
    named, present = scan_files_named_and_present(data)
    assert named == present
    third = reindex(partial, data)
    assert third["run"]["records_scanned"] == 1
    assert third["run"]["bytes_planned"] <= 65536 + 4_000_000
    assert third["run"]["bytes_read"] <= 65536 + 4_000_000
    assert "link_s" not in third["run"]


def scan_files_named_and_present(data: Path) -> tuple[set[str], set[str]]:
    with DataDir(data, readonly=True) as d:
        named = {segment_name(v) for _, v in d.items(layout.CF_BTC_SCAN)}
    return named, {p.name for p in (data / layout.SCAN_SEGMENT_DIR).iterdir()}


def test_scan_log_files_are_exactly_those_the_index_names(chain: Any, tmp_path: Path) -> None:
    """Segments replaced by later shards are deleted; files a killed run wrote but never
    committed (a finished one and a temp one) are removed by the next run."""
    data = tmp_path / "data"
    first = reindex(chain[0] / "blocks", data, "--shard-size", "40K")
    named, present = scan_files_named_and_present(data)
    assert named and named == present
    scan = data / layout.SCAN_SEGMENT_DIR
    (scan / "0000000000000000000000000072-5.arrow").write_bytes(b"uncommitted")
    (scan / ".0000000000000000000000000072-5.arrow.tmp").write_bytes(b"half written")
    second = reindex(chain[0] / "blocks", data)
    # Only the last record before the last file's preallocated tail is read again.
    assert second["run"]["records_scanned"] == 1
    assert scan_files_named_and_present(data) == (named, named)
    assert {k: v for k, v in second.items() if k != "run"} == {
        k: v for k, v in first.items() if k != "run"
    }


def test_second_run_on_the_same_data_folder_is_refused(chain: Any, tmp_path: Path) -> None:
    with DataDir(tmp_path / "d"):
        code, _, err = cli(
            "btc",
            "reindex",
            "--blocks",
            chain[0] / "blocks",
            "--data",
            tmp_path / "d",
            "--network",
            "regtest",
            "--no-progress",
        )
    assert code == 2 and "in use by another rechain run" in err


def test_metrics_are_counted_and_served(chain: Any, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    before = REGISTRY.get_sample_value("rechain_stage_records_total", {"stage": "btc_headers"}) or 0
    reindex(chain[0] / "blocks", tmp_path / "d", "--metrics-port", str(port))
    after = REGISTRY.get_sample_value("rechain_stage_records_total", {"stage": "btc_headers"})
    assert after is not None and after - before == chain[1]["records"]
    assert (
        REGISTRY.get_sample_value("rechain_stage_bytes_read_total", {"stage": "btc_headers"}) or 0
    ) > 0
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'rechain_stage_records_total{stage="btc_headers"}' in body
    assert "rechain_commit_seconds_bucket" in body


def test_non_regtest_generated_chain_is_invalid_beyond_genesis(tmp_path: Path) -> None:
    facts = gen_chain(tmp_path / "g", "--blocks", "20", "--network", "testnet")
    st = cli_json(
        "btc",
        "reindex",
        "--blocks",
        tmp_path / "g" / "blocks",
        "--data",
        tmp_path / "d",
        "--network",
        "testnet",
        "--no-progress",
        "--json",
    )
    assert st["tip_height"] == 0 and st["tip_hash"] == facts["tip_hash"]
    assert len(st["invalid"]) == facts["invalid_count"] == 19
    # nBits above testnet's limit: Core's CheckBlockHeader says "high-hash".
    assert {i["reason"] for i in st["invalid"]} <= {"high-hash", "bad-prevblk"}


def test_a_replaced_file_is_noticed_and_rescanned(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    gen_chain(a, "--blocks", "400", "--seed", "5", "--file-size", "32K")
    gen_chain(b, "--blocks", "300", "--seed", "6", "--file-size", "32K")
    blocks = tmp_path / "blocks"
    shutil.copytree(a / "blocks", blocks)
    data = tmp_path / "d"
    reindex(blocks, data)
    # Another, shorter chain's files (and key) now sit under the same names and one file is
    # gone: nothing of the old index may survive; the result equals a fresh reindex.
    shutil.rmtree(blocks)
    shutil.copytree(b / "blocks", blocks)
    again = reindex(blocks, data)
    fresh = reindex(b / "blocks", tmp_path / "fresh")
    for key in ("tip_hash", "tip_height", "blocks_indexed", "records", "orphans"):
        assert again[key] == fresh[key]
    with DataDir(data, readonly=True) as x, DataDir(tmp_path / "fresh", readonly=True) as y:
        from rechain.pipeline.verify import digest

        dx, dy = digest(x), digest(y)
    assert dx["btc_index"] == dy["btc_index"] and dx["parquet/headers"] == dy["parquet/headers"]


def test_a_chain_past_one_row_group_publishes_two_parts(tmp_path: Path) -> None:
    """Above one Parquet row group the headers table is written as two parts on two threads,
    and the best chain spans many RocksDB buckets: both must still agree with the generator."""
    facts = gen_chain(tmp_path, "--blocks", "140000", "--tx-per-block", "1:1", "--seed", "3")
    data = tmp_path / "data"
    st = reindex(tmp_path / "blocks", data)
    for key in ("tip_hash", "tip_height", "chainwork", "blocks_indexed"):
        assert st[key] == facts[key], key
    parts = sorted((data / "parquet" / "headers").glob("*/part-*.parquet"))
    assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet"]
    rows = [pq.ParquetFile(p).metadata.num_rows for p in parts]
    assert rows[0] == 131_072 and sum(rows) == facts["blocks_indexed"] + len(facts["orphans"])
    best = (tmp_path / "best_chain.txt").read_text().split()
    for height in (0, 1023, 1024, 131_071, 131_072, len(best) - 1):
        got = cli_json("btc", "block", "--data", data, "--height", str(height), "--json")
        assert got["hash"] == best[height] and got["height"] == height
    code, _, err = cli("btc", "block", "--data", data, "--height", str(len(best)))
    assert code == 2 and "no block at height" in err
    result = verify(data)
    assert result["ok"], result["problems"]
