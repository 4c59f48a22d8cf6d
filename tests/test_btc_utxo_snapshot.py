"""UTXO snapshots (``btc dump-utxo``, ``btc check-utxo``) and the set's MuHash, with Bitcoin
Core as the oracle (tests/bitcoin_core):

* at the tip and at past heights, Core's chainstate after importing the best chain's blocks up
  to that height (``-loadblock``) has the coin count, amount, ``hash_serialized_3`` and MuHash
  rechain reports for the height, on a generated chain and on the real mainnet blocks;
* every snapshot rechain writes is read back by Core's own deserializer (the harness's
  ``--read-snapshot``, which reads as ``loadtxoutset`` does) to the same coins and digests;
* ``chain_tx_count`` equals the transactions python-bitcoinlib counts in the blocks;
* damaged snapshots are errors with a byte offset, in rechain and in Core alike.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from bitcoin.core import CBlock
from rechain.schemas import tables

from tests.conftest import cli, cli_json, gen_chain, reindex
from tests.test_btc_core_oracle import REAL_BLK, core_oracle, run_core
from tests.test_btc_full import read_records

REGTEST_MAGIC = bytes.fromhex("fabfb5da")
MAINNET_MAGIC = bytes.fromhex("f9beb4d9")
COMMITMENTS = ("coins", "total_amount", "hash_serialized_3", "muhash")


@pytest.fixture(scope="module")
def core() -> Path:
    return core_oracle()


def plain_blk(blocks: list[bytes], magic: bytes) -> bytes:
    """A plain (un-obfuscated) blk file of ``blocks`` in order, as ``-loadblock`` reads it."""
    return b"".join(magic + struct.pack("<I", len(b)) + b for b in blocks)


def core_at(core: Path, network: str, blocks: list[bytes], magic: bytes, tmp: Path) -> dict:
    """Core's chainstate after importing ``blocks`` (heights 1 on, in order) onto genesis."""
    path = tmp / f"upto-{len(blocks)}.blk"
    path.write_bytes(plain_blk(blocks, magic))
    out = run_core(core, network, "--loadblock", path, "--muhash")
    assert out["invalid_blocks"] == [], out["log_errors"]
    assert out["tip_height"] == len(blocks)
    return out


def core_reads(core: Path, network: str, snapshot: Path) -> dict[str, Any]:
    return run_core(core, network, "--read-snapshot", snapshot)


def dump(data: Path, out: Path | None, *extra: object) -> dict[str, Any]:
    args: list[object] = ["btc", "dump-utxo", "--data", data, "--json", *extra]
    if out is not None:
        args += ["--out", out]
    res: dict[str, Any] = cli_json(*args)
    return res


def assert_core_agrees(ours: dict, core_out: dict, read: dict) -> None:
    """Our figures at a height equal Core's chainstate there and Core's reading of our file."""
    assert ours["block_hash"] == core_out["tip_hash"] == read["base_hash"]
    assert ours["coins"] == core_out["utxo_count"] == read["coins_count"] == read["coins_read"]
    assert ours["total_amount"] == core_out["total_amount"] == read["total_amount"]
    assert ours["hash_serialized_3"] == core_out["hash_serialized_3"] == read["hash_serialized_3"]
    assert ours["muhash"] == core_out["muhash"] == read["muhash"]
    assert read["error"] is None


def tx_count(blocks_by_hash: dict[str, bytes], best: list[str], height: int) -> int:
    """Transactions from genesis (one) to ``height``, counted by python-bitcoinlib."""
    return 1 + sum(len(CBlock.deserialize(blocks_by_hash[h]).vtx) for h in best[1 : height + 1])


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("utxo_snapshot")
    expected = gen_chain(
        root / "node",
        "--blocks", "260", "--side-branches", "3", "--reorg", "3", "--tx-per-block", "1:10",
        "--script-kinds", "all", "--seed", "29",
    )  # fmt: skip
    blocks = root / "node" / "blocks"
    reindex(blocks, root / "data", "--mode", "full")
    best = (root / "node" / "best_chain.txt").read_text().split()
    by_hash = {CBlock.deserialize(r).GetHash()[::-1].hex(): r for r in read_records(blocks)}
    return {"root": root, "blocks": blocks, "data": root / "data", "best": best,
            "by_hash": by_hash, "expected": expected}  # fmt: skip


def test_status_muhash_and_a_tip_snapshot_equal_cores(core: Path, chain: dict[str, Any]) -> None:
    data, root = chain["data"], chain["root"]
    core_out = run_core(core, "regtest", "--blocks", chain["blocks"], "--muhash")
    st = cli_json("btc", "status", "--data", data, "--json")
    assert st["muhash"] == core_out["muhash"]
    assert st["hash_serialized_3"] == core_out["hash_serialized_3"]
    snap = root / "tip.utxo"
    ours = dump(data, snap)
    assert ours["height"] == st["tip_height"] == core_out["tip_height"]
    assert ours["blocks_rewound"] == 0
    assert_core_agrees(ours, core_out, core_reads(core, "regtest", snap))
    assert ours["chain_tx_count"] == tx_count(chain["by_hash"], chain["best"], ours["height"])
    checked = cli_json("btc", "check-utxo", snap, "--data", data, "--json")
    assert checked["matches"] is True and checked["mismatch"] == []
    assert {k: checked[k] for k in COMMITMENTS} == {k: ours[k] for k in COMMITMENTS}
    assert checked["height"] == ours["height"]
    assert checked["network_magic"] == REGTEST_MAGIC.hex()


