"""rechain's Ethereum tables against go-ethereum v1.17.10 at transaction, receipt and log level,
and go-ethereum's Ere (execdb) reader, history import and export (the `gethharness` oracle in
tests/geth, built as in test_geth_oracle).

`gethharness ... --detail` lists every block's transactions (hash, sender recovered by
go-ethereum, recipient, nonce, value, type, gas) and receipts (status or post-state root,
cumulative gas, gas used, logs); the tests compare the full lists with rechain's eth_transactions,
eth_receipts and eth_logs for the real era1 files, geth's own freezer and a generated one.

Ere: go-ethereum's own fixture (a synthetic one-block file without receipts), the Ere file
go-ethereum writes from the real Sepolia era1 file (its history import, then its export), and a
chain rechain generates across the merge (`rechain gen eth --format ere --network devmerge`),
read, imported and exported by both: geth's export is byte for byte rechain's files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.test_geth_oracle import (
    EPOCH,
    ERA1,
    ERA1_FACTS,
    FREEZER,
    HARNESS,
    SEPOLIA0,
    _build,
    _rechain_blocks,
    _rechain_import,
    run,
)

Rows = list[dict[str, Any]]

SEPOLIA_GENESIS = ERA1_FACTS[1][2]  # README: first hash of sepolia-00000-643a00f7.era1


@pytest.fixture(scope="session")
def gethharness() -> Path:
    return _build(HARNESS)


# --- flattening both sides to the same rows -------------------------------------------------


def geth_rows(blocks: Rows) -> dict[str, Rows]:
    """go-ethereum's --detail blocks as transaction, receipt and log rows (log_index counts
    through the block, as in eth_logs)."""
    txs: Rows = []
    receipts: Rows = []
    logs: Rows = []
    for b in blocks:
        n = b["number"]
        assert len(b["transactions"]) == b["txs"], n
        txs += [
            {"block_number": n, "transaction_index": i, **t}
            for i, t in enumerate(b["transactions"])
        ]
        details = b.get("receipt_details")
        if details is None:  # an Ere file without receipts
            assert b["receipts"] is None, n
            continue
        assert len(details) == b["receipts"] == b["txs"], n
        log_index = 0
        for i, r in enumerate(details):
            tx_hash = b["transactions"][i]["hash"]
            receipts.append(
                {
                    "block_number": n,
                    "transaction_index": i,
                    "transaction_hash": tx_hash,
                    "status": r["status"],
                    "post_state": r["post_state"],
                    "cumulative_gas": r["cumulative_gas"],
                    "gas_used": r["gas_used"],
                }
            )
            for log in r["logs"]:
                logs.append(
                    {
                        "block_number": n,
                        "transaction_index": i,
                        "transaction_hash": tx_hash,
                        "log_index": log_index,
                        "address": log["address"],
                        "topics": log["topics"],
                        "data": log["data"],
                    }
                )
                log_index += 1
    return {"transactions": txs, "receipts": receipts, "logs": logs}


def _query(data: Path, sql: str) -> Rows:
    from tests.conftest import cli

    code, out, err = cli("query", "--data", str(data), "--format", "json", sql)
    assert code == 0, err
    rows: Rows = json.loads(out)
    return rows


def rechain_rows(data: Path) -> dict[str, Rows]:
    """rechain's eth_transactions, eth_receipts and eth_logs as the same rows (0x dropped)."""
    txs = _query(
        data,
        "SELECT block_number, transaction_index, substr(hash, 3) AS hash, "
        'substr(from_address, 3) AS "from", substr(to_address, 3) AS "to", nonce, '
        "value::VARCHAR AS value, type, gas FROM eth_transactions "
        "ORDER BY block_number, transaction_index",
    )
    receipts = _query(
        data,
        "SELECT block_number, transaction_index, substr(transaction_hash, 3) AS transaction_hash,"
        " status, substr(post_state, 3) AS post_state, cumulative_gas_used AS cumulative_gas, "
        "gas_used FROM eth_receipts ORDER BY block_number, transaction_index",
    )
    raw_logs = _query(
        data,
        "SELECT block_number, transaction_index, substr(transaction_hash, 3) AS transaction_hash,"
        " log_index, substr(address, 3) AS address, substr(topic0, 3) AS t0, "
        "substr(topic1, 3) AS t1, substr(topic2, 3) AS t2, substr(topic3, 3) AS t3, n_topics, "
        "substr(data, 3) AS data FROM eth_logs ORDER BY block_number, log_index",
    )
    logs: Rows = []
    for r in raw_logs:
        slots = [r.pop(k) for k in ("t0", "t1", "t2", "t3")]
        topics = [t for t in slots if t is not None]
        # Topics fill the columns from topic0 on; n_topics counts them.
        assert slots[len(topics) :] == [None] * (4 - len(topics)), r
        assert r.pop("n_topics") == len(topics), r
        logs.append({**r, "topics": topics})
    return {"transactions": txs, "receipts": receipts, "logs": logs}


