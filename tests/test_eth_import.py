"""``rechain eth import`` on the real files in shared/data/ethereum (facts from its README):
era1 archives of mainnet and Sepolia, geth's own freezer tables; damaged copies of them; reruns
that do only what changed; kill -9 at the commit points."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, verify

from tests.conftest import SHARED, cli, cli_json

ETH = SHARED / "data" / "ethereum"
ERA1 = ETH / "era1"
SEPOLIA_0 = "sepolia-00000-643a00f7.era1"
SEPOLIA_21 = "sepolia-00021-b8814b14.era1"
MAINNET_3 = "mainnet-00003-d8b8a40b.era1"


def folder_with(tmp: Path, *names: str) -> Path:
    era = tmp / "era1"
    era.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy2(ERA1 / n, era / n)
    return era


def eth_import(source: Path, data: Path, *extra: str, kind: str = "--era1") -> dict[str, Any]:
    code, out, err = cli(
        "eth", "import", kind, source, "--data", data, "--no-progress", "--json", *extra
    )
    assert code in (0, 1), err
    result: dict[str, Any] = json.loads(out)
    assert (code == 0) == (result["failed"] == 0), result["verdicts"][:5]
    return result


def query(data: Path, sql: str) -> list[tuple[Any, ...]]:
    code, out, err = cli("query", "--data", data, "--format", "json", sql)
    assert code == 0, err
    return [tuple(r.values()) for r in json.loads(out)]


def block_offset(path: Path, number: int) -> int:
    """File offset of a block's CompressedHeader record, from the era1 BlockIndex (spec 2.3)."""
    raw = path.read_bytes()
    (count,) = struct.unpack("<Q", raw[-8:])
    index = len(raw) - 24 - 8 * count
    (start,) = struct.unpack("<Q", raw[index + 8 : index + 16])
    at = index + 16 + 8 * (number - start)
    (rel,) = struct.unpack("<q", raw[at : at + 8])
    return index + rel


def test_sepolia_files_match_their_known_facts(tmp_path: Path) -> None:
    era = folder_with(tmp_path, SEPOLIA_0, SEPOLIA_21)
    data = tmp_path / "data"
    r = eth_import(era, data, "--network", "sepolia", "--no-pow")
    assert r["failed"] == 0 and r["skipped"] == []
    assert r["blocks"] == 16_384 and r["units"] == 2
    assert r["first_block"] == 0 and r["last_block"] == 180_223
    assert r["tip_hash"] == "0xaf105ff107f4d9b48bc205c3001ee33938b1b6f3b2ef04da0064ae63ecb1d80a"
    assert r["total_difficulty"] == "74457974918680"
    assert r["gaps"] == [[8192, 172_031]]
    assert r["counts"]["eth_transactions"] == 93 and r["counts"]["eth_receipts"] == 93
    assert r["checks"]["accumulators"] == 2 and r["checks"]["headers"] == 16_384
    rows = query(
        data,
        "SELECT number, hash, total_difficulty FROM eth_blocks "
        "WHERE number IN (0, 8191, 172032, 180223) ORDER BY number",
    )
    assert rows == [
        (0, "0x25a5cc106eea7138acab33231d7160d69cb777ee0c2c553fcddf5138993e6dd9", 131072),
        (8191, "0x8e3e7dc9ef199c05683417b4aa572f0b7a8bcfafca7edb6045baabc01aa4fb0c", 14255663800),
        (172032, "0xeb20db3e285c22f189aae88e1044aed08997b35675cfb5db3e60fe8a0daee218",
         rows[2][2]),
        (180223, "0xaf105ff107f4d9b48bc205c3001ee33938b1b6f3b2ef04da0064ae63ecb1d80a",
         74457974918680),
    ]  # fmt: skip
    # Every transaction's sender recovered, gas used and status from its receipt, and the
    # receipts' gas adds up to the blocks'.
    (txs, senders, typed, status_ok) = query(
        data,
        "SELECT count(*), count(from_address), count(*) FILTER (WHERE type > 0), "
        "count(*) FILTER (WHERE status = 1) FROM eth_transactions",
    )[0]
    assert (txs, senders) == (93, 93) and typed > 0 and status_ok > 0
    assert r["unrecovered_senders"] == 0
    bad = query(
        data,
        "SELECT count(*) FROM eth_blocks b JOIN (SELECT block_number, sum(gas_used) AS g "
        "FROM eth_transactions GROUP BY 1) t ON t.block_number = b.number WHERE t.g <> b.gas_used",
    )[0][0]
    assert bad == 0
    v = verify(data)
    assert v["ok"], v["problems"]
    assert v["eth_blocks"] == 16_384