@pytest.mark.parametrize("below_tip", [1, 40, 155, 259])
def test_past_heights_equal_cores_chainstate_there(
    core: Path, chain: dict[str, Any], below_tip: int
) -> None:
    data, root, best = chain["data"], chain["root"], chain["best"]
    height = len(best) - 1 - below_tip
    snap = root / f"at-{height}.utxo"
    # A small budget at the deepest height: the rewind spills and ends the same.
    budget = ["--memory-budget", "64K"] if below_tip == 155 else []
    ours = dump(data, snap, "--height", height, *budget)
    assert ours["height"] == height and ours["blocks_rewound"] == below_tip
    if budget:
        assert ours["spilled_runs"] > 1
        again = dump(data, None, "--height", height)
        assert again["spilled_runs"] == 0
        assert {k: again[k] for k in COMMITMENTS} == {k: ours[k] for k in COMMITMENTS}
    blocks = [chain["by_hash"][h] for h in best[1 : height + 1]]
    core_out = core_at(core, "regtest", blocks, REGTEST_MAGIC, root)
    assert_core_agrees(ours, core_out, core_reads(core, "regtest", snap))
    assert ours["chain_tx_count"] == tx_count(chain["by_hash"], best, height)
    # The data folder is untouched: the tip's set is as before.
    st = cli_json("btc", "status", "--data", data, "--json")
    assert st["tip_height"] == len(best) - 1
    assert not any((data / "tmp").glob("utxo-rewind-*"))


def test_real_mainnet_blocks_at_the_tip_and_below(core: Path, tmp_path: Path) -> None:
    raw = (REAL_BLK / "mainnet-blocks-1-255.blk").read_bytes()
    records, pos = [], 0
    while pos + 8 <= len(raw):
        assert raw[pos : pos + 4] == MAINNET_MAGIC
        size = struct.unpack_from("<I", raw, pos + 4)[0]
        records.append(raw[pos + 8 : pos + 8 + size])
        pos += 8 + size
    assert len(records) == 255
    datadir = tmp_path / "core"
    tip_core = run_core(core, "main", "--loadblock", REAL_BLK / "mainnet-blocks-1-255.blk",
                        "--datadir", datadir, "--muhash")  # fmt: skip
    reindex(datadir / "blocks", tmp_path / "data", "--network", "main", "--mode", "full")
    data = tmp_path / "data"
    by_hash = {CBlock.deserialize(r).GetHash()[::-1].hex(): r for r in records}
    best = ["genesis"] + [CBlock.deserialize(r).GetHash()[::-1].hex() for r in records]
    for height in (255, 170, 9):
        snap = tmp_path / f"main-{height}.utxo"
        ours = dump(data, snap, "--height", height)
        core_out = (
            tip_core
            if height == 255
            else core_at(core, "main", records[:height], MAINNET_MAGIC, tmp_path)
        )
        assert_core_agrees(ours, core_out, core_reads(core, "main", snap))
        assert ours["chain_tx_count"] == tx_count(by_hash, best, height)
    # Block 170: its coinbase, and a payment from block 9's coinbase to two outputs.
    at_170 = dump(data, None, "--height", 170)["coins"]
    assert at_170 == dump(data, None, "--height", 169)["coins"] + 2


def test_damaged_snapshots_are_errors_with_offsets(
    core: Path, chain: dict[str, Any], tmp_path: Path
) -> None:
    data = chain["data"]
    good = tmp_path / "good.utxo"
    ours = dump(data, good, "--height", 120)
    raw = good.read_bytes()
    cases = {
        "truncated in the metadata": raw[:30],
        "truncated in a txid": raw[:60],
        "truncated in the last coin": raw[:-1],
        "bad magic": b"utxq" + raw[4:],
        "bad version": raw[:5] + b"\x03\x00" + raw[7:],
        "a byte too many": raw + b"\x00",
        "one coin more than it holds": raw[:43] + struct.pack("<Q", ours["coins"] + 1) + raw[51:],
    }
    for name, damaged in cases.items():
        path = tmp_path / "damaged.utxo"
        path.write_bytes(damaged)
        code, out, err = cli("btc", "check-utxo", path)
        assert code == 2, (name, out, err)
        assert "at byte" in err and str(path) in err, (name, err)
        assert core_reads(core, "regtest", path)["error"], name
    # A sound file of another block: read fine, and unequal to the data folder's set there.
    moved = tmp_path / "moved.utxo"
    tip_hash = bytes.fromhex(chain["best"][-1])[::-1]
    moved.write_bytes(raw[:11] + tip_hash + raw[43:])
    code, out, _ = cli("btc", "check-utxo", moved, "--data", data, "--json")
    assert code == 1
    checked = json.loads(out)
    assert checked["matches"] is False
    assert any(m.startswith("coins:") for m in checked["mismatch"])
    assert any(m.startswith("muhash:") for m in checked["mismatch"])
    # Heights off the applied chain are refused.
    code, _, err = cli("btc", "dump-utxo", "--data", data, "--height", len(chain["best"]))
    assert code == 2 and "not on the applied chain" in err


