"""The real mainnet and testnet blocks in ../shared/data/bitcoin, framed as a node frames them,
scanned and checked against facts.json (computed with python-bitcoinlib)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from rechain.workers import _native
from rechain.workers.btc_scan import WorkUnit

from tests.conftest import BTC_DATA, scan_file

FACTS = json.loads((BTC_DATA / "facts.json").read_text())
NETWORK = {"main": "main", "testnet3": "testnet"}


@pytest.mark.parametrize("fact", FACTS, ids=[f["network"] for f in FACTS])
@pytest.mark.parametrize("check_bodies", [False, True])
def test_real_block_matches_facts(tmp_path: Path, fact: dict, check_bodies: bool) -> None:
    raw = (BTC_DATA / fact["file"]).read_bytes()
    net = NETWORK[fact["network"]]
    magic = _native.network_info(net).magic
    key = bytes.fromhex("a1b2c3d4e5f60718")
    plain = magic + struct.pack("<I", len(raw)) + raw
    # Stored obfuscated, with a zero-filled preallocated tail (raw zeros on disk).
    body = bytes(b ^ key[i % 8] for i, b in enumerate(plain))
    path = tmp_path / "blk00000.dat"
    path.write_bytes(body + bytes(4096))
    unit = WorkUnit(0, str(path), 0, 0, path.stat().st_size, net, key, check_bodies)
    records, events = scan_file(unit)
    assert records.num_rows == 1
    r = records.to_pylist()[0]
    assert r["status"] == "ok" and r["body_checked"] is check_bodies
    assert _native.display_hash(r["hash"]) == fact["hash"]
    assert _native.display_hash(r["prev_hash"]) == fact["prev_hash"]
    assert _native.display_hash(r["merkle_root"]) == fact["merkle_root"]
    assert (r["version"], r["time"], r["bits"], r["nonce"]) == (
        fact["version"],
        fact["time"],
        fact["bits"],
        fact["nonce"],
    )
    assert r["n_tx"] == fact["tx_count"]
    assert r["declared_size"] == r["consumed"] == fact["size"]
    assert [e["kind"] for e in events.to_pylist()] == ["zero_tail"]