def test_mainnet_epoch_with_proof_of_work(tmp_path: Path) -> None:
    """The mainnet file (Frontier) checked with ethash, on a slice to keep the test short (the
    accumulator still covers the whole file); its hashes and TD against the README."""
    era = folder_with(tmp_path, MAINNET_3)
    data = tmp_path / "data"
    r = eth_import(era, data, "--from", "32700")
    assert r["failed"] == 0
    assert r["checks"]["pow"] == 68 and r["checks"]["accumulators"] == 1
    assert r["tip_hash"] == "0x14c8639dfc32812ed20839f5a11993cd59b22e5226cb2179640ba5c1f0c08f87"
    assert r["total_difficulty"] == "24713480918711655"
    assert r["first_block"] == 32700


def e2store_records(raw: bytes) -> list[tuple[int, int]]:
    """(start, end) of each e2store record of a file, walked from the format (spec 2.1: type[2]
    | length u32 LE | reserved u16 | value), the records tiling the file."""
    records, at = [], 0
    while at < len(raw):
        (length,) = struct.unpack("<I", raw[at + 2 : at + 6])
        records.append((at, at + 8 + length))
        at += 8 + length
    assert at == len(raw)
    return records


def test_damaged_era1_files_give_verdicts_and_keep_good_blocks(tmp_path: Path) -> None:
    era = folder_with(tmp_path, SEPOLIA_0, SEPOLIA_21)
    # A flipped byte inside block 100's compressed header: its snappy chunk CRC fails.
    path = era / SEPOLIA_0
    raw = bytearray(path.read_bytes())
    at = block_offset(path, 100) + 8 + 10 + 8 + 5
    raw[at] ^= 0x40
    path.write_bytes(bytes(raw))
    data = tmp_path / "data"
    r = eth_import(era, data, "--network", "sepolia", "--no-pow")
    assert r["blocks"] == 16_383
    rules = r["failed_by_rule"]
    assert rules.get("decode") == 1, r["verdicts"]
    decode = next(v for v in r["verdicts"] if v["rule"] == "decode")
    assert decode["block"] == 100 and decode["source"] == SEPOLIA_0.removesuffix(".era1")
    # The detail names the file and the offset of the damaged chunk: the record's 8-byte
    # e2store header, then the snappy frame's stream identifier (4-byte chunk header and
    # "sNaPpY"), then its first compressed chunk, the one holding the flipped byte
    # (ethereum-history.md: e2store, snappy framing).
    chunk = block_offset(path, 100) + 8 + 10
    assert at < chunk + 4 + 4 + (raw[chunk + 1] | raw[chunk + 2] << 8 | raw[chunk + 3] << 16)
    assert "checksum mismatch" in decode["detail"] and SEPOLIA_0 in decode["detail"], decode
    assert re.search(rf"\boffset {chunk}\b", decode["detail"]), (chunk, decode)
    # The accumulator needs every block: it no longer matches its record or name.
    assert rules.get("accumulator_record") == 1 and rules.get("accumulator_name") == 1
    assert query(data, "SELECT count(*) FROM eth_blocks WHERE number BETWEEN 0 AND 8191") == [
        (8191,)
    ]
    # A truncated file is skipped whole (its layout cannot be read), the others are kept.
    cut = len(raw) // 2
    path.write_bytes(bytes(raw[:cut]))
    r = eth_import(era, data, "--network", "sepolia", "--no-pow")
    [skip] = r["skipped"]
    assert skip["source"] == SEPOLIA_0.removesuffix(".era1") and skip["reason"] == "unreadable"
    # Named at the e2store record the cut falls in, its value running past the new end.
    start, end = next((s, e) for s, e in e2store_records(bytes(raw)) if s < cut < e)
    want = rf"^{re.escape(str(path))}: offset {start}: truncated e2store record value: need "
    want += rf"{end - start - 8} bytes, have {cut - start - 8}$"
    assert re.search(want, skip["detail"]), (start, skip)
    assert r["blocks"] == 8192 and r["first_block"] == 172_032
    assert query(data, "SELECT count(*) FROM eth_blocks") == [(8192,)]
    assert verify(data)["ok"]


