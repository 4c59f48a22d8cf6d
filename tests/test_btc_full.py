"""``--mode full``: every transaction decoded, checked and published; the UTXO set and fees.

Oracles: the generator's own wallet (final UTXO set), python-bitcoinlib (an independent decoder)
for every txid, wtxid, output value and script, and facts.json for the real mainnet block.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
from bitcoin.core import CBlock, b2lx
from rechain.pipeline.bitcoin import body_parts
from rechain.pipeline.query import run_query
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

from tests.conftest import BTC_DATA, cli, cli_json, gen_chain, reindex

REGTEST_MAGIC = bytes.fromhex("fabfb5da")


def full(blocks: Path, data: Path, *extra: str) -> dict[str, Any]:
    return reindex(blocks, data, "--mode", "full", *extra)


def q(data: Path, sql: str) -> list[tuple[Any, ...]]:
    return run_query(data, sql)[1]


def read_records(blocks: Path) -> list[bytes]:
    """Every block record of a generated folder, de-obfuscated (python, independent of Rust)."""
    key = (blocks / "xor.dat").read_bytes()
    out = []
    for path in sorted(blocks.glob("blk*.dat")):
        raw = path.read_bytes()
        plain = bytes(b ^ key[i % 8] for i, b in enumerate(raw)) if any(key) else raw
        pos = 0
        while pos + 8 <= len(plain) and plain[pos : pos + 4] == REGTEST_MAGIC:
            size = struct.unpack_from("<I", plain, pos + 4)[0]
            out.append(plain[pos + 8 : pos + 8 + size])
            pos += 8 + size
    return out


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict]:
    root = tmp_path_factory.mktemp("full")
    expected = gen_chain(
        root / "node",
        "--blocks",
        "700",
        "--side-branches",
        "4",
        "--orphans",
        "2",
        "--tx-per-block",
        "1:7",
        "--file-size",
        "300000",
        "--seed",
        "5",
    )
    result = full(root / "node" / "blocks", root / "data")
    return root, expected, result


def test_utxo_set_matches_the_generator(chain: tuple[Path, dict, dict]) -> None:
    root, expected, result = chain
    assert result["tip_hash"] == expected["tip_hash"]
    assert result["full"]["utxo_count"] == expected["utxo_count"]
    assert result["full"]["total_amount"] == expected["total_amount"]
    assert result["full"]["invalid_blocks"] == []
    status = cli_json("btc", "status", "--data", root / "data", "--json")
    assert status["utxo_count"] == expected["utxo_count"]
    assert status["total_amount"] == expected["total_amount"]
    assert len(status["hash_serialized_3"]) == 64
    # The RocksDB UTXO set holds exactly the unspent best-chain outputs of the tables.
    unspent = q(
        root / "data",
        "SELECT count(*), sum(value) FROM outputs WHERE in_best_chain AND NOT spent "
        "AND script_type <> 'op_return' AND height > 0",
    )
    assert unspent == [(expected["utxo_count"], expected["total_amount"])]


def test_every_transaction_matches_python_bitcoinlib(chain: tuple[Path, dict, dict]) -> None:
    root, expected, _ = chain
    records = read_records(root / "node" / "blocks")
    assert len(records) == expected["records"]
    txs, outs = {}, {}
    for raw in records:
        block = CBlock.deserialize(raw)
        for pos, tx in enumerate(block.vtx):
            txs[(b2lx(block.GetHash()), pos)] = (b2lx(tx.GetTxid()), b2lx(tx.GetHash()))
            for n, o in enumerate(tx.vout):
                outs[(b2lx(tx.GetTxid()), n)] = (o.nValue, bytes(o.scriptPubKey).hex())
    ours_tx = {
        (b, p): (t, w)
        for t, w, b, p in q(
            root / "data", "SELECT txid, wtxid, block_hash, position FROM transactions"
        )
    }
    assert ours_tx == txs
    ours_out = {
        (t, n): (v, s)
        for t, n, v, s in q(root / "data", "SELECT txid, vout, value, script_pubkey FROM outputs")
    }
    assert ours_out == outs
    # Several script types and address encodings occur, and segwit spends too.
    kinds = dict(q(root / "data", "SELECT script_type, count(*) FROM outputs GROUP BY 1"))
    assert {"p2wpkh", "p2pkh", "p2sh", "p2tr", "p2wsh", "multisig", "op_return", "p2pk"} <= set(
        kinds
    )
    assert q(root / "data", "SELECT count(*) FROM inputs WHERE witness_items > 0")[0][0] > 0
    addr = dict(q(root / "data", "SELECT script_type, min(address) FROM outputs GROUP BY 1"))
    assert addr["p2wpkh"].startswith("bcrt1q") and addr["p2tr"].startswith("bcrt1p")
    assert addr["p2pkh"][0] in "mn" and addr["p2sh"].startswith("2")


def test_fees_and_best_chain_flags(chain: tuple[Path, dict, dict]) -> None:
    root, expected, _ = chain
    data = root / "data"
    # Coinbases pay subsidy + fees, so the fees rechain resolved add up to what they claim.
    rows = q(
        data,
        """SELECT b.height, cb.output_value, b.fees FROM blocks b
           JOIN transactions cb ON cb.block_hash = b.hash AND cb.position = 0
           WHERE b.in_best_chain AND b.height > 0""",
    )
    assert len(rows) == 699
    for height, paid, fees in rows:
        assert paid == (5_000_000_000 >> (height // 150)) + (fees or 0)
    assert q(
        data,
        "SELECT count(*) FROM transactions WHERE in_best_chain AND NOT is_coinbase "
        "AND (fee IS NULL OR fee < 0)",
    ) == [(0,)]
    side = q(data, "SELECT count(*) FROM blocks WHERE NOT in_best_chain AND height IS NOT NULL")
    assert side[0][0] == expected["side_branch_blocks"]
    # Orphans (not connected to genesis) are decoded too, in the height_range=-1 partition.
    orphans = q(data, "SELECT hash FROM blocks WHERE height IS NULL ORDER BY hash")
    assert sorted(h for (h,) in orphans) == sorted(expected["orphans"])
    assert q(data, "SELECT DISTINCT height_range FROM blocks WHERE height IS NULL") == [(-1,)]


def chain_model(records: list[bytes]) -> dict[str, Any]:
    """The best chain's spends, fees and UTXO set, computed with python-bitcoinlib from the
    records alone (most work wins; a tie fails the test rather than guess Core's order)."""
    blocks = {}
    for raw in records:
        block = CBlock.deserialize(raw)
        blocks.setdefault(b2lx(block.GetHash()), block)
    zero, work, chainwork = "00" * 32, {}, {}
    for h, block in blocks.items():
        bits = block.nBits
        work[h] = (1 << 256) // (((bits & 0x7FFFFF) << (8 * ((bits >> 24) - 3))) + 1)
    for start in blocks:
        h, walk = start, []
        while h not in chainwork:
            prev = b2lx(blocks[h].hashPrevBlock)
            if prev == zero:
                chainwork[h] = work[h]
            elif prev not in blocks:  # an orphan: never connected
                walk = []
                break
            else:
                walk.append(h)
                h = prev
        for c in reversed(walk):
            chainwork[c] = chainwork[b2lx(blocks[c].hashPrevBlock)] + work[c]
    most = max(chainwork.values())
    [tip] = [h for h, w in chainwork.items() if w == most]
    best = [tip]
    while b2lx(blocks[best[-1]].hashPrevBlock) != zero:
        best.append(b2lx(blocks[best[-1]].hashPrevBlock))
    best.reverse()
    utxo: dict[tuple[str, int], int] = {}
    spent: set[tuple[str, int]] = set()
    fees: dict[str, int] = {}
    for h in best[1:]:  # the genesis output is not spendable, as in Core
        for tx in blocks[h].vtx:
            txid = b2lx(tx.GetTxid())
            if not tx.is_coinbase():
                prevouts = [(b2lx(i.prevout.hash), i.prevout.n) for i in tx.vin]
                fees[txid] = sum(utxo.pop(o) for o in prevouts) - sum(o.nValue for o in tx.vout)
                spent.update(prevouts)
            for n, out in enumerate(tx.vout):
                if not bytes(out.scriptPubKey).startswith(b"\x6a"):  # OP_RETURN: unspendable
                    utxo[(txid, n)] = out.nValue
    return {
        "tip": tip,
        "utxo_count": len(utxo),
        "total_amount": sum(utxo.values()),
        "spent": spent,
        "fees": fees,
    }


def state_facts(data: Path) -> dict[str, Any]:
    """What the model computes, as rechain's tables give it."""
    [(tip,)] = q(data, "SELECT hash FROM blocks WHERE in_best_chain ORDER BY height DESC LIMIT 1")
    [(count, amount)] = q(
        data,
        "SELECT count(*), sum(value) FROM outputs WHERE in_best_chain AND NOT spent "
        "AND script_type <> 'op_return' AND height > 0",
    )
    spent = q(data, "SELECT txid, vout FROM outputs WHERE in_best_chain AND spent")
    fees = q(data, "SELECT txid, fee FROM transactions WHERE in_best_chain AND NOT is_coinbase")
    return {
        "tip": tip,
        "utxo_count": count,
        "total_amount": amount,
        "spent": set(spent),
        "fees": dict(fees),
    }


def test_rerun_is_identical(chain: tuple[Path, dict, dict], tmp_path: Path) -> None:
    """A fresh run into another folder and a rerun over a copy of the first give the same
    rows (the content digest) and the spends, fees and UTXO set of an independent model."""
    from rechain.pipeline.verify import digest

    root, _, result = chain
    blocks = root / "node" / "blocks"
    model = chain_model(read_records(blocks))
    assert model["spent"] and model["fees"]
    fresh = full(blocks, tmp_path / "fresh")
    shutil.copytree(root / "data", tmp_path / "copy")
    rerun = full(blocks, tmp_path / "copy")
    assert fresh["full"] == rerun["full"] == result["full"]
    digests = []
    for data in (root / "data", tmp_path / "fresh", tmp_path / "copy"):
        assert state_facts(data) == model, data.name
        with DataDir(data, readonly=True) as d:
            digests.append(digest(d))
    assert digests[0] == digests[1] == digests[2]
    assert result["tip_hash"] == model["tip"]
    assert result["full"]["utxo_count"] == model["utxo_count"]
    assert result["full"]["total_amount"] == model["total_amount"]


def test_workers_without_the_data_folder_return_the_same_staged_tables(
    chain: tuple[Path, dict, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers on other machines (a cluster given by address) cannot write into the data
    folder and hand back their staged files' bytes instead: same result, same digest."""
    from rechain.pipeline.bitcoin import body_units

    root, _, result = chain
    decode = body_units.decode_units
    calls: list[bool] = []

    def remote_workers(*args: Any, **kwargs: Any) -> dict[str, float]:
        calls.append(True)
        return decode(*args[:5], False, *args[6:])

    monkeypatch.setattr(body_units, "decode_units", remote_workers)
    again = full(root / "node" / "blocks", tmp_path / "d")
    assert calls and again["full"] == result["full"]
    digests = [
        cli_json("verify", "--data", d, "--json")["digest"] for d in (root / "data", tmp_path / "d")
    ]
    assert digests[0] == digests[1]


@pytest.mark.parametrize("workers", [1, 3])
def test_workers_bound_the_chain_states_row_writers(
    chain: tuple[Path, dict, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """``--workers`` bounds the threads writing the chain state's rows: one worker writes each
    chunk's rows on the thread that applies it (one core, as a one-CPU Ray task), more share
    ``workers`` threads off that thread. Same tables, same set, same digest."""
    from rechain.pipeline.bitcoin import chain_parts
    from rechain.pipeline.bitcoin.stages import chain_state

    root, _, result = chain
    write = chain_state.write_part
    seen: list[tuple[threading.Thread, int]] = []

    def recording(*args: Any) -> None:
        seen.append((threading.current_thread(), args[-1]))
        write(*args)

    monkeypatch.setattr(chain_state, "write_part", recording)
    again = full(root / "node" / "blocks", tmp_path / "d", "--workers", str(workers))
    assert again["full"] == result["full"]
    digests = [
        cli_json("verify", "--data", d, "--json")["digest"] for d in (root / "data", tmp_path / "d")
    ]
    assert digests[0] == digests[1]
    assert seen
    writers = {thread for thread, _ in seen}
    if workers == 1:
        assert writers == {threading.main_thread()} and {n for _, n in seen} == {1}
    else:
        assert threading.main_thread() not in writers
        assert len(writers) <= chain_parts.ROWS_IN_FLIGHT
        assert all(len(writers) * n <= workers for _, n in seen)


def test_real_mainnet_block_decodes_to_its_facts(tmp_path: Path) -> None:
    fact = json.loads((BTC_DATA / "facts.json").read_text())[0]
    raw = (BTC_DATA / fact["file"]).read_bytes()
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    magic = _native.network_info("main").magic
    (blocks / "blk00000.dat").write_bytes(magic + struct.pack("<I", len(raw)) + raw)
    result = reindex(blocks, tmp_path / "data", "--network", "main", "--mode", "full")
    assert result["tip_hash"] is None  # not connected to genesis, but decoded anyway
    data = tmp_path / "data"
    (row,) = q(
        data,
        "SELECT hash, n_tx, size, valid, n_inputs, n_outputs, output_value, "
        "height_range FROM blocks",
    )
    assert row == (
        fact["hash"],
        fact["tx_count"],
        fact["size"],
        True,
        fact["n_inputs"],
        fact["n_outputs"],
        fact["total_output_value_sat"],
        -1,
    )
    assert q(data, "SELECT count(*) FROM transactions WHERE has_witness") == [(fact["segwit_txs"],)]
    first_last = q(
        data, "SELECT txid FROM transactions WHERE position IN (0, 2499) ORDER BY position"
    )
    assert [t for (t,) in first_last] == [fact["first_txid"], fact["last_txid"]]


def record_offsets(path: Path, key: bytes) -> list[int]:
    """Magic offsets of a blk file's records (python, independent of Rust)."""
    raw = path.read_bytes()
    plain = bytes(b ^ key[i % 8] for i, b in enumerate(raw)) if any(key) else raw
    offsets, pos = [], 0
    while pos + 8 <= len(plain) and plain[pos : pos + 4] == REGTEST_MAGIC:
        offsets.append(pos)
        pos += 8 + struct.unpack_from("<I", plain, pos + 4)[0]
    return offsets


def test_the_body_pass_stages_the_full_decoders_verdicts_and_txids_only(
    chain: tuple[Path, dict, dict], tmp_path: Path
) -> None:
    """The body pass checks every copy as the full decoder does and stages its verdict row
    and its transactions' txids, nothing else: the later stages write the other rows (the
    off-chain ones from blocks decoded again)."""
    root, expected, _ = chain
    blocks = root / "node" / "blocks"
    key = (blocks / "xor.dat").read_bytes()
    files = sorted(blocks.glob("blk*.dat"))
    # A damaged copy too: a byte flipped inside a block's last transaction.
    damaged = tmp_path / "blk00000.dat"
    plain = bytearray(b ^ key[i % 8] for i, b in enumerate(files[0].read_bytes()))
    offsets = record_offsets(files[0], key)
    plain[offsets[3] - 5] ^= 0xFF
    damaged.write_bytes(bytes(b ^ key[i % 8] for i, b in enumerate(plain)))
    records = 0
    for path in [*files, damaged]:
        offsets = record_offsets(path, key)
        records += len(offsets) if path != damaged else 0
        (blocks_full, txs, _, _), n_full = _native.decode_blk_bodies(
            str(path), 7, offsets, "regtest", key
        )
        (blocks_slim, txids), n_slim = _native.decode_blk_verdicts(
            str(path), 7, offsets, "regtest", key
        )
        assert n_full == n_slim
        assert blocks_slim.equals(blocks_full)
        assert txids.to_pydict() == txs.select(["txid", "block_hash", "position"]).to_pydict()
    assert records == expected["records"]
    assert not blocks_slim.column("valid").to_pylist()[2]
    # The stage folder holds only those two tables per part.
    with DataDir(root / "data", readonly=True) as data:
        parts = body_parts.registered(data)
    assert parts and all(e["tables"] == ["blocks", "txids"] for e in parts.values())
    staged = {f.name for f in (root / "data" / "stage" / "bodies").iterdir()}
    assert staged == {f"{p}.{t}.parquet" for p in parts for t in ("blocks", "txids")}


def _swap_record(blocks: Path, bad: bytes) -> None:
    """Puts a damaged copy of a block before everything else in blk00000.dat."""
    key = (blocks / "xor.dat").read_bytes()
    first = blocks / "blk00000.dat"
    plain = bytes(b ^ key[i % 8] for i, b in enumerate(first.read_bytes()))
    record = REGTEST_MAGIC + struct.pack("<I", len(bad)) + bad
    new = record + plain
    first.write_bytes(bytes(b ^ key[i % 8] for i, b in enumerate(new)))


def test_mutated_copy_is_skipped_for_the_valid_one(tmp_path: Path) -> None:
    expected = gen_chain(tmp_path / "node", "--blocks", "300", "--tx-per-block", "2:4")
    blocks = tmp_path / "node" / "blocks"
    records = read_records(blocks)
    target = next(r for r in records if CBlock.deserialize(r).vtx[1:])  # has a spend
    bad = bytearray(target)
    bad[-5] ^= 0xFF  # inside the last transaction: the merkle root no longer matches
    _swap_record(blocks, bytes(bad))
    result = full(blocks, tmp_path / "data")
    assert result["tip_hash"] == expected["tip_hash"]
    assert result["full"]["utxo_count"] == expected["utxo_count"]
    status = cli_json("btc", "status", "--data", tmp_path / "data", "--json")
    skip = [s for s in status["skipped"] if s["reason"] == "invalid_body"]
    assert len(skip) == 1 and skip[0]["offset"] == 0 and skip[0]["file"] == "blk00000.dat"
    assert skip[0]["detail"] in ("bad-txnmrklroot", "bad-witness-merkle-match")


def _mine_on(prev_hash: str, height_push: int, spend: tuple[str, int] | None, t: int) -> bytes:
    """A regtest block on ``prev_hash``: a coinbase pushing ``height_push`` and, optionally, a
    transaction spending ``spend`` (built here with hashlib, independently of the Rust core)."""

    def sha256d(b: bytes) -> bytes:
        return hashlib.sha256(hashlib.sha256(b).digest()).digest()

    push = height_push.to_bytes((height_push.bit_length() + 8) // 8, "little")
    script_sig = bytes([len(push)]) + push + b"\x01\x02"
    out = struct.pack("<q", 1000) + bytes([22, 0, 20]) + bytes(20)
    cb = (
        struct.pack("<i", 2) + b"\x01" + bytes(32) + b"\xff" * 4
        + bytes([len(script_sig)]) + script_sig + b"\xff" * 4 + b"\x01" + out + bytes(4)
    )  # fmt: skip
    txs = [cb]
    if spend:
        prev = bytes.fromhex(spend[0])[::-1] + struct.pack("<I", spend[1])
        txs.append(
            struct.pack("<i", 2) + b"\x01" + prev + b"\x00" + b"\xff" * 4 + b"\x01" + out
            + bytes(4)
        )  # fmt: skip
    level = [sha256d(tx) for tx in txs]
    while len(level) > 1:
        level = level + level[-1:] if len(level) % 2 else level
        level = [sha256d(level[i] + level[i + 1]) for i in range(0, len(level), 2)]
    prev_hash_b = bytes.fromhex(prev_hash)[::-1]
    for nonce in range(1 << 20):
        header = struct.pack("<i", 0x20000000) + prev_hash_b + level[0]
        header += struct.pack("<III", t, 0x207FFFFF, nonce)
        if int.from_bytes(sha256d(header), "little") <= 0x7FFFFF << (8 * 29):
            break
    return header + bytes([len(txs)]) + b"".join(txs)


@pytest.mark.parametrize(
    ("case", "reason"),
    [("bip34", "bad-cb-height"), ("missing", "bad-txns-inputs-missingorspent")],
)
def test_consensus_invalid_block_is_excluded_like_core(
    tmp_path: Path, case: str, reason: str
) -> None:
    expected = gen_chain(tmp_path / "node", "--blocks", "200", "--no-xor")
    tip, height = expected["tip_hash"], expected["tip_height"]
    if case == "bip34":
        block = _mine_on(tip, height + 7, None, 1_700_000_000)
    else:
        block = _mine_on(tip, height + 1, ("ab" * 32, 3), 1_700_000_000)
    blocks = tmp_path / "node" / "blocks"
    last = sorted(blocks.glob("blk*.dat"))[-1]
    nxt = blocks / f"blk{int(last.stem[3:]) + 1:05d}.dat"
    nxt.write_bytes(REGTEST_MAGIC + struct.pack("<I", len(block)) + block)
    result = full(blocks, tmp_path / "data")
    # The invalid block has more work, but the best chain stays on its valid parent.
    assert result["tip_hash"] == tip
    assert result["full"]["utxo_count"] == expected["utxo_count"]
    (inv,) = result["full"]["invalid_blocks"]
    assert inv["reason"] == reason
    row = q(
        tmp_path / "data",
        f"SELECT valid, invalid_reason, in_best_chain FROM blocks WHERE hash = '{inv['hash']}'",
    )
    assert row == [(False, reason, False)]
    # Its rows are published off the best chain, decoded again from its file.
    for table, n in (("transactions", 1), ("outputs", 1), ("inputs", 1)):
        n += case == "missing"
        got = q(
            tmp_path / "data",
            f"SELECT count(*), bool_or(in_best_chain) FROM {table} "
            f"WHERE block_hash = '{inv['hash']}'",
        )
        assert got == [(n, False)], table


def test_tx_lookup_through_the_index(chain: tuple[Path, dict, dict]) -> None:
    root, _, _ = chain
    data = root / "data"
    [(txid, block_hash, height, position, fee, n_in, n_out)] = q(
        data,
        "SELECT txid, block_hash, height, position, fee, n_in, n_out FROM transactions "
        "WHERE in_best_chain AND NOT is_coinbase ORDER BY height DESC, position LIMIT 1",
    )
    tx = cli_json("btc", "tx", "--data", data, txid, "--json")
    assert (tx["txid"], tx["block_hash"], tx["height"], tx["position"], tx["fee"]) == (
        txid,
        block_hash,
        height,
        position,
        fee,
    )
    assert [i["vin"] for i in tx["inputs"]] == list(range(n_in))
    assert [o["vout"] for o in tx["outputs"]] == list(range(n_out))
    assert sum(i["value"] for i in tx["inputs"]) - sum(o["value"] for o in tx["outputs"]) == fee
    code, _, err = cli("btc", "tx", "--data", data, "00" * 32)
    assert code != 0 and "not in the index" in err


def test_tx_index_values_are_compact_and_find_off_chain_copies(
    chain: tuple[Path, dict, dict],
) -> None:
    root, _, _ = chain
    data = root / "data"
    with DataDir(data, readonly=True) as d:
        values = [v for _, v in d.items(layout.CF_BTC_TXINDEX)]
    places = _native.decode_txindex_places(values).to_pylist()
    [(best_txids,)] = q(data, "SELECT count(DISTINCT txid) FROM transactions WHERE in_best_chain")
    [(all_txids,)] = q(data, "SELECT count(DISTINCT txid) FROM transactions")
    # One entry per txid: 8 bytes where a best-chain copy holds it, 40 where only others do.
    assert len(values) == all_txids > best_txids
    assert sorted({len(v) for v in values}) == [8, 40]
    assert sum(p["best"] for p in places) == best_txids
    # A transaction only a side branch holds is found by its block.
    [(txid, block_hash, position)] = q(
        data,
        "SELECT txid, block_hash, position FROM transactions t WHERE NOT in_best_chain AND "
        "height IS NOT NULL AND txid NOT IN (SELECT txid FROM transactions WHERE in_best_chain) "
        "ORDER BY height, block_hash, position LIMIT 1",
    )
    tx = cli_json("btc", "tx", "--data", data, txid, "--json")
    assert (tx["txid"], tx["block_hash"], tx["position"], tx["in_best_chain"]) == (
        txid,
        block_hash,
        position,
        False,
    )


def test_a_tx_index_of_the_text_format_is_built_again(
    chain: tuple[Path, dict, dict], tmp_path: Path
) -> None:
    root, _, _ = chain
    data = tmp_path / "data"
    full(root / "node" / "blocks", data)
    with DataDir(data, readonly=True) as d:
        before = list(d.items(layout.CF_BTC_TXINDEX))
        record = d.meta_get(layout.META_BTC_TXINDEX)
    key = before[0][0]
    with DataDir(data) as d:
        # As format 1 wrote them: "height_range block_hash position", and no format recorded.
        d.write({layout.CF_BTC_TXINDEX: [(key, b"0 " + b"ab" * 32 + b" 3")]})
        d.write({layout.CF_META: [(layout.META_BTC_TXINDEX, {**record, "format": None})]})
    code, _, err = cli("btc", "tx", "--data", data, key[::-1].hex())
    assert code != 0 and "another format" in err
    again = full(root / "node" / "blocks", data)
    assert again["run"].get("txindex_rebuilt") == 1
    with DataDir(data, readonly=True) as d:
        assert list(d.items(layout.CF_BTC_TXINDEX)) == before
        assert d.meta_get(layout.META_BTC_TXINDEX)["format"] == layout.TXINDEX_FORMAT
