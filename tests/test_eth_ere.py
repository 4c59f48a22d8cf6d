"""Ere archives (execution history across the merge): ``rechain gen eth --format ere`` on the
``devmerge`` network (the merge, Shanghai, Cancun and Prague within 20,000 blocks), ``eth
import --ere`` of every profile and of folders mixing era1 and Ere files, ``eth export-ere``
byte for byte, and damaged files reported row by row. The same chain generated as a geth
freezer is the cross-check: its tables must equal the Ere import's, row for row. go-ethereum's
own reading and writing of the same files is in test_geth_oracle.py."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, verify
from rechain.schemas.tables import ETH_TABLES

from tests.conftest import SHARED, cli

ERA1 = SHARED / "data" / "ethereum" / "era1"
MAINNET_3 = "mainnet-00003-d8b8a40b.era1"
BLOCKS = 20_000
SEED = 11


def gen(out: Path, fmt: str, *extra: str, blocks: int = BLOCKS) -> dict[str, Any]:
    code, _, err = cli(
        "gen", "eth", out, "--blocks", str(blocks), "--format", fmt, "--network", "devmerge",
        "--seed", str(SEED), "--tx-per-block", "0:3", *extra,
    )  # fmt: skip
    assert code == 0, err
    facts: dict[str, Any] = json.loads((out / "expected.json").read_text())
    return facts


def eth_import(kind: str, source: Path, data: Path, *extra: str) -> dict[str, Any]:
    code, out, err = cli(
        "eth", "import", kind, source, "--data", data, "--no-progress", "--json", "--no-pow",
        *extra,
    )  # fmt: skip
    assert code in (0, 1), err
    result: dict[str, Any] = json.loads(out)
    assert (code == 0) == (result["failed"] == 0)
    return result


def query(data: Path, sql: str) -> list[dict[str, Any]]:
    code, out, err = cli("query", "--data", data, "--format", "json", sql)
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def table_rows(data: Path, table: str, where: str = "") -> set[str]:
    """Every row of a table as JSON, without the columns that name the input (eth_blocks'
    source file and offset)."""
    cols = '* EXCLUDE (source, "offset")' if table == "eth_blocks" else "*"
    rows = query(data, f"SELECT {cols} FROM {table} {where}")
    return {json.dumps(r, sort_keys=True, default=str) for r in rows}


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The devmerge chain as Ere files (noproofs and noreceipts) and as a freezer, each
    imported once."""
    root = tmp_path_factory.mktemp("devmerge")
    facts = gen(root / "g", "ere")
    gen(root / "nr", "ere", "--ere-profile", "noreceipts")
    gen(root / "fz", "freezer")
    imports = {}
    for name, kind, src, extra in [
        ("ere", "--ere", root / "g" / "ere", ()),
        ("noreceipts", "--ere", root / "nr" / "ere", ()),
        # A freezer's files carry no network name.
        ("freezer", "--freezer", root / "fz" / "ancient", ("--network", "devmerge")),
    ]:
        imports[name] = eth_import(kind, src, root / f"data-{name}", *extra)
    return {"root": root, "facts": facts, "imports": imports}


def test_generated_ere_crosses_the_merge(chain: dict[str, Any]) -> None:
    facts, root = chain["facts"], chain["root"]
    names = sorted(p.name for p in (root / "g" / "ere").iterdir())
    assert [n.split("-")[:2] for n in names] == [["devmerge", f"{e:05d}"] for e in range(3)]
    assert all(n.endswith("-noproofs.ere") for n in names)
    # Each name carries its last block's hash; the last file's is the tip's.
    assert names[-1].split("-")[2] == facts["tip_hash"][:8]
    assert 0 < facts["pos_blocks"] < BLOCKS - 8192  # the merge falls in the second file
    assert facts["withdrawals"] > 0 and facts["blobs"] > 0
    assert facts["tx_kinds"]["eip4844"] > 0
    files = {Path(f["path"]).name: f for f in facts["files"]}
    # Accumulators: the pre-merge epoch and the transition epoch have one, the last none.
    assert [files[n]["accumulator"] is not None for n in names] == [True, True, False]
    genesis = json.loads((root / "g" / "genesis.json").read_text())
    assert genesis["config"]["chainId"] == facts["chain_id"] == 1338
    assert int(genesis["config"]["terminalTotalDifficulty"]) < int(facts["final_td"]) + 1


