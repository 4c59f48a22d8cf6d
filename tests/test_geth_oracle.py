"""go-ethereum v1.17.10 itself on the real Ethereum history files (the `gethharness` oracle in
tests/geth).

These tests pin what go-ethereum reads from the files in shared/data/ethereum to the facts in its
README (first and last hash, final TD, tx count, accumulator of each era1 file; the 6 blocks of
the geth freezer fixture), and compare rechain's importer with go-ethereum block for block on
the same inputs. They also record go-ethereum's limits: its history import starts at genesis only,
its header chain needs every parent, and go-ethereum 1.17.10 opens a freezer written before
1.17.4 read-only only after adding the `bals` table.

Proof-of-work and the legacy `diffs` (TD) freezer table are checked with go-ethereum v1.11.6, the
last release with ethash, built from its own module (tests/geth_ethash).

Both oracles are built from the Go module proxy by their build.sh into a cache directory
(RECHAIN_GETHHARNESS_CACHE, default ~/.cache/rechain/gethharness), rebuilt only when their
sources change; the first builds take about 7 and 2 minutes on 2 cores. Without Go the tests
fail (`conftest.oracle_tools`: CI has it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import oracle_tools

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RECHAIN_SHARED", REPO.parent / "shared"))
ETH = SHARED / "data" / "ethereum"
ERA1 = ETH / "era1"
FREEZER = ETH / "geth-freezer-devchain"
HARNESS = REPO / "tests" / "geth"
ETHASH_HARNESS = REPO / "tests" / "geth_ethash"
CACHE = Path(
    os.environ.get("RECHAIN_GETHHARNESS_CACHE", Path.home() / ".cache" / "rechain" / "gethharness")
)
GETH_VERSION = "v1.17.10"
ETHASH_GETH_VERSION = "v1.11.6"
EPOCH = 8192

# shared/data/ethereum/README.md, era1 table: (file, first block, first hash, last hash,
# final TD, txs, accumulator).
ERA1_FACTS = [
    (
        "mainnet-00003-d8b8a40b.era1",
        24_576,
        "32aa8325e5b022078aa5858553ac97c8c0215606f82a59367c91aa73bfca3c79",
        "14c8639dfc32812ed20839f5a11993cd59b22e5226cb2179640ba5c1f0c08f87",
        24713480918711655,
        0,
        "d8b8a40b8cf6818e1bac871d882e772be0b28d1baaf72374946506d9e6fa7d75",
    ),
    (
        "sepolia-00000-643a00f7.era1",
        0,
        "25a5cc106eea7138acab33231d7160d69cb777ee0c2c553fcddf5138993e6dd9",
        "8e3e7dc9ef199c05683417b4aa572f0b7a8bcfafca7edb6045baabc01aa4fb0c",
        14255663800,
        0,
        "643a00f78fd6a304a29c80b2f2f946e9e57494597600262b378b2754d34dff41",
    ),
    (
        "sepolia-00021-b8814b14.era1",
        172_032,
        "eb20db3e285c22f189aae88e1044aed08997b35675cfb5db3e60fe8a0daee218",
        "af105ff107f4d9b48bc205c3001ee33938b1b6f3b2ef04da0064ae63ecb1d80a",
        74457974918680,
        93,
        "b8814b146889489efd392d80c7ca4e418d39302e25323a55882ca8cc0ef013e3",
    ),
]
SEPOLIA0 = ERA1_FACTS[1][0]


def _build(harness: Path) -> Path:
    go = oracle_tools(f"go-ethereum ({harness.name})", "go")[0]
    assert ERA1.is_dir(), f"the real Ethereum files are not here: {ETH}"
    env = dict(os.environ, PATH=f"{Path(go).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(
        ["bash", str(harness / "build.sh"), str(CACHE)],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    assert proc.returncode == 0, f"building the go-ethereum oracle failed:\n{proc.stderr}"
    binary = Path(proc.stdout.strip().splitlines()[-1])
    assert binary.is_file()
    return binary


@pytest.fixture(scope="session")
def gethharness() -> Path:
    return _build(HARNESS)


@pytest.fixture(scope="session")
def gethethash() -> Path:
    """go-ethereum v1.11.6 (ethash, the diffs table), a module of its own in tests/geth_ethash."""
    return _build(ETHASH_HARNESS)


def run(
    binary: Path, *args: object, ok: bool = True, version: str = GETH_VERSION
) -> dict[str, Any]:
    """Runs an oracle; returns its JSON. ok=False expects a failed command (exit 1, JSON error)."""
    proc = subprocess.run(
        [str(binary), *map(str, args)], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == (0 if ok else 1), proc.stderr
    out = json.loads(proc.stdout)
    assert out["geth_version"] == version
    return out


@pytest.fixture(scope="module")
def era1_read(gethharness: Path) -> dict[str, dict[str, Any]]:
    out = run(gethharness, "era1", "--dir", ERA1)
    assert out["ok"] and out["mode"] == "read"
    return {f["file"]: f for f in out["files"]}


@pytest.fixture(scope="module")
def sepolia0_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sepolia0")
    (d / SEPOLIA0).symlink_to(ERA1 / SEPOLIA0)
    return d


@pytest.mark.parametrize(("name", "start", "first", "last", "td", "txs", "acc"), ERA1_FACTS)
def test_era1_read_matches_readme(
    era1_read: dict[str, dict[str, Any]],
    name: str,
    start: int,
    first: str,
    last: str,
    td: int,
    txs: int,
    acc: str,
) -> None:
    f = era1_read[name]
    assert f["error"] is None
    assert (f["epoch"], f["start"], f["count"], f["blocks_read"]) == (
        start // EPOCH,
        start,
        EPOCH,
        EPOCH,
    )
    assert (f["first_hash"], f["last_hash"]) == (first, last)
    assert int(f["final_td"]) == td
    assert f["txs"] == f["receipts"] == txs
    assert f["accumulator"] == f["accumulator_computed"] == acc
    assert f["accumulator_ok"] and f["name_ok"]

    blocks = f["blocks"]
    assert [b["number"] for b in blocks] == list(range(start, start + EPOCH))
    assert (blocks[0]["hash"], blocks[-1]["hash"]) == (first, last)
    assert int(blocks[-1]["td"]) == td
    assert sum(b["txs"] for b in blocks) == txs
    assert all(b["receipts"] == b["txs"] for b in blocks)
    tds = [int(b["td"]) for b in blocks]
    assert int(f["initial_td"]) < tds[0] and all(a < b for a, b in zip(tds, tds[1:], strict=False))
    assert len({b["hash"] for b in blocks}) == EPOCH
    # The harness's accumulator is go-ethereum's function over figures the harness picks; the
    # README's root must also come out of the SSZ definition computed here.
    assert epoch_accumulator([(b["hash"], int(b["td"])) for b in blocks]) == acc


def epoch_accumulator(records: list[tuple[str, int]]) -> str:
    """hash_tree_root(List[HeaderRecord(block_hash, total_difficulty), 8192]) as EIP-7643
    defines it, in plain hashlib: each record's root is sha256(hash || td as uint256 LE)."""
    level = [
        hashlib.sha256(bytes.fromhex(h) + td.to_bytes(32, "little")).digest() for h, td in records
    ]
    level += [bytes(32)] * (EPOCH - len(level))
    while len(level) > 1:
        level = [hashlib.sha256(level[i] + level[i + 1]).digest() for i in range(0, len(level), 2)]
    return hashlib.sha256(level[0] + len(records).to_bytes(32, "little")).hexdigest()