def test_file_name_must_match_the_accumulator(tmp_path: Path) -> None:
    era = tmp_path / "era1"
    era.mkdir()
    shutil.copy2(ERA1 / SEPOLIA_21, era / "sepolia-00021-00000000.era1")
    r = eth_import(era, tmp_path / "data", "--network", "sepolia", "--no-pow")
    assert r["failed_by_rule"] == {"accumulator_name": 1}
    assert r["blocks"] == 8192


def test_rerun_does_only_what_changed(tmp_path: Path) -> None:
    era = folder_with(tmp_path, SEPOLIA_21)
    data = tmp_path / "data"
    first = eth_import(era, data, "--network", "sepolia", "--no-pow")
    assert first["run"]["units"] == 1
    again = eth_import(era, data, "--network", "sepolia", "--no-pow")
    assert again["run"]["stages_run"] == [] and again["run"]["units"] == 0
    folder_with(tmp_path, SEPOLIA_0)  # a new file: only it is read
    grown = eth_import(era, data, "--network", "sepolia", "--no-pow")
    assert grown["run"]["units"] == 1 and grown["blocks"] == 16_384
    fresh = tmp_path / "fresh"
    eth_import(era, fresh, "--network", "sepolia", "--no-pow")
    with DataDir(data, readonly=True) as a, DataDir(fresh, readonly=True) as b:
        assert digest(a)["content"] == digest(b)["content"]
    # A file removed from the folder is dropped from the tables and the index.
    (era / SEPOLIA_0).unlink()
    shrunk = eth_import(era, data, "--network", "sepolia", "--no-pow")
    assert shrunk["blocks"] == 8192 and shrunk["first_block"] == 172_032
    assert verify(data)["ok"]
    # Another chain in the same data folder is refused.
    code, _, err = cli(
        "eth", "import", "--era1", ERA1, "--data", data, "--network", "mainnet", "--no-progress"
    )
    assert code == 2 and "mainnet" in err