def assert_same_rows(ours: dict[str, Rows], geth: dict[str, Rows]) -> None:
    for table in ("transactions", "receipts", "logs"):
        mine, theirs = ours[table], geth[table]
        assert len(mine) == len(theirs), f"{table}: rechain has {len(mine)}, geth {len(theirs)}"
        for a, b in zip(mine, theirs, strict=True):
            assert a == b, f"{table}: rechain {a} != geth {b}"


def _link_files(names: list[str], src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        (dst / name).symlink_to(src / name)
    return dst


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ere_files(d: Path) -> Rows:
    """The .ere files of a folder as the harness's export lists them: name, size, SHA-256."""
    return [
        {"name": p.name, "size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(d.glob("*.ere"))
    ]


# --- era1 and freezers: rechain's rows equal go-ethereum's ----------------------------------


@pytest.mark.parametrize("network", ["mainnet", "sepolia"])
def test_era1_transactions_receipts_logs_agree_with_geth(
    gethharness: Path, network: str, tmp_path: Path
) -> None:
    """Every transaction (sender included), receipt and log of the real era1 files."""
    facts = [f for f in ERA1_FACTS if f[0].startswith(network + "-")]
    era = _link_files([f[0] for f in facts], ERA1, tmp_path / "era1")
    out = run(gethharness, "era1", "--dir", era, "--network", network, "--detail")
    assert out["ok"], [f["error"] for f in out["files"]]
    files = {f["file"]: f for f in out["files"]}
    for name, *_, txs, _acc in facts:
        assert files[name]["txs"] == txs  # README
    geth = geth_rows(
        [b for f in sorted(files.values(), key=lambda f: f["start"]) for b in f["blocks"]]
    )
    assert len(geth["transactions"]) == sum(f[5] for f in facts)
    if network == "sepolia":
        # README: sepolia-00021 holds typed transactions, with receipts.
        assert {t["type"] for t in geth["transactions"]} - {0}
        assert len(geth["receipts"]) == len(geth["transactions"])

    r = _rechain_import(era, tmp_path / "data", "--era1", str(era), "--network", network)
    assert r["failed"] == 0, r["verdicts"][:3]
    assert_same_rows(rechain_rows(tmp_path / "data"), geth)


def _gen_freezer(root: Path, blocks: int) -> Path:
    from tests.conftest import cli

    code, _, err = cli(
        "gen",
        "eth",
        str(root),
        "--blocks",
        str(blocks),
        "--format",
        "freezer",
        "--network",
        "dev",
        "--tx-per-block",
        "0:5",
    )
    assert code == 0, err
    return root / "ancient"


#: The transaction type of each kind the generator counts in expected.json's tx_kinds.
TYPE_OF_KIND = {
    "legacy": 0,
    "legacy_eip155": 0,
    "eip2930": 1,
    "eip1559": 2,
    "eip4844": 3,
}


def assert_generator_facts(geth: dict[str, Rows], expected: dict[str, Any]) -> None:
    """go-ethereum's rows against what the generator says it wrote (expected.json): counts of
    transactions, of each type, of logs; every sender go-ethereum recovers is one of its keys."""
    txs = geth["transactions"]
    assert expected["transactions"] > 0 and expected["logs"] > 0  # nothing compared vacuously
    assert len(txs) == len(geth["receipts"]) == expected["transactions"]
    assert len(geth["logs"]) == expected["logs"]
    kinds = expected["tx_kinds"]
    assert set(kinds) <= set(TYPE_OF_KIND), (
        f"new transaction kinds: {set(kinds) - set(TYPE_OF_KIND)}"
    )
    by_type: dict[int, int] = {}
    for kind, n in kinds.items():
        by_type[TYPE_OF_KIND[kind]] = by_type.get(TYPE_OF_KIND[kind], 0) + n
    assert {t: n for t, n in by_type.items() if n} == {
        t: sum(1 for x in txs if x["type"] == t) for t in {x["type"] for x in txs}
    }
    assert {t["from"] for t in txs} <= set(expected["senders"])


def test_generated_freezer_rows_agree_with_geth(gethharness: Path, tmp_path: Path) -> None:
    """A generated freezer (legacy with and without chain id, access-list and dynamic-fee
    transactions, logs): go-ethereum's reading of every transaction, receipt and log is what
    the generator wrote and what rechain imported."""
    ancient = _gen_freezer(tmp_path / "g", 300)
    expected = json.loads((tmp_path / "g" / "expected.json").read_text())
    out = run(gethharness, "freezer", "--dir", ancient, "--detail")
    assert out["ok"] and out["errors"] == 0 and out["ancients"] == 300
    geth = geth_rows(out["blocks"])
    assert_generator_facts(geth, expected)

    r = _rechain_import(ancient, tmp_path / "data", "--freezer", str(ancient), "--network", "dev")
    assert r["failed"] == 0 and r["blocks"] == 300
    assert_same_rows(rechain_rows(tmp_path / "data"), geth)


def test_geth_freezer_rows_agree_with_geth(gethharness: Path, tmp_path: Path) -> None:
    """geth's own freezer (6 blocks without transactions): no rows on either side."""
    out = run(gethharness, "freezer", "--dir", FREEZER, "--detail")
    assert out["ok"]
    assert [(b["transactions"], b["receipt_details"]) for b in out["blocks"]] == [([], [])] * 6
    _rechain_import(FREEZER, tmp_path / "data", "--freezer", str(FREEZER))
    assert_same_rows(rechain_rows(tmp_path / "data"), geth_rows(out["blocks"]))


# --- Ere: go-ethereum's reader, import and export --------------------------------------------


def _geth_module_dir() -> Path:
    """go-ethereum's module as the harness build fetched it (the Go module cache)."""
    go = shutil.which("go")
    from tests.conftest import GO_FALLBACK

    proc = subprocess.run(
        [go or str(GO_FALLBACK), "list", "-m", "-f", "{{.Dir}}", "github.com/ethereum/go-ethereum"],
        cwd=HARNESS,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


@pytest.fixture(scope="module")
def geth_ere_fixture(gethharness: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    name = "sepolia-00000-deadbeef-noreceipts.ere"
    src = _geth_module_dir() / "core" / "rawdb" / "eradb" / "testdata" / "noreceipts" / name
    d = tmp_path_factory.mktemp("geth-ere")
    shutil.copyfile(src, d / name)  # the module cache is read-only
    return d / name


def test_ere_read_geths_noreceipts_fixture(gethharness: Path, geth_ere_fixture: Path) -> None:
    """go-ethereum's own Ere fixture: one synthetic block, header, body and TD components, no
    receipts, no accumulator. execdb reads it; its header's transaction root is zero, which the
    checks of `era verify` refuse."""
    # Spec 2.8: the file ends with the DynamicBlockIndex record (type 67 32), whose value is
    # start | offsets (count x components) | components | count, all u64 LE.
    data = geth_ere_fixture.read_bytes()
    components = int.from_bytes(data[-16:-8], "little")
    count = int.from_bytes(data[-8:], "little")
    words = 3 + count * components
    value = data[-8 * words :]
    assert data[-8 * words - 8 : -8 * words - 6] == bytes([0x67, 0x32])
    assert int.from_bytes(data[-8 * words - 6 : -8 * words - 2], "little") == len(value)
    start = int.from_bytes(value[:8], "little")
    out = run(
        gethharness, "ere", "--dir", geth_ere_fixture.parent, "--network", "sepolia", "--detail"
    )
    assert not out["ok"] and out["mode"] == "read"
    [f] = out["files"]
    assert f["file"] == geth_ere_fixture.name
    assert (f["components"], f["count"]) == (components, count) == (3, 1)
    assert (f["start"], f["epoch"], f["blocks_read"]) == (start, 0, 1)
    assert not f["has_receipts"] and f["has_td"]
    assert f["receipts"] is None and f["pre_merge_blocks"] == 1
    assert f["accumulator"] is f["accumulator_computed"] is f["accumulator_ok"] is None
    # Not execdb.Filename's: the hash part is not the block's and the profile is noreceipts.
    assert not f["name_ok"] and not f["file"].startswith(f"sepolia-00000-{f['last_hash'][:8]}")
    [b] = f["blocks"]
    assert b["number"] == 0 and b["hash"] == f["first_hash"] == f["last_hash"]
    assert b["receipts"] is None and "receipt_details" not in b and b["transactions"] == []
    assert int(b["td"]) == int(f["final_td"]) and int(f["initial_td"]) == 0
    assert f["error"].startswith(
        f"{f['file']}: block 0: tx root mismatch: header {'00' * 32}, computed "
    )

    # geth's history import skips block 0: the database keeps Sepolia's genesis.
    imp = run(
        gethharness,
        "ere",
        "--dir",
        geth_ere_fixture.parent,
        "--network",
        "sepolia",
        "--mode",
        "import",
    )
    assert "import_error" not in imp and imp["head"] == 0
    [g] = imp["files"]
    assert not g["imported"]
    assert g["error"] == (
        f"{f['file']}: block 0: the database holds {SEPOLIA_GENESIS}, the file {b['hash']}"
    )


def test_ere_import_refuses_mixed_formats(
    gethharness: Path, geth_ere_fixture: Path, tmp_path: Path
) -> None:
    """geth's era.ReadDir refuses a directory holding .era1 and .ere files of one network."""
    (tmp_path / SEPOLIA0).symlink_to(ERA1 / SEPOLIA0)
    ere = "sepolia-00001-deadbeef-noreceipts.ere"
    shutil.copyfile(geth_ere_fixture, tmp_path / ere)
    out = run(gethharness, "ere", "--dir", tmp_path, "--network", "sepolia", "--mode", "import")
    assert not out["ok"]
    assert out["import_error"].endswith("contains mixed era file formats: want .era1, have .ere")
    [f] = out["files"]
    assert f["file"] == ere and not f["imported"]
    assert f["error"].endswith(f"(the import failed: {out['import_error']})")


@pytest.fixture(scope="module")
def sepolia0_ere(gethharness: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """go-ethereum converts sepolia-00000 from era1 to Ere: its history import, then its export
    with the Ere builder (geth import-history, geth export-history --era.format ere)."""
    root = tmp_path_factory.mktemp("sepolia0-ere")
    era = _link_files([SEPOLIA0], ERA1, root / "era1")
    outs = {}
    for via in ("history", "loop"):
        out = run(
            gethharness,
            "era1",
            "--dir",
            era,
            "--mode",
            "import",
            "--blocks=false",
            "--export-ere",
            root / via,
            "--export-via",
            via,
        )
        assert out["ok"] and out["network"] == "sepolia"
        outs[via] = out["export"]
    return {"root": root, **outs}


def test_ere_export_after_history_import(sepolia0_ere: dict[str, Any]) -> None:
    """utils.ExportHistory lowers the last block to the chain's current block, which a history
    import leaves at genesis: it writes block 0 only. Its loop without that step writes the
    epoch, named after its last hash (README) with -noproofs."""
    hist, loop = sepolia0_ere["history"], sepolia0_ere["loop"]
    for x in (hist, loop):
        assert x["error"] is None and (x["first"], x["last"], x["head_block"]) == (0, EPOCH - 1, 0)
    assert hist["effective_last"] == 0
    [one] = hist["files"]
    assert one["name"] == f"sepolia-00000-{SEPOLIA_GENESIS[:8]}-noproofs.ere"
    assert loop["effective_last"] == EPOCH - 1
    [full] = loop["files"]
    last_hash = ERA1_FACTS[1][3]
    assert full["name"] == f"sepolia-00000-{last_hash[:8]}-noproofs.ere"
    for x in (hist, loop):
        [f] = x["files"]
        path = Path(x["dir"]) / f["name"]
        assert (f["size"], f["sha256"]) == (path.stat().st_size, _sha256(path))
        assert x["checksums"] == ["0x" + f["sha256"]]


def test_ere_read_of_geths_export_equals_era1(
    gethharness: Path, sepolia0_ere: dict[str, Any]
) -> None:
    """go-ethereum's Ere file of Sepolia's first epoch, read with execdb: the blocks, TDs and
    accumulator of the era1 file (README), receipts and TD components."""
    acc = ERA1_FACTS[1][6]
    ere_dir = Path(sepolia0_ere["loop"]["dir"])
    out = run(gethharness, "ere", "--dir", ere_dir, "--network", "sepolia")
    assert out["ok"]
    [f] = out["files"]
    assert f["error"] is None and f["name_ok"]
    assert (f["start"], f["count"], f["blocks_read"], f["pre_merge_blocks"]) == (
        0,
        EPOCH,
        EPOCH,
        EPOCH,
    )
    assert (f["components"], f["has_receipts"], f["has_td"]) == (4, True, True)
    assert f["accumulator"] == f["accumulator_computed"] == acc and f["accumulator_ok"]
    assert (f["first_hash"], f["last_hash"], int(f["final_td"])) == ERA1_FACTS[1][2:5]
    assert f["initial_td"] == "0"
    era1 = run(gethharness, "era1", "--dir", ERA1, "--network", "sepolia")
    [e] = [x for x in era1["files"] if x["file"] == SEPOLIA0]
    assert [
        (b["number"], b["hash"], b["td"], b["txs"], b["uncles"], b["receipts"]) for b in f["blocks"]
    ] == [
        (b["number"], b["hash"], b["td"], b["txs"], b["uncles"], b["receipts"]) for b in e["blocks"]
    ]
    assert all(b["withdrawals"] == 0 for b in f["blocks"])


def test_ere_import_and_export_round_trip(
    gethharness: Path, sepolia0_ere: dict[str, Any], tmp_path: Path
) -> None:
    """geth imports its own Ere file (execdb.From) and exports it again byte for byte."""
    ere_dir = Path(sepolia0_ere["loop"]["dir"])
    [written] = sepolia0_ere["loop"]["files"]
    out = run(
        gethharness,
        "ere",
        "--dir",
        ere_dir,
        "--network",
        "sepolia",
        "--mode",
        "import",
        "--export",
        tmp_path / "again",
        "--export-via",
        "loop",
    )
    assert out["ok"] and out["head"] == EPOCH - 1
    [f] = out["files"]
    assert f["imported"] and f["error"] is None and f["accumulator_ok"]
    assert (f["first_hash"], f["last_hash"], int(f["final_td"])) == ERA1_FACTS[1][2:5]
    assert out["export"]["files"] == [written]
    assert _sha256(tmp_path / "again" / written["name"]) == written["sha256"]


# --- Ere: rechain's generated chain across the merge, with go-ethereum -------------------------


@pytest.fixture(scope="module")
def devmerge(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A generated 20,000-block chain across the merge as Ere files, imported by rechain."""
    from tests.conftest import cli

    root = tmp_path_factory.mktemp("devmerge")
    out = root / "gen"
    code, _, err = cli(
        "gen",
        "eth",
        str(out),
        "--format",
        "ere",
        "--network",
        "devmerge",
        "--blocks",
        "20000",
        "--tx-per-block",
        "0:3",
    )
    assert code == 0, err
    data = root / "data"
    r = _rechain_import(out / "ere", data, "--ere", str(out / "ere"), "--network", "devmerge")
    assert r["failed"] == 0, r["verdicts"][:3]
    return {"ere": out / "ere", "genesis": out / "genesis.json", "data": data, "root": root}


def test_generated_ere_read_by_geth_agrees_with_rechain(
    gethharness: Path, devmerge: dict[str, Path]
) -> None:
    """go-ethereum's Ere reader on rechain's files: every check passes; the files follow the
    merge (TDs and accumulator while there are pre-merge blocks, none after); blocks,
    transactions, receipts and logs equal rechain's tables."""
    out = run(gethharness, "ere", "--dir", devmerge["ere"], "--network", "devmerge", "--detail")
    assert out["ok"], [f["error"] for f in out["files"]]
    files = sorted(out["files"], key=lambda f: f["start"])
    assert len(files) == -(-20_000 // EPOCH)
    assert [f["start"] for f in files] == [i * EPOCH for i in range(len(files))]
    merged = False
    for f in files:
        assert f["name_ok"] and f["has_receipts"] and f["components"] == 3 + f["has_td"]
        assert f["has_td"] == (f["pre_merge_blocks"] > 0) == (f["accumulator"] is not None)
        if f["accumulator"] is not None:
            assert f["accumulator_ok"]
        assert not (merged and f["pre_merge_blocks"]), "a pre-merge block after the merge"
        merged = merged or f["pre_merge_blocks"] < f["count"]
    assert merged and files[0]["pre_merge_blocks"] == files[0]["count"]
    assert any(0 < f["pre_merge_blocks"] < f["count"] for f in files)  # a transition epoch
    blocks = [b for f in files for b in f["blocks"]]
    assert [b["number"] for b in blocks] == list(range(20_000))

    expected = json.loads((devmerge["ere"].parent / "expected.json").read_text())
    assert (blocks[0]["hash"], blocks[-1]["hash"]) == (
        expected["genesis_hash"],
        expected["tip_hash"],
    )
    assert sum(f["count"] - f["pre_merge_blocks"] for f in files) == expected["pos_blocks"]
    assert sum(f["withdrawals"] for f in files) == expected["withdrawals"]

    ours = _rechain_blocks(devmerge["data"])
    assert [(b["number"], b["hash"], b["txs"], b["uncles"], b["receipts"]) for b in ours] == [
        (b["number"], b["hash"], b["txs"], b["uncles"], b["receipts"]) for b in blocks
    ]
    geth = geth_rows(blocks)
    assert_generator_facts(geth, expected)
    assert_same_rows(rechain_rows(devmerge["data"]), geth)


def test_generated_ere_imported_and_exported_by_geth(
    gethharness: Path, devmerge: dict[str, Path]
) -> None:
    """geth imports rechain's Ere files with rechain's genesis.json: the same hashes, TDs
    (summed difficulties) and receipts as rechain's tables; geth's Ere export of the chain is
    byte for byte the generated files and rechain's export-ere."""
    from tests.conftest import cli

    root = devmerge["root"]
    out = run(
        gethharness,
        "ere",
        "--dir",
        devmerge["ere"],
        "--network",
        "devmerge",
        "--mode",
        "import",
        "--genesis",
        devmerge["genesis"],
        "--detail",
        "--export",
        root / "geth-export",
        "--export-via",
        "loop",
    )
    assert out["ok"], (out.get("import_error"), [f["error"] for f in out["files"]])
    assert out["head"] == 19_999 and all(f["imported"] for f in out["files"])
    blocks = [b for f in sorted(out["files"], key=lambda f: f["start"]) for b in f["blocks"]]
    ours = _rechain_blocks(devmerge["data"])
    assert [(b["number"], b["hash"], b["td"], b["txs"], b["receipts"]) for b in ours] == [
        (b["number"], b["hash"], b["td"], b["txs"], b["receipts"]) for b in blocks
    ]
    expected = json.loads((devmerge["ere"].parent / "expected.json").read_text())
    assert blocks[-1]["td"] == expected["final_td"]
    assert_same_rows(rechain_rows(devmerge["data"]), geth_rows(blocks))

    generated = _ere_files(devmerge["ere"])
    exported = out["export"]
    assert exported["error"] is None and exported["effective_last"] == 19_999
    assert exported["files"] == generated

    code, _, err = cli(
        "eth", "export-ere", "--data", str(devmerge["data"]), "--out", str(root / "ours")
    )
    assert code == 0, err
    assert _ere_files(root / "ours") == generated