def test_era1_sepolia_genesis_and_typed_txs(era1_read: dict[str, dict[str, Any]]) -> None:
    sep0 = era1_read[SEPOLIA0]
    assert sep0["initial_td"] == "0"
    # spec 4.3: block 175,229 of sepolia-00021 holds two type-2 transactions.
    block = era1_read["sepolia-00021-b8814b14.era1"]["blocks"][175_229 - 172_032]
    assert block["hash"] == "dd7b66d31f49da65e87b3031d7d62c4eb6ce45700706dd05a145f8caea5de5ca"
    assert block["txs"] == block["receipts"] == 2


def test_mainnet_accumulator_is_the_portal_epoch_root(era1_read: dict[str, dict[str, Any]]) -> None:
    # historical_hashes_accumulator.ssz: two 4-byte offsets, then the epoch roots, 32 bytes each.
    ssz = (ETH / "portal" / "historical_hashes_accumulator.ssz").read_bytes()
    assert (len(ssz) - 8) // 32 == 1897
    epoch3 = ssz[8 + 3 * 32 : 8 + 4 * 32].hex()
    assert era1_read["mainnet-00003-d8b8a40b.era1"]["accumulator"] == epoch3


def test_era1_import_from_genesis_equals_read(
    gethharness: Path, sepolia0_dir: Path, era1_read: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    datadir = tmp_path / "datadir"
    out = run(gethharness, "era1", "--dir", sepolia0_dir, "--mode", "import", "--datadir", datadir)
    assert out["ok"] and out["network"] == "sepolia" and "import_error" not in out
    [f] = out["files"]
    read = era1_read[SEPOLIA0]
    assert f["imported"] and f["error"] is None
    # Read back from geth's database: same blocks; TD summed from the stored difficulties
    # equals the era1 TD records; the accumulator over the database equals the stored one.
    assert f["blocks"] == read["blocks"]
    for key in ("first_hash", "last_hash", "final_td", "txs", "receipts", "accumulator"):
        assert f[key] == read[key], key
    assert f["accumulator_computed"] == read["accumulator"]

    # The datadir holds a freezer written by go-ethereum 1.17.10: the freezer command reads it
    # read-only, and its hashes are the era1 file's.
    frz = run(gethharness, "freezer", "--dir", datadir / "chaindata" / "ancient")
    assert frz["ok"] and frz["opened"] == "readonly" and frz["readonly_error"] is None
    assert frz["tables"] == ["bals", "bodies", "hashes", "headers", "receipts"]
    assert frz["ancients"] == EPOCH
    assert [b["hash"] for b in frz["blocks"]] == [b["hash"] for b in read["blocks"]]
    assert all(b["hash_ok"] for b in frz["blocks"])


def test_era1_import_needs_a_chain_from_genesis(gethharness: Path) -> None:
    sep = run(
        gethharness,
        "era1",
        "--dir",
        ERA1,
        "--mode",
        "import",
        "--network",
        "sepolia",
        "--blocks=false",
    )
    files = {f["file"]: f for f in sep["files"]}
    assert not sep["ok"]
    assert files[SEPOLIA0]["imported"] and files[SEPOLIA0]["error"] is None
    late = files["sepolia-00021-b8814b14.era1"]
    assert not late["imported"] and "missing epoch 1" in late["error"]
    assert late["start"] == 172_032  # the file itself was readable

    main = run(
        gethharness,
        "era1",
        "--dir",
        ERA1,
        "--mode",
        "import",
        "--network",
        "mainnet",
        "--blocks=false",
    )
    [f] = main["files"]
    assert not main["ok"] and not f["imported"]
    assert (
        f["error"].startswith("mainnet-00003-d8b8a40b.era1: ") and "missing epoch 0" in f["error"]
    )


def test_era1_rejected_files_give_geths_message(gethharness: Path, tmp_path: Path) -> None:
    data = bytearray((ERA1 / SEPOLIA0).read_bytes())
    corrupt = bytearray(data)
    corrupt[1_500_000] ^= 0xFF  # inside a framed-snappy value of block 3838
    (tmp_path / SEPOLIA0).write_bytes(corrupt)
    (tmp_path / "sepolia-00001-00000000.era1").write_bytes(data[: len(data) // 2])
    (tmp_path / "sepolia-00002-00000000.era1").write_bytes(b"")

    out = run(gethharness, "era1", "--dir", tmp_path, "--blocks=false")
    assert not out["ok"]
    files = {f["file"]: f for f in out["files"]}
    bad = files[SEPOLIA0]
    assert bad["error"] == f"{SEPOLIA0}: block 3838: snappy: corrupt input"
    assert bad["blocks_read"] == 3838  # the blocks before it are still listed
    for name in ("sepolia-00001-00000000.era1", "sepolia-00002-00000000.era1"):
        assert files[name]["error"].startswith(f"{name}: ")
        assert files[name]["blocks_read"] == 0

    imp = run(gethharness, "era1", "--dir", tmp_path, "--mode", "import", "--blocks=false")
    assert not imp["ok"] and "snappy: corrupt input" in imp["import_error"]
    assert imp["files"][0]["blocks_read"] == 2501  # geth imports in batches of 2,500 blocks


def test_freezer_devchain(gethharness: Path) -> None:
    out = run(gethharness, "freezer", "--dir", FREEZER)
    assert out["ok"] and out["errors"] == 0
    assert out["ancients"] == 6 and out["blockdata_tail"] == 0
    assert out["tables"] == ["bodies", "diffs", "hashes", "headers", "receipts"]
    # Written by a geth before 1.17.4: 1.17.10 refuses it read-only for want of the `bals`
    # table, and opens it (a copy) read-write, as geth does at startup.
    assert out["opened"] == "readwrite-copy"
    assert "bals.cidx: no such file or directory" in out["readonly_error"]
    blocks = out["blocks"]
    assert [b["number"] for b in blocks] == list(range(6))
    for b in blocks:
        assert b["hash_ok"] and b["error"] is None
        assert b["hash"] == b["header_rlp_hash"] == b["header_hash"]
        assert (b["txs"], b["uncles"], b["receipts"]) == (0, 0, 0)
    assert len({b["hash"] for b in blocks}) == 6
    assert blocks[0]["parent_hash"] == "00" * 32
    assert all(b["parent_hash"] == a["hash"] for a, b in zip(blocks, blocks[1:], strict=False))


def test_freezer_in_place_needs_all_tables(gethharness: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ancient"
    shutil.copytree(FREEZER, copy)
    for p in copy.iterdir():
        p.chmod(0o644)
    out = run(gethharness, "freezer", "--dir", copy, "--in-place", ok=False)
    assert "cannot open" in out["error"] and "bals.cidx" in out["error"]


def test_headerimport_sepolia(gethharness: Path, tmp_path: Path) -> None:
    _, _, first, last, _, _, _ = ERA1_FACTS[1]
    out = run(
        gethharness, "headerimport", "--era1", ERA1, "--network", "sepolia", "--count", EPOCH - 1
    )
    assert out["ok"] and out["config"] == "sepolia"
    assert out["headers"] == EPOCH - 1 and out["tip_number"] == EPOCH - 1
    assert (out["genesis"], out["tip"]) == (first, last)
    assert out["seconds"] > 0 and out["headers_per_second"] > 0

    # The same headers through a file of concatenated header RLPs, into an in-memory database.
    hdr = tmp_path / "sepolia.rlp"
    exp = run(
        gethharness,
        "headers",
        "--era1",
        ERA1,
        "--network",
        "sepolia",
        "--count",
        EPOCH,
        "--out",
        hdr,
    )
    assert (exp["headers"], exp["first_hash"], exp["last_hash"]) == (EPOCH, first, last)
    out = run(gethharness, "headerimport", "--headers", hdr, "--db", "memory", "--batch", 500)
    assert (out["headers"], out["tip"], out["config"]) == (EPOCH - 1, last, "sepolia")

    # A header changed in its last byte (block 5000's base fee) is refused by geth's rules.
    data = bytearray(hdr.read_bytes())
    end = _rlp_item_ends(data)[5000]
    data[end - 1] ^= 1
    hdr.write_bytes(data)
    bad = run(gethharness, "headerimport", "--headers", hdr, ok=False)
    assert bad["error"].startswith("header #5000: invalid baseFee")


def test_headerimport_needs_genesis(gethharness: Path) -> None:
    out = run(gethharness, "headerimport", "--era1", ERA1, "--network", "mainnet", ok=False)
    assert "first header is #24576" in out["error"]


def test_ethash_verifies_mainnet_pow(gethharness: Path, gethethash: Path, tmp_path: Path) -> None:
    # 301 headers of mainnet-00003 (v1.17's era1 reader writes them): the first is the parent.
    hdr = tmp_path / "mainnet3.rlp"
    era1 = ERA1 / ERA1_FACTS[0][0]
    run(gethharness, "headers", "--era1", era1, "--count", 301, "--out", hdr)
    out = run(gethethash, "ethash", "--headers", hdr, version=ETHASH_GETH_VERSION)
    assert out["ok"] and out["errors"] == 0 and out["first_error"] is None
    assert (out["headers"], out["first"], out["last"], out["epochs"]) == (300, 24_577, 24_876, [0])
    assert out["headers_per_second"] > 0 and out["headers_per_second_per_core"] > 0

    # The last header's nonce changed in its last byte: its mix digest no longer matches.
    data = bytearray(hdr.read_bytes())
    data[-1] ^= 1
    hdr.write_bytes(data)
    bad = run(gethethash, "ethash", "--headers", hdr, "--threads", 1, version=ETHASH_GETH_VERSION)
    assert not bad["ok"] and bad["errors"] == 1
    assert bad["first_error"] == "header #24876: invalid mix digest"


def test_freezer_td_from_diffs(gethharness: Path, gethethash: Path) -> None:
    # go-ethereum v1.11 still reads the diffs table: the dev chain's TD stays at the genesis
    # difficulty 1 (its blocks are proof-of-stake, difficulty 0).
    td = run(gethethash, "freezer-td", "--dir", FREEZER, version=ETHASH_GETH_VERSION)
    assert td["ok"] and td["ancients"] == 6
    assert [b["td"] for b in td["blocks"]] == ["1"] * 6
    new = run(gethharness, "freezer", "--dir", FREEZER)
    assert [b["hash"] for b in td["blocks"]] == [b["hash"] for b in new["blocks"]]


def _rlp_item_ends(data: bytes) -> list[int]:
    """End offsets of the RLP lists laid one after another in data."""
    ends, i = [], 0
    while i < len(data):
        prefix = data[i]
        assert prefix >= 0xC0
        if prefix >= 0xF8:
            size = prefix - 0xF7
            i += 1 + size + int.from_bytes(data[i + 1 : i + 1 + size], "big")
        else:
            i += 1 + prefix - 0xC0
        ends.append(i)
    return ends


# --- rechain's importer against go-ethereum on the same files ------------------------------


def _rechain_import(source: Path, data: Path, *extra: str) -> dict[str, Any]:
    from tests.conftest import cli

    code, out, err = cli(
        "eth", "import", *extra, "--data", data, "--no-progress", "--json", "--no-pow"
    )
    assert code in (0, 1), err
    result: dict[str, Any] = json.loads(out)
    return result


def _rechain_blocks(data: Path) -> list[dict[str, Any]]:
    from tests.conftest import cli

    sql = (
        "SELECT b.number, substr(b.hash, 3) AS hash, b.total_difficulty::VARCHAR AS td, "
        "b.n_transactions AS txs, b.n_uncles AS uncles, count(r.transaction_index) AS receipts "
        "FROM eth_blocks b LEFT JOIN eth_receipts r ON r.block_number = b.number "
        "GROUP BY ALL ORDER BY b.number"
    )
    code, out, err = cli("query", "--data", data, "--format", "json", sql)
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


@pytest.mark.parametrize("network", ["mainnet", "sepolia"])
def test_rechain_import_agrees_with_geth_on_era1(
    era1_read: dict[str, dict[str, Any]], network: str, tmp_path: Path
) -> None:
    """Every block of the real era1 files: number, hash, TD, transactions, uncles and receipts
    as rechain imports them, equal to go-ethereum's reading; accumulators too."""
    era = tmp_path / "era1"
    era.mkdir()
    names = [f for f in era1_read if f.startswith(network + "-")]
    for name in names:
        (era / name).symlink_to(ERA1 / name)
    r = _rechain_import(era, tmp_path / "data", "--era1", str(era), "--network", network)
    assert r["failed"] == 0, r["verdicts"][:3]
    geth = [
        {k: b[k] for k in ("number", "hash", "td", "txs", "uncles", "receipts")}
        for name in sorted(names, key=lambda n: era1_read[n]["start"])
        for b in era1_read[name]["blocks"]
    ]
    ours = _rechain_blocks(tmp_path / "data")
    assert len(ours) == len(geth) == EPOCH * len(names)
    for mine, theirs in zip(ours, geth, strict=True):
        assert mine == theirs, (mine, theirs)
    assert r["checks"]["accumulators"] == len(names)
    # The accumulators rechain recomputed are go-ethereum's, file by file.
    from rechain.pipeline.ethereum.units import committed_units
    from rechain.pipeline.store.datadir import DataDir

    with DataDir(tmp_path / "data", readonly=True) as d:
        ours_acc = {u["first"]: u["accumulator"] for u in committed_units(d).values()}
    assert ours_acc == {
        era1_read[name]["start"]: "0x" + era1_read[name]["accumulator_computed"] for name in names
    }


def test_rechain_import_agrees_with_geth_on_the_freezer(
    gethharness: Path, gethethash: Path, tmp_path: Path
) -> None:
    """geth's own freezer tables: hashes from go-ethereum v1.17.10, TDs from the diffs table
    as go-ethereum v1.11.6 reads it, transactions and receipts."""
    _rechain_import(FREEZER, tmp_path / "data", "--freezer", str(FREEZER))
    geth = run(gethharness, "freezer", "--dir", FREEZER)["blocks"]
    tds = run(gethethash, "freezer-td", "--dir", FREEZER, version=ETHASH_GETH_VERSION)["blocks"]
    ours = _rechain_blocks(tmp_path / "data")
    assert [(b["number"], b["hash"], b["txs"], b["receipts"]) for b in ours] == [
        (b["number"], b["hash"], b["txs"], b["receipts"]) for b in geth
    ]
    assert [b["td"] for b in ours] == [b["td"] for b in tds]


def test_geth_reads_rechains_exported_era1_files(gethharness: Path, tmp_path: Path) -> None:
    """A generated freezer (geth v1.17 layout, no TD table) imported by rechain and exported as
    era1: go-ethereum reads the files, verifies their accumulators and gives the hashes and TDs
    rechain's tables hold; geth's own header import of them reaches the same tip."""
    from tests.conftest import cli

    code, _, err = cli(
        "gen",
        "eth",
        tmp_path / "g",
        "--blocks",
        "17000",
        "--format",
        "freezer",
        "--network",
        "dev",
        "--tx-per-block",
        "0:5",
    )
    assert code == 0, err
    data = tmp_path / "data"
    r = _rechain_import(
        tmp_path / "g" / "ancient",
        data,
        "--freezer",
        str(tmp_path / "g" / "ancient"),
        "--network",
        "dev",
    )
    assert r["failed"] == 0 and r["blocks"] == 17_000
    code, _, err = cli("eth", "export-era1", "--data", data, "--out", tmp_path / "era1")
    assert code == 0, err
    out = run(gethharness, "era1", "--dir", tmp_path / "era1", "--network", "dev")
    assert out["ok"], out
    assert all(f["accumulator_ok"] and f["name_ok"] and f["error"] is None for f in out["files"])
    geth = [
        {k: b[k] for k in ("number", "hash", "td", "txs", "uncles", "receipts")}
        for f in sorted(out["files"], key=lambda f: f["start"])
        for b in f["blocks"]
    ]
    assert _rechain_blocks(data) == geth
    imp = run(gethharness, "headerimport", "--era1", tmp_path / "era1", "--network", "dev")
    assert imp["headers"] == 16_999 and "0x" + imp["tip"] == r["tip_hash"]