def test_geth_freezer_fixture(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, out, err = cli(
        "eth",
        "import",
        "--freezer",
        ETH / "geth-freezer-devchain",
        "--data",
        data,
        "--no-progress",
        "--json",
        "--no-pow",
    )
    r = json.loads(out)
    assert r["blocks"] == 6 and r["first_block"] == 0 and r["last_block"] == 5
    # geth's hashes table and the index agree with the hashes of the header bytes read.
    assert "hash" not in r["failed_by_rule"]
    rows = query(data, "SELECT number, total_difficulty FROM eth_blocks ORDER BY number")
    assert [n for n, _ in rows] == list(range(6))
    assert rows[0][1] == 1  # the dev genesis has difficulty 1


def _import_cmd(era: Path, data: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rechain.pipeline.cli",
        "eth",
        "import",
        "--era1",
        str(era),
        "--data",
        str(data),
        "--network",
        "sepolia",
        "--no-pow",
        "--no-progress",
        "--workers",
        "1",
    ]


@pytest.mark.parametrize(
    "point", ["eth.parts_renamed:1", "eth.index_ingested:1", "eth.unit_committed:1"]
)
def test_kill_at_commit_points_then_resume(tmp_path: Path, point: str) -> None:
    era = folder_with(tmp_path, SEPOLIA_0, SEPOLIA_21)
    ref = tmp_path / "ref"
    assert subprocess.run(_import_cmd(era, ref), capture_output=True).returncode == 0
    data = tmp_path / "data"
    env = {**os.environ, "RECHAIN_KILL_AT": point}
    killed = subprocess.run(_import_cmd(era, data), capture_output=True, env=env)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    resumed = subprocess.run(_import_cmd(era, data), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert verify(data)["ok"]
    with DataDir(data, readonly=True) as a, DataDir(ref, readonly=True) as b:
        assert digest(a)["content"] == digest(b)["content"]
    assert not list((data / "parquet").rglob("*.tmp"))
    parts = sorted(p.name for p in (data / "parquet" / "eth_blocks").rglob("*.parquet"))
    assert parts == [
        SEPOLIA_0.removesuffix(".era1") + ".parquet",
        SEPOLIA_21.removesuffix(".era1") + ".parquet",
    ]
    assert pq.read_table(data / "parquet" / "eth_blocks").num_rows == 16_384


def test_status_and_stages(tmp_path: Path) -> None:
    era = folder_with(tmp_path, SEPOLIA_21)
    data = tmp_path / "data"
    eth_import(era, data, "--network", "sepolia", "--no-pow")
    st = cli_json("eth", "status", "--data", data, "--json")
    for key in (
        "network",
        "first_block",
        "last_block",
        "tip_hash",
        "total_difficulty",
        "blocks",
        "counts",
        "checks",
        "failed",
        "skipped",
    ):
        assert key in st, key
    assert st["network"] == "sepolia" and st["blocks"] == 8192
    stages = cli_json("stages", "--data", data, "--json")
    assert [s["stage"] for s in stages["pipelines"]["eth"]] == ["blocks", "links"], stages


def test_readme_queries(tmp_path: Path) -> None:
    """The README's Ethereum example queries, verbatim, on a real Sepolia file."""
    era = folder_with(tmp_path, SEPOLIA_21)
    data = tmp_path / "data"
    eth_import(era, data, "--network", "sepolia", "--no-pow")
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    examples = readme.split("Ethereum (`rechain eth import`):\n", 1)[1].split("\n```\n", 1)[0]
    sqls = [
        line.split('"', 1)[1].rsplit('"', 1)[0].replace('\\"', '"')
        for line in examples.splitlines()
        if line.startswith("$R query --data DATA ")
    ]
    assert len(sqls) == 5
    per_day, senders, transfers, invalid, eras = (query(data, q) for q in sqls)
    assert sum(r[1] for r in per_day) == 8192 and sum(r[2] for r in per_day) == 93
    assert senders and all(r[0].startswith("0x") and r[2] >= 0 for r in senders)
    assert isinstance(transfers, list)
    assert invalid == []
    # Before the merge: one era (the query across it runs in test_eth_ere).
    assert [(r[0], r[1], r[2]) for r in eras] == [("pow", 8192, 172_032)]


def gen_eth(out: Path, blocks: int, fmt: str, *extra: str) -> dict[str, Any]:
    code, _, err = cli(
        "gen", "eth", out, "--blocks", str(blocks), "--format", fmt, "--network", "dev", *extra
    )
    assert code == 0, err
    facts: dict[str, Any] = json.loads((out / "expected.json").read_text())
    return facts


def test_generated_freezer_grows_and_gets_its_tds_from_genesis(tmp_path: Path) -> None:
    """A current-layout freezer has no TD table: TDs are summed from genesis across units. The
    freezer then grows (the same chain, longer): only the last unit and the new ones run, and
    the result equals a fresh import."""
    small = gen_eth(tmp_path / "small", 10_000, "freezer", "--tx-per-block", "0:4", "--seed", "5")
    big = gen_eth(tmp_path / "big", 20_000, "freezer", "--tx-per-block", "0:4", "--seed", "5")
    node = tmp_path / "node"
    shutil.copytree(tmp_path / "small" / "ancient", node)
    data = tmp_path / "data"
    r = eth_import(node, data, "--network", "dev", "--no-pow", kind="--freezer")
    assert r["failed"] == 0 and r["blocks"] == 10_000
    assert r["total_difficulty"] == small["final_td"]
    assert r["tip_hash"] == "0x" + small["tip_hash"]
    assert r["counts"]["eth_transactions"] == small["transactions"]
    shutil.rmtree(node)
    shutil.copytree(tmp_path / "big" / "ancient", node)
    grown = eth_import(node, data, "--network", "dev", "--no-pow", kind="--freezer")
    assert grown["failed"] == 0 and grown["blocks"] == 20_000
    assert grown["run"]["units"] == 2  # 8192..16383 (was 8192..9999) and 16384..19999
    assert grown["checks"]["links"] == 2
    assert grown["total_difficulty"] == big["final_td"]
    fresh = tmp_path / "fresh"
    eth_import(node, fresh, "--network", "dev", "--no-pow", kind="--freezer")
    assert verify(data)["ok"]
    with DataDir(data, readonly=True) as a, DataDir(fresh, readonly=True) as b:
        assert digest(a)["content"] == digest(b)["content"]


def test_generated_era1_links_and_a_broken_link(tmp_path: Path) -> None:
    """Three generated era1 files: the links between them are checked. A file of another
    chain in the middle breaks the link to it (reported, its blocks kept)."""
    facts = gen_eth(tmp_path / "a", 20_000, "era1", "--tx-per-block", "0:3")
    other = gen_eth(tmp_path / "b", 16_384, "era1", "--tx-per-block", "0:3", "--seed", "9")
    era = tmp_path / "a" / "era1"
    r = eth_import(era, tmp_path / "data", "--network", "dev", "--no-pow")
    assert r["failed"] == 0 and r["checks"]["links"] == 2 and r["checks"]["accumulators"] == 3
    assert r["tip_hash"] == "0x" + facts["tip_hash"]
    # Epoch 1 of another chain: its first block's parent is not epoch 0's last block.
    middle = Path(facts["files"][1]["path"]).name
    (era / middle).unlink()
    theirs = tmp_path / "b" / other["files"][1]["path"]
    shutil.copy2(theirs, era / theirs.name)
    bad = eth_import(era, tmp_path / "data", "--network", "dev", "--no-pow")
    assert bad["blocks"] == 20_000 and bad["run"]["units"] == 1
    assert bad["failed_by_rule"].get("parent_hash") == 2, bad["verdicts"]
    assert {v["block"] for v in bad["verdicts"]} == {8192, 16384}
    assert verify(tmp_path / "data")["ok"]


KILL_POINTS = ["eth.parts_renamed", "eth.index_ingested", "eth.unit_committed"]


@pytest.mark.parametrize("seed", [1, 2])
def test_kill_at_random_commit_points_then_resume(tmp_path: Path, seed: int) -> None:
    import random

    rng = random.Random(seed)
    facts = gen_eth(tmp_path / "g", 40_000, "era1", "--tx-per-block", "0:2")
    era = tmp_path / "g" / "era1"
    assert len(facts["files"]) == 5

    def cmd(data: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rechain.pipeline.cli",
            "eth",
            "import",
            "--era1",
            str(era),
            "--data",
            str(data),
            "--network",
            "dev",
            "--no-pow",
            "--no-progress",
        ]

    ref = tmp_path / "ref"
    assert subprocess.run(cmd(ref), capture_output=True).returncode == 0
    data = tmp_path / "data"
    kills = 0
    for _ in range(4):
        point = f"{rng.choice(KILL_POINTS)}:{rng.randint(1, 2)}"
        env = {**os.environ, "RECHAIN_KILL_AT": point}
        proc = subprocess.run(cmd(data), capture_output=True, env=env)
        if proc.returncode == 0:
            break
        assert proc.returncode == -9, proc.stderr.decode()[-2000:]
        kills += 1
    assert kills >= 1
    final = subprocess.run(cmd(data), capture_output=True, text=True)
    assert final.returncode == 0, final.stderr[-2000:]
    assert verify(data)["ok"]
    with DataDir(data, readonly=True) as a, DataDir(ref, readonly=True) as b:
        assert digest(a)["content"] == digest(b)["content"]


def test_export_era1_gives_the_real_files_back(tmp_path: Path) -> None:
    era = folder_with(tmp_path, SEPOLIA_0, SEPOLIA_21)
    data = tmp_path / "data"
    eth_import(era, data, "--network", "sepolia", "--no-pow")
    out = cli_json("eth", "export-era1", "--data", data, "--out", tmp_path / "out", "--json")
    assert out["blocks"] == 16_384 and len(out["files"]) == 2
    for name in (SEPOLIA_0, SEPOLIA_21):
        assert (tmp_path / "out" / name).read_bytes() == (ERA1 / name).read_bytes(), name
    code, _, err = cli("eth", "export-era1", "--data", data, "--out", tmp_path / "x", "--from", "5")
    assert code == 2 and "multiple of 8192" in err


def test_export_era1_from_a_freezer_equals_the_chains_era1_files(tmp_path: Path) -> None:
    """A generated chain written both ways: the freezer imported and exported gives the era1
    files of the same chain byte for byte (receipts rebuilt in consensus form, TDs summed)."""
    era1 = gen_eth(tmp_path / "e", 20_000, "era1", "--tx-per-block", "0:6", "--seed", "4")
    gen_eth(tmp_path / "f", 20_000, "freezer", "--tx-per-block", "0:6", "--seed", "4")
    data = tmp_path / "data"
    eth_import(tmp_path / "f" / "ancient", data, "--network", "dev", "--no-pow", kind="--freezer")
    out = cli_json("eth", "export-era1", "--data", data, "--out", tmp_path / "out", "--json")
    assert [f["accumulator"] for f in out["files"]] == [
        "0x" + f["accumulator"] for f in era1["files"]
    ]
    for f in era1["files"]:
        name = Path(f["path"]).name
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "e" / f["path"]).read_bytes()
    # A slice from an epoch on, its TD taken from the index.
    part = cli_json(
        "eth",
        "export-era1",
        "--data",
        data,
        "--out",
        tmp_path / "part",
        "--from",
        "8192",
        "--to",
        "16383",
        "--json",
    )
    name = Path(era1["files"][1]["path"]).name
    assert [Path(f["path"]).name for f in part["files"]] == [name]
    assert (tmp_path / "part" / name).read_bytes() == (tmp_path / "e" / "era1" / name).read_bytes()


def test_grouped_index_entries_merge_in_key_order_later_unit_wins() -> None:
    """A commit group's index entries come in key order: the units' own runs when they do not
    overlap (keys by block number), else one merged run where a key two units share (the same
    block in two files) keeps the later unit's value, as unit-by-unit ingestion did."""
    import pyarrow as pa
    from rechain.pipeline.ethereum.stages.blocks import _in_key_order

    def part(*kv: tuple[bytes, bytes]) -> tuple[pa.Array, pa.Array]:
        return pa.array([k for k, _ in kv], pa.binary()), pa.array([v for _, v in kv], pa.binary())

    [(keys, values)] = _in_key_order(
        [part((b"\x01", b"a1"), (b"\x05", b"a5")), part((b"\x00", b"b0"), (b"\x05", b"b5"))]
    )
    assert keys.to_pylist() == [b"\x00", b"\x01", b"\x05"]
    assert values.to_pylist() == [b"b0", b"a1", b"b5"]
    one, two, empty = part((b"\x02", b"c2")), part((b"\x03", b"d3"), (b"\x04", b"d4")), part()
    assert _in_key_order([one, empty, two]) == [one, two]
    # Touching runs are not disjoint: the later unit's value wins there too.
    [(keys, values)] = _in_key_order([two, part((b"\x04", b"e4"))])
    assert values.to_pylist() == [b"d3", b"e4"]