def test_the_utxo_table_is_the_set_the_published_tables_imply(
    chain: dict[str, Any], tmp_path: Path
) -> None:
    """``--format parquet`` at a past height: the declared schema, the same figures as the
    Core-format dump, and exactly the best-chain outputs at or below the height that no input
    at or below it spends (DuckDB over the published ``outputs`` and ``inputs``), coinbase
    flags from the ``transactions`` table. A small budget cuts it into several files."""
    data = chain["data"]
    height = len(chain["best"]) - 1 - 70
    out = tmp_path / "utxo"
    res = dump(data, out, "--height", height, "--format", "parquet", "--memory-budget", "32K")
    core = dump(data, None, "--height", height)
    assert {k: res[k] for k in COMMITMENTS} == {k: core[k] for k in COMMITMENTS}
    files = sorted(out.glob("part-*.parquet"))
    assert len(files) == res["parquet_files"] > 1
    declared = [(f.name, f.type) for f in tables.UTXO.schema]
    for f in files:
        assert [(c.name, c.type) for c in pq.read_schema(f)] == declared
    rows = cli_json(
        "query", "--data", data, "--format", "json",
        f"SELECT count(*) AS n, sum(value) AS v, count(DISTINCT txid) AS t "
        f"FROM read_parquet('{out}/*.parquet')",
    )  # fmt: skip
    assert rows == [{"n": res["coins"], "v": res["total_amount"], "t": rows[0]["t"]}]
    implied = f"""
        SELECT o.txid, o.vout, o.value, o.height, t.position = 0 AS coinbase, o.script_pubkey,
               o.script_type, o.address
        FROM outputs o JOIN transactions t ON t.txid = o.txid AND t.in_best_chain
        WHERE o.in_best_chain AND o.height BETWEEN 1 AND {height}
          AND o.script_type <> 'op_return' AND length(o.script_pubkey) <= 20000
          AND NOT EXISTS (
            SELECT 1 FROM inputs i WHERE i.in_best_chain AND i.height <= {height}
              AND i.prev_txid = o.txid AND i.prev_vout = o.vout)
    """
    diff = cli_json(
        "query", "--data", data, "--format", "json",
        f"SELECT count(*) AS n FROM (({implied}) EXCEPT ALL "
        f"(SELECT * FROM read_parquet('{out}/*.parquet'))) "
        f"UNION ALL SELECT count(*) FROM ((SELECT * FROM read_parquet('{out}/*.parquet')) "
        f"EXCEPT ALL ({implied}))",
    )  # fmt: skip
    assert diff == [{"n": 0}, {"n": 0}]
    # Key order: txids ascend in internal byte order (display order reversed).
    txids = [t for f in files for t in pq.read_table(f, columns=["txid"])["txid"].to_pylist()]
    keys = [bytes.fromhex(t)[::-1] for t in txids]
    assert keys == sorted(keys)


@pytest.mark.parametrize("execution", ["threads", "ray"])
def test_a_dump_split_into_txid_ranges_is_the_same_file(
    chain: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, execution: str
) -> None:
    """``--workers N``: the set cut into txid ranges run as parallel tasks (threads, or Ray
    tasks), put together in key order: the Core-format file is byte for byte the one task's,
    with the same figures, at the tip and below it (the rewind spilling in every range), and
    the Parquet table holds the same rows, its files in key order."""
    monkeypatch.setenv("RECHAIN_EXECUTION", execution)
    data = chain["data"]
    for height in (len(chain["best"]) - 1, 130):
        one = dump(data, tmp_path / f"one-{height}.utxo", "--height", height)
        split = dump(
            data, tmp_path / f"split-{height}.utxo", "--height", height, "--workers", 3,
            "--memory-budget", "16K",
        )  # fmt: skip
        assert split["parts"] >= 3 and split["execution"] == execution
        assert (tmp_path / f"split-{height}.utxo").read_bytes() == (
            tmp_path / f"one-{height}.utxo"
        ).read_bytes()
        keys = (*COMMITMENTS, "chain_tx_count", "block_hash", "blocks_rewound")
        assert {k: split[k] for k in keys} == {k: one[k] for k in keys}
        if height == 130:
            assert split["spilled_runs"] >= split["parts"]
    table = tmp_path / "split-table"
    res = dump(data, table, "--format", "parquet", "--workers", 3, "--height", 130)
    whole = dump(data, tmp_path / "whole-table", "--format", "parquet", "--height", 130)
    assert {k: res[k] for k in COMMITMENTS} == {k: whole[k] for k in COMMITMENTS}
    files = sorted(table.glob("part-*.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    want = [r for f in sorted((tmp_path / "whole-table").glob("*.parquet"))
            for r in pq.read_table(f).to_pylist()]  # fmt: skip
    assert rows == want and len(rows) == res["coins"]
