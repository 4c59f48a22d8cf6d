"""Bitcoin Core itself as the oracle (tests/bitcoin_core: libbitcoinkernel, Core's validation
engine, reindexing the same blk files in a fresh data directory).

Core validates every generated chain in full (script checks on: the generator signs its P2PKH,
P2WPKH and P2TR spends) and must end where rechain's full reindex ends: tip, chainwork, best
chain, UTXO count, amount and hash_serialized_3. The same holds for real mainnet blocks
(shared/data/bitcoin/real-blk), and Core rejects a generated block whose spend carries a wrong
signature, which rechain, which does not verify scripts, accepts.

The oracle is built by tests/bitcoin_core/build.sh into a cache directory
(RECHAIN_BITCOIN_CORE_CACHE, default ~/.cache/rechain/bitcoin_core), rebuilt only when its
sources or the toolchain change; the first build compiles Core's C++ (10-25 minutes on 2 cores,
with Debian's libboost-dev). Without cargo, cmake or a C++ compiler the tests fail
(`conftest.oracle_tools`: CI has them).
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from bitcoin.core import CBlock

from tests.conftest import BTC_DATA, cli_json, gen_chain, oracle_tools, reindex
from tests.core_oracle import build_core_oracle
from tests.test_btc_full import read_records

REAL_BLK = BTC_DATA / "real-blk"
# shared/data/bitcoin/README.md, real-blk/: mainnet blocks 1..255 (no genesis) in height order.
MAINNET_GENESIS = "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"
MAINNET_255 = "00000000d0a75c861fabf9ff7b92022f60e4afeed9331fe5aa073d8e4706fe3c"
MAINNET_277647 = "0000000000000000054a714e580b16c583701712ab91060e92dbde6eb1e052a8"


@functools.cache
def core_oracle() -> Path:
    """The oracle's binary, built or taken from its cache (once a session; other modules'
    fixtures call this too)."""
    oracle_tools("Bitcoin Core", "cargo", "cmake", "c++")
    try:
        binary = build_core_oracle()
    except RuntimeError as e:
        pytest.fail(f"building the Bitcoin Core oracle failed: {e}")
    assert binary.is_file()
    return binary


@pytest.fixture(scope="session")
def core() -> Path:
    return core_oracle()


def run_core(binary: Path, network: str, *args: object) -> dict[str, Any]:
    proc = subprocess.run(
        [str(binary), "--network", network, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def sha256_lines(hashes: list[str]) -> str:
    return hashlib.sha256("".join(h + "\n" for h in hashes).encode()).hexdigest()


def rechain_best_chain(data: Path) -> list[str]:
    rows = cli_json(
        "query",
        "--data",
        data,
        "SELECT hash FROM headers WHERE in_best_chain ORDER BY height",
        "--format",
        "json",
    )
    return [r["hash"] for r in rows]


def assert_same_end(core_out: dict[str, Any], data: Path) -> None:
    """Core's figures equal rechain's (``btc status`` of a full reindex, best chain by query)."""
    st = cli_json("btc", "status", "--data", data, "--json")
    assert st["mode"] == "full"
    assert core_out["tip_hash"] == st["tip_hash"]
    assert core_out["tip_height"] == st["tip_height"]
    assert int(core_out["chainwork"], 16) == int(st["chainwork"], 16)
    best = rechain_best_chain(data)
    assert core_out["best_chain_count"] == len(best)
    assert core_out["best_chain_sha256"] == sha256_lines(best)
    assert core_out["utxo_height"] == st["tip_height"]
    assert core_out["utxo_count"] == st["utxo_count"]
    assert core_out["total_amount"] == st["total_amount"]
    assert core_out["hash_serialized_3"] == st["hash_serialized_3"]


def spend_kinds(blocks: Path, best: list[str]) -> dict[str, int]:
    """Inputs of best-chain transactions by what they carry (python-bitcoinlib decodes):
    P2PKH (signature and key in the scriptSig), P2WPKH (two witness items), P2TR key path (one
    64-byte witness item)."""
    on_best = set(best)
    kinds = {"p2pkh": 0, "p2wpkh": 0, "p2tr": 0}
    for raw in read_records(blocks):
        block = CBlock.deserialize(raw)
        if block.GetHash()[::-1].hex() not in on_best:
            continue
        for tx in block.vtx[1:]:
            for i, txin in enumerate(tx.vin):
                stack = tx.wit.vtxinwit[i].scriptWitness.stack if tx.wit.vtxinwit else []
                if len(stack) == 1 and len(stack[0]) == 64:
                    kinds["p2tr"] += 1
                elif len(stack) == 2 and len(stack[1]) == 33:
                    kinds["p2wpkh"] += 1
                elif len(txin.scriptSig) > 0 and not stack:
                    kinds["p2pkh"] += 1
    return kinds


@pytest.fixture(scope="module")
def signed_chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Path]:
    root = tmp_path_factory.mktemp("core_oracle")
    expected = gen_chain(
        root / "node",
        "--blocks",
        "400",
        "--side-branches",
        "5",
        "--orphans",
        "2",
        "--reorg",
        "4",
        "--tx-per-block",
        "1:12",
        "--file-size",
        "200000",
        "--seed",
        "17",
    )
    reindex(root / "node" / "blocks", root / "data", "--mode", "full")
    return root / "node" / "blocks", expected, root / "data"


def test_core_accepts_a_generated_chain_with_full_script_checks(
    core: Path, signed_chain: tuple[Path, dict[str, Any], Path]
) -> None:
    blocks, expected, data = signed_chain
    out = run_core(core, "regtest", "--blocks", blocks)
    assert out["mode"] == "reindex" and out["assumevalid"] is None
    assert out["invalid_blocks"] == [], out["log_errors"]
    assert out["tip_hash"] == expected["tip_hash"]
    assert out["tip_height"] == expected["tip_height"] == 400
    assert out["utxo_count"] == expected["utxo_count"]
    assert out["total_amount"] == expected["total_amount"]
    assert_same_end(out, data)
    # Every kind of spend is on the best chain Core connected, many times over.
    kinds = spend_kinds(blocks, rechain_best_chain(data))
    assert min(kinds.values()) >= 100, kinds


def test_core_with_assumevalid_at_the_tip_ends_the_same(
    core: Path, signed_chain: tuple[Path, dict[str, Any], Path]
) -> None:
    blocks, expected, data = signed_chain
    out = run_core(core, "regtest", "--blocks", blocks, "--assumevalid", expected["tip_hash"])
    assert out["assumevalid"] == expected["tip_hash"]
    assert out["invalid_blocks"] == []
    assert out["import_seconds"] > 0
    assert_same_end(out, data)


def test_core_rejects_a_wrong_signature_that_rechain_does_not_check(
    core: Path, tmp_path: Path
) -> None:
    expected = gen_chain(
        tmp_path / "node",
        "--blocks",
        "160",
        "--tx-per-block",
        "3:6",
        "--seed",
        "3",
        "--bad-signature",
        "130",
    )
    assert expected["bad_signature_height"] == 130
    blocks = tmp_path / "node" / "blocks"
    best = (tmp_path / "node" / "best_chain.txt").read_text().split()
    out = run_core(core, "regtest", "--blocks", blocks)
    # Core connects everything below the damaged block, and nothing from it on.
    assert out["tip_height"] == 129
    assert out["tip_hash"] == best[129]
    rejected = [b for b in out["invalid_blocks"] if b["hash"] == best[130]]
    assert rejected and rejected[0]["result"] == "consensus", out["invalid_blocks"]
    assert any("script-verify-flag-failed" in line for line in out["log_errors"]), out["log_errors"]
    # rechain checks structure, proof of work, amounts and spends, not scripts: it reaches the
    # generator's tip, past the block Core rejects.
    result = reindex(blocks, tmp_path / "data", "--mode", "full")
    assert result["tip_hash"] == expected["tip_hash"] == best[159]
    assert result["full"]["invalid_blocks"] == []


def test_core_and_rechain_agree_on_real_mainnet_blocks(core: Path, tmp_path: Path) -> None:
    assert REAL_BLK.is_dir(), f"the real blk files are not here: {REAL_BLK}"
    files = [REAL_BLK / "mainnet-blocks-1-255.blk", REAL_BLK / "mainnet-block-277647.blk"]
    # The files hold no genesis block, which a reindex starts from: Core imports them the way
    # -loadblock does, after writing its own genesis; block 277647's parent never comes. What it
    # stores is a node's blocks folder (its own xor.dat, a preallocated blk00000.dat), which
    # rechain then reads.
    datadir = tmp_path / "core"
    args = [a for f in files for a in ("--loadblock", f)]
    out = run_core(core, "main", *args, "--datadir", datadir, "--list-chain")
    assert out["mode"] == "loadblock" and out["invalid_blocks"] == []
    assert out["best_chain"][0] == MAINNET_GENESIS
    assert out["tip_height"] == 255 and out["tip_hash"] == MAINNET_255
    assert MAINNET_277647 not in out["best_chain"]
    assert (datadir / "blocks" / "xor.dat").read_bytes() != bytes(8)
    result = cli_json(
        "btc",
        "reindex",
        "--blocks",
        datadir / "blocks",
        "--data",
        tmp_path / "data",
        "--network",
        "main",
        "--mode",
        "full",
        "--no-progress",
        "--json",
    )
    assert result["full"]["invalid_blocks"] == []
    assert_same_end(out, tmp_path / "data")
    # And Core's reindex of its own folder ends where its import did.
    again = run_core(core, "main", "--blocks", datadir / "blocks")
    for key in ("tip_hash", "best_chain_sha256", "utxo_count", "total_amount", "hash_serialized_3"):
        assert again[key] == out[key], key