def test_ere_import_matches_the_generator(chain: dict[str, Any]) -> None:
    facts, r = chain["facts"], chain["imports"]["ere"]
    assert r["failed"] == 0, r["verdicts"][:5]
    assert r["blocks"] == BLOCKS and r["kind"] == "ere"
    assert r["tip_hash"] == "0x" + facts["tip_hash"]
    assert r["total_difficulty"] == facts["final_td"]
    assert r["counts"]["eth_transactions"] == facts["transactions"]
    assert r["counts"]["eth_logs"] == facts["logs"]
    assert r["counts"]["eth_withdrawals"] == facts["withdrawals"]
    assert r["checks"]["accumulators"] == 2 and r["checks"]["links"] == 2
    data = chain["root"] / "data-ere"
    senders = {
        row["a"]
        for row in query(data, "SELECT DISTINCT substr(from_address, 3) AS a FROM eth_transactions")
    }
    assert senders == set(facts["senders"])
    # Across the merge: difficulty stops, the TD stays at the terminal TD, forks add fields.
    rows = query(
        data,
        "SELECT min(number) FILTER (difficulty = 0) AS merge, "
        "count(DISTINCT total_difficulty) FILTER (difficulty = 0) AS post_tds, "
        "min(number) FILTER (parent_beacon_block_root IS NOT NULL) AS cancun, "
        "min(number) FILTER (requests_hash IS NOT NULL) AS prague FROM eth_blocks",
    )[0]
    assert BLOCKS - facts["pos_blocks"] == rows["merge"]
    assert rows["post_tds"] == 1
    assert rows["merge"] < rows["cancun"] < rows["prague"] < BLOCKS
    assert verify(data)["ok"]


def test_ere_and_freezer_give_the_same_tables(chain: dict[str, Any]) -> None:
    """One chain, two inputs: every row of the five tables is the same."""
    ere, fz = chain["root"] / "data-ere", chain["root"] / "data-freezer"
    assert chain["imports"]["freezer"]["failed"] == 0
    for t in ETH_TABLES:
        a, b = table_rows(ere, t.name), table_rows(fz, t.name)
        assert a == b, (t.name, len(a - b), len(b - a))
        assert a or t.name != "eth_blocks"


def test_noreceipts_profile(chain: dict[str, Any]) -> None:
    """Without receipts: the same blocks, transactions and withdrawals; no receipts or logs,
    and the checks that need them are not made."""
    r = chain["imports"]["noreceipts"]
    assert r["failed"] == 0 and r["blocks"] == BLOCKS
    assert r["counts"].get("eth_receipts", 0) == 0 and r["counts"].get("eth_logs", 0) == 0
    nr, ere = chain["root"] / "data-noreceipts", chain["root"] / "data-ere"
    for t in ("eth_blocks", "eth_withdrawals"):
        assert table_rows(nr, t) == table_rows(ere, t)
    names = sorted(p.name for p in (chain["root"] / "nr" / "ere").iterdir())
    assert all(n.endswith("-noproofs-noreceipts.ere") for n in names)


