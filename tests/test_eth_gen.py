"""``rechain gen eth`` end to end through the installed CLI: era1 files and a geth freezer with
their ``expected.json``, deterministic per seed, read back by the Rust readers' era1 layout and
the freezer's index rules as seen from Python (file names, sizes, index entries)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_geth_oracle import epoch_accumulator

RECHAIN = Path(sys.executable).parent / "rechain"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RECHAIN), *args], capture_output=True, text=True, timeout=600, check=False
    )


def gen(out: Path, *args: str) -> dict:
    r = run("gen", "eth", str(out), *args)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "expected.json").read_text())


def test_gen_eth_era1_dev(tmp_path: Path) -> None:
    a = gen(tmp_path / "a", "--blocks", "8200", "--network", "dev", "--tx-per-block", "0:2")
    assert (a["blocks"], a["tip_number"], a["network"], a["chain_id"]) == (8200, 8199, "dev", 1337)
    assert [f["blocks"] for f in a["files"]] == [8192, 8]
    for f, epoch in zip(a["files"], (0, 1), strict=True):
        name = Path(f["path"]).name
        assert f["path"].startswith("era1/")
        assert name == f"dev-{epoch:05d}-{f['accumulator'][:8]}.era1"
        data = (tmp_path / "a" / f["path"]).read_bytes()
        # Version record first; BlockIndex last, its count in the final 8 bytes.
        assert data[:8] == bytes.fromhex("6532000000000000")
        assert int.from_bytes(data[-8:], "little") == f["blocks"]
    kinds = a["tx_kinds"]
    assert kinds["legacy"] and kinds["legacy_eip155"] and kinds["eip2930"] and kinds["eip1559"]
    assert kinds["eip4844"] == 0 and a["transactions"] == sum(kinds.values())
    assert len(a["senders"]) == 4 and int(a["final_td"]) > 0
    # Same seed, same files; another seed, another chain.
    b = gen(tmp_path / "b", "--blocks", "8200", "--network", "dev", "--tx-per-block", "0:2")
    assert b == a
    for f in a["files"]:
        assert (tmp_path / "a" / f["path"]).read_bytes() == (
            tmp_path / "b" / f["path"]
        ).read_bytes()
    c = gen(tmp_path / "c", "--blocks", "20", "--network", "dev", "--seed", "2")
    assert c["tip_hash"] != a["tip_hash"] and c["genesis_hash"] == a["genesis_hash"]


def test_gen_eth_freezer(tmp_path: Path) -> None:
    out = tmp_path / "node"
    facts = gen(
        out,
        "--blocks",
        "40",
        "--format",
        "freezer",
        "--network",
        "sepolia",
        "--max-file-size",
        "4096",
        "--tx-per-block",
        "1:3",
    )
    chain = out / "ancient" / "chain"
    assert facts["files"] == [
        {"path": "ancient/chain", "first_block": 0, "blocks": 40, "accumulator": None}
    ]
    assert facts["genesis_hash"] == (
        "25a5cc106eea7138acab33231d7160d69cb777ee0c2c553fcddf5138993e6dd9"
    )
    for table, kind in (("hashes", "r"), ("headers", "c"), ("bodies", "c"), ("receipts", "c")):
        index = (chain / f"{table}.{kind}idx").read_bytes()
        assert len(index) == 6 * 41 and index[:6] == bytes(6)
        # .meta v2: [2, tail 0, flush offset = index length].
        assert (chain / f"{table}.meta").read_bytes() == bytes.fromhex("c4028081f6")
    hashes = (chain / "hashes.0000.rdat").read_bytes()
    assert hashes[-32:].hex() == facts["tip_hash"] and len(hashes) == 32 * 40
    # 4 KiB data files: bodies spill into several.
    assert len(list(chain.glob("bodies.*.cdat"))) > 1
    assert not (chain / "diffs.ridx").exists() and (chain / "bals.cidx").exists()
    # A non-empty target is refused, with a one-line error.
    r = run("gen", "eth", str(out), "--blocks", "5", "--format", "freezer")
    assert r.returncode != 0 and "not empty" in r.stderr


@pytest.mark.parametrize("bad", [["--tx-per-block", "3:1"], ["--blocks", "0"]])
def test_gen_eth_refuses_bad_options(tmp_path: Path, bad: list[str]) -> None:
    args = ["gen", "eth", str(tmp_path / "x"), "--blocks", "5", *bad]
    r = run(*args)
    assert r.returncode != 0 and r.stderr.strip()


MAINNET_GENESIS_HASH = "d4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3"
# Mainnet genesis (spec §4.1): header RLP and its framed-snappy value in the real epoch-0 file.
GENESIS = (
    bytes.fromhex(
        "f90214a00000000000000000000000000000000000000000000000000000000000000000a01dcc4de8dec75d7a"
        "ab85b567b6ccd41ad312451b948a7413f0a142fd40d49347940000000000000000000000000000000000000000"
        "a0d7f8974fb5ac78d9ac099b9ad5018bedc2ce0a72dad1827a1709da30580f0544a056e81f171bcc55a6ff8345"
        "e692c0f86e5b48e01b996cadc001622fb5e363b421a056e81f171bcc55a6ff8345e692c0f86e5b48e01b996cad"
        "c001622fb5e363b421b90100"
    )
    + bytes(256)
    + bytes.fromhex(
        "850400000000808213888080a011bbe8db4e347b4e8c937c1c8370e4b5ed33adb3db69cbdb7a38e1e50b1b82fa"
        "a00000000000000000000000000000000000000000000000000000000000000000880000000000000042"
    )
)
GENESIS_FRAMED = bytes.fromhex(
    "ff060000734e6150705900cb0000ec6da9a6970410f90214a0007a010088a01dcc4de8dec75d7aab85b567b6cc"
    "d41ad312451b948a7413f0a142fd40d4934794004a4200f043a0d7f8974fb5ac78d9ac099b9ad5018bedc2ce0a"
    "72dad1827a1709da30580f0544a056e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b4"
    "21a0567a210004b9014a7800fe0100fe0100fe0100b6010004850401f098808213888080a011bbe8db4e347b4e"
    "8c937c1c8370e4b5ed33adb3db69cbdb7a38e1e50b1b82fa82ea0120880000000000000042"
)


def test_era1_writer_binding_writes_geth_bytes(tmp_path: Path) -> None:
    from rechain.workers import _native

    w = _native.Era1Writer(str(tmp_path), "mainnet")
    td = 17_179_869_184
    w.add_block(GENESIS, bytes.fromhex("c2c0c0"), bytes.fromhex("c0"), td)
    with pytest.raises(ValueError):
        w.add_block(GENESIS, bytes.fromhex("c2c0c0"), bytes.fromhex("c0"), td)  # block 0 again
    assert w.written() == []
    [f] = w.finish()
    assert (f.epoch, f.first_block, f.blocks) == (0, 0, 1)
    path = Path(f.path)
    assert path.name == f"mainnet-00000-{f.accumulator[:8]}.era1"
    # The accumulator from the SSZ definition (tests/test_geth_oracle.py), not the writer's.
    assert f.accumulator.removeprefix("0x") == epoch_accumulator([(MAINNET_GENESIS_HASH, td)])
    data = path.read_bytes()
    assert len(data) == f.bytes
    # The first block tuple is laid out as in the real mainnet-00000-5ec1ffb8.era1 (spec §2.4).
    assert data[:8] == bytes.fromhex("6532000000000000")
    assert data[8:16] == bytes.fromhex("0300d90000000000") and data[16:233] == GENESIS_FRAMED
    assert data[233:262] == bytes.fromhex(
        "0400150000000000ff060000734e6150705901070000f8322cdcc2c0c0"
    )
    assert data[262:289] == bytes.fromhex("0500130000000000ff060000734e6150705901050000b80eae8dc0")
    assert data[289:329] == bytes.fromhex("0600200000000000") + td.to_bytes(32, "little")
    with pytest.raises(ValueError):
        w.finish()