@pytest.mark.parametrize("source", ["ere", "freezer"])
def test_export_ere_is_byte_identical(chain: dict[str, Any], source: str, tmp_path: Path) -> None:
    """The generator's files (written as geth's builder writes) come back byte for byte from
    an import of either input; a range that starts mid-epoch is cut as geth cuts it."""
    root = chain["root"]
    data = root / f"data-{source}"
    out = tmp_path / "out"
    code, res, err = cli("eth", "export-ere", "--data", data, "--out", out, "--json")
    assert code == 0, err
    written = {Path(f["path"]).name: sha256(Path(f["path"])) for f in json.loads(res)["files"]}
    generated = {p.name: sha256(p) for p in (root / "g" / "ere").iterdir()}
    assert written == generated
    code, res, err = cli(
        "eth", "export-ere", "--data", data, "--out", tmp_path / "nr", "--profile", "noreceipts",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    nr = {p.name: sha256(p) for p in (tmp_path / "nr").iterdir()}
    assert nr == {p.name: sha256(p) for p in (root / "nr" / "ere").iterdir()}
    # From block 5000 to 12000: files 5000..13191 cut short at 12000, named for epoch 0.
    code, res, err = cli(
        "eth", "export-ere", "--data", data, "--out", tmp_path / "mid", "--from", "5000",
        "--to", "12000", "--json",
    )  # fmt: skip
    assert code == 0, err
    files = json.loads(res)["files"]
    assert [(f["first_block"], f["blocks"]) for f in files] == [(5000, 7001)]
    assert Path(files[0]["path"]).name.startswith("devmerge-00000-")


def test_mixed_folder_and_era1_up_to_the_merge(chain: dict[str, Any], tmp_path: Path) -> None:
    """era1 for the pre-merge epoch, Ere after it, in one folder (geth refuses such a folder):
    the same tables as the Ere files alone."""
    root = chain["root"]
    code, res, err = cli(
        "eth", "export-era1", "--data", root / "data-ere", "--out", tmp_path / "era1", "--json"
    )
    assert code == 0, err
    era1 = json.loads(res)["files"]
    # era1 holds pre-merge blocks only: the export stops at the merge.
    merge = BLOCKS - chain["facts"]["pos_blocks"]
    assert sum(f["blocks"] for f in era1) == merge
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy2(era1[0]["path"], mixed)
    for p in sorted((root / "g" / "ere").iterdir())[1:]:
        shutil.copy2(p, mixed)
    r = eth_import("--ere", mixed, tmp_path / "data")
    assert r["failed"] == 0 and r["blocks"] == BLOCKS
    for t in ETH_TABLES:
        assert table_rows(tmp_path / "data", t.name) == table_rows(root / "data-ere", t.name)
    # Two files for the same blocks are refused.
    shutil.copy2(sorted((root / "g" / "ere").iterdir())[0], mixed)
    code, _, err = cli("eth", "import", "--ere", mixed, "--data", tmp_path / "d2", "--no-pow")
    assert code == 2 and "hold the same blocks" in err


def _index(raw: bytes) -> tuple[int, int, int, int]:
    """(index record offset, start, components, count) of an Ere file (spec 2.8)."""
    components, count = struct.unpack("<QQ", raw[-16:])
    index = len(raw) - (8 + 8 * count * components + 16) - 8
    (start,) = struct.unpack("<Q", raw[index + 8 : index + 16])
    return index, start, components, count


def _slot(raw: bytes, block: int, slot: int) -> int:
    index, start, components, _ = _index(raw)
    at = index + 16 + 8 * ((block - start) * components + slot)
    (rel,) = struct.unpack("<q", raw[at : at + 8])
    return index + rel


def test_damaged_ere_files_are_reported_not_fatal(chain: dict[str, Any], tmp_path: Path) -> None:
    """A damaged record is a verdict (file, offset, block, rule) and the blocks around it are
    kept; a file whose index is broken is skipped with its reason; a wrong TD record and a
    wrong name are rules of their own."""
    src = sorted((chain["root"] / "g" / "ere").iterdir())
    folder = tmp_path / "ere"
    folder.mkdir()
    for p in src:
        shutil.copy2(p, folder)
    first, second, third = sorted(folder.iterdir())
    raw = bytearray(second.read_bytes())
    # Block 9000's body: a byte inside its framed snappy value.
    body = _slot(bytes(raw), 9000, 1)
    raw[body + 8 + 20] ^= 0x40
    # Block 9100's TD record (slot 3): one more wei (it and its child disagree with it).
    td = _slot(bytes(raw), 9100, 3)
    raw[td + 8] = (raw[td + 8] + 1) % 256
    second.write_bytes(bytes(raw))
    # The last file: its index trailer claims 9 components.
    raw3 = bytearray(third.read_bytes())
    raw3[-16] = 9
    third.write_bytes(bytes(raw3))
    # The first file renamed: its name no longer carries its last hash.
    first.rename(first.with_name("devmerge-00000-00000000-noproofs.ere"))
    r = eth_import("--ere", folder, tmp_path / "data")
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for v in r["verdicts"]:
        by_rule.setdefault(v["rule"], []).append(v)
    decode = [v for v in by_rule["decode"] if v["block"] == 9000]
    # The offset named is the damaged snappy chunk's, inside block 9000's body record.
    named = int(decode[0]["detail"].split("offset ")[1].split(":")[0])
    assert body + 8 <= named <= body + 8 + 20, (body, decode)
    assert second.name in decode[0]["detail"]
    assert [v["block"] for v in by_rule["total_difficulty"]] == [9100, 9101]
    assert [v["block"] for v in by_rule["file_name"]] == [0]
    skipped = r["skipped"]
    assert [s["source"] for s in skipped] == [third.name.removesuffix(".ere")]
    assert "components" in skipped[0]["detail"]
    # The second file's other blocks are there.
    assert r["blocks"] == 8192 + 8191


def test_readme_query_across_the_merge(chain: dict[str, Any]) -> None:
    """The README's example query across the merge, verbatim: proof of work, then Shanghai,
    Cancun and Prague, with the withdrawals and blob gas the generator made."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    line = next(x for x in readme.splitlines() if "AS era" in x and x.startswith("$R query"))
    sql = line.split('"', 1)[1].rsplit('"', 1)[0].replace('\\"', '"')
    eras = query(chain["root"] / "data-ere", sql)
    facts = chain["facts"]
    assert [r["era"] for r in eras] == ["pow", "shanghai", "cancun", "prague"]
    assert sum(r["blocks"] for r in eras) == BLOCKS
    assert eras[0]["blocks"] == BLOCKS - facts["pos_blocks"]
    assert sum(r["withdrawals"] or 0 for r in eras) == facts["withdrawals"]
    assert eras[0]["withdrawals"] in (None, 0) and eras[1]["blob_gas"] is None  # no field yet
    assert eras[2]["blob_gas"] > 0 and eras[3]["blob_gas"] > 0


@pytest.mark.parametrize(
    "point", ["eth.parts_renamed:2", "eth.index_ingested:1", "eth.unit_committed:3"]
)
def test_kill_then_resume_ends_identical(chain: dict[str, Any], point: str, tmp_path: Path) -> None:
    """kill -9 at a commit point of an Ere import (files of both formats in the folder), then
    a rerun: the data folder ends identical to the uninterrupted import's."""
    mixed = tmp_path / "mixed"
    shutil.copytree(chain["root"] / "g" / "ere", mixed)

    def cmd(data: Path) -> list[str]:
        return [
            sys.executable, "-m", "rechain.pipeline.cli", "eth", "import", "--ere", str(mixed),
            "--data", str(data), "--no-pow", "--no-progress", "--workers", "1",
        ]  # fmt: skip

    ref, data = tmp_path / "ref", tmp_path / "data"
    assert subprocess.run(cmd(ref), capture_output=True).returncode == 0
    env = {**os.environ, "RECHAIN_KILL_AT": point}
    killed = subprocess.run(cmd(data), capture_output=True, env=env)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    resumed = subprocess.run(cmd(data), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert verify(data)["ok"]
    with DataDir(data, readonly=True) as a, DataDir(ref, readonly=True) as b:
        assert digest(a)["content"] == digest(b)["content"]


def test_ray_tasks_per_file_give_the_same_data_folder(
    chain: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Ray task per Ere file: the same data folder as the threads' import."""
    monkeypatch.setenv("RECHAIN_EXECUTION", "ray")
    r = eth_import("--ere", chain["root"] / "g" / "ere", tmp_path / "data", "--workers", "2")
    assert r["run"]["execution"] == "ray" and r["run"]["units"] == 3
    with (
        DataDir(tmp_path / "data", readonly=True) as a,
        DataDir(chain["root"] / "data-ere", readonly=True) as b,
    ):
        assert digest(a)["content"] == digest(b)["content"]


def test_mainnet_epoch_as_ere_with_proofs(tmp_path: Path) -> None:
    """The real mainnet epoch 3 (era1) exported as Ere with block proofs (profile full): the
    name carries the epoch's last hash (shared/data README), each of the 8,192 proofs leads to
    the epoch's root in the EIP-7643 list (portal), the tables equal the era1 import's; with
    two blocks' proofs swapped in the index, exactly those two fail."""
    era = tmp_path / "era1"
    era.mkdir()
    shutil.copy2(ERA1 / MAINNET_3, era)
    first = eth_import("--era1", era, tmp_path / "d1")
    assert first["failed"] == 0
    code, out, err = cli(
        "eth", "export-ere", "--data", tmp_path / "d1", "--out", tmp_path / "ere", "--profile",
        "full", "--json",
    )  # fmt: skip
    assert code == 0, err
    (f,) = json.loads(out)["files"]
    assert Path(f["path"]).name == "mainnet-00003-14c8639d.ere"
    assert f["accumulator"] == "0xd8b8a40b8cf6818e1bac871d882e772be0b28d1baaf72374946506d9e6fa7d75"
    r = eth_import("--ere", tmp_path / "ere", tmp_path / "d2")
    assert r["failed"] == 0 and r["blocks"] == 8192
    assert (r["checks"]["proofs"], r["checks"]["proofs_checked"]) == (8192, 8192)
    assert r["checks"]["accumulators"] == 1
    for t in ETH_TABLES:
        assert table_rows(tmp_path / "d2", t.name) == table_rows(tmp_path / "d1", t.name)
    # Exported again from the Ere import, proofs kept: the same file.
    code, out, err = cli(
        "eth", "export-ere", "--data", tmp_path / "d2", "--out", tmp_path / "again",
        "--profile", "full", "--json",
    )  # fmt: skip
    assert code == 0, err
    (again,) = json.loads(out)["files"]
    assert Path(again["path"]).read_bytes() == Path(f["path"]).read_bytes()
    # Swap the proof slots (the fifth component) of blocks 24,581 and 24,582.
    path = Path(f["path"])
    raw = bytearray(path.read_bytes())
    index, start, components, _ = _index(bytes(raw))
    assert components == 5
    at = [index + 16 + 8 * ((n - start) * components + 4) for n in (24_581, 24_582)]
    a, b = (bytes(raw[x : x + 8]) for x in at)
    raw[at[0] : at[0] + 8], raw[at[1] : at[1] + 8] = b, a
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    (swapped / path.name).write_bytes(bytes(raw))
    bad = eth_import("--ere", swapped, tmp_path / "d3")
    assert [(v["block"], v["rule"]) for v in bad["verdicts"]] == [
        (24_581, "proof"),
        (24_582, "proof"),
    ]
