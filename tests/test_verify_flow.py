"""`rechain verify` on Flow state: the registers in RocksDB and Parquet agree row for row, the
root they hash to is the recorded one, the root history matches trie_updates; any tampering is
caught and the content digest ignores run details but not content."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, verify
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout

from tests.conftest import cli, cli_json
from tests.test_flow_interop import flowgo, run  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def wal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("vflow") / "wal"
    code, _, err = cli(
        "gen",
        "flow",
        out,
        "--updates",
        "600",
        "--registers-per-update",
        "6",
        "--segment-size",
        "64K",
        "--seed",
        "11",
    )
    assert code == 0, err
    return out, json.loads((out / "expected.json").read_text())


def replay(wal: Path, data: Path, workers: int = 1) -> dict:
    return cli_json(
        "flow",
        "replay",
        "--wal",
        wal,
        "--data",
        data,
        "--no-progress",
        "--workers",
        str(workers),
        "--json",
    )


def test_replayed_state_verifies_with_the_root_recomputed(
    wal: tuple[Path, dict],
    tmp_path: Path,
    flowgo: Path,  # noqa: F811
) -> None:
    path, _ = wal
    replay(path, tmp_path / "a", workers=1)
    replay(path, tmp_path / "b", workers=2)
    a = verify(tmp_path / "a")
    assert a["ok"], a["problems"]
    # The generator's root comes from rechain's own forest: the reference is flow-go's replay.
    go = run(flowgo, "replay", "--wal", path, "--roots=false")
    assert a["flow"]["root_recomputed"] == go["final_root"]
    assert a["flow"]["registers"] == go["registers"]
    # Equal content, different runs (worker counts, timings): equal digests.
    assert verify(tmp_path / "b")["digest"] == a["digest"]
    code, out, _ = cli("verify", "--data", tmp_path / "a", "--json")
    assert code == 0 and json.loads(out)["ok"]


def _first_register(data: Path) -> tuple[bytes, bytes]:
    with DataDir(data, readonly=True) as d:
        return next(d.items(layout.CF_FLOW_REGISTERS))


def test_a_changed_register_value_is_caught(wal: tuple[Path, dict], tmp_path: Path) -> None:
    data = tmp_path / "d"
    replay(wal[0], data)
    before = digest_of(data)
    key, value = _first_register(data)
    with DataDir(data) as d:
        d.write({layout.CF_FLOW_REGISTERS: [(key, value[:-1] + bytes([value[-1] ^ 1]))]})
    result = verify(data)
    assert not result["ok"]
    text = " ".join(result["problems"])
    assert "registers table differs from RocksDB flow_registers in rows 0.." in text
    assert "registers hash to root" in text
    assert result["digest"]["content"] != before
    code, _, _ = cli("verify", "--data", data, "--json")
    assert code != 0


def test_a_dropped_register_is_caught(wal: tuple[Path, dict], tmp_path: Path) -> None:
    data = tmp_path / "d"
    replay(wal[0], data)
    key, _ = _first_register(data)
    with DataDir(data) as d:
        d.write({}, {layout.CF_FLOW_REGISTERS: [key]})
    problems = " ".join(verify(data)["problems"])
    assert "RocksDB holds" in problems and "manifest says" in problems
    assert "registers hash to root" in problems


def test_a_changed_parquet_register_is_caught(wal: tuple[Path, dict], tmp_path: Path) -> None:
    data = tmp_path / "d"
    replay(wal[0], data)
    [part] = (data / "parquet" / fs.REGISTERS).glob("*/*.parquet")
    table = pq.read_table(part)
    values = table.column("value").to_pylist()
    values[-1] = values[-1] + b"\x00"
    table = table.set_column(
        table.schema.get_field_index("value"),
        "value",
        pa.array(values, table.schema.field("value").type),
    )
    pq.write_table(table, part)
    problems = verify(data)["problems"]
    assert any("registers table differs" in p for p in problems), problems
    # RocksDB itself is intact, so the recomputed root still matches.
    assert not any("hash to root" in p for p in problems), problems


def test_a_lost_root_and_an_unknown_parent_are_caught(
    wal: tuple[Path, dict], tmp_path: Path
) -> None:
    data = tmp_path / "d"
    replay(wal[0], data)
    with DataDir(data) as d:
        key, _ = next(d.items(layout.CF_FLOW_ROOTS))
        d.write({}, {layout.CF_FLOW_ROOTS: [key]})
    assert any("flow_roots" in p for p in verify(data)["problems"])
    # An update whose parent root appears nowhere before it.
    [part] = (data / "parquet" / fs.TRIE_UPDATES).glob("*/*.parquet")
    table = pq.read_table(part)
    parents = table.column("parent_root").to_pylist()
    parents[5] = "ab" * 32
    idx = table.schema.get_field_index("parent_root")
    pq.write_table(table.set_column(idx, "parent_root", pa.array(parents, pa.string())), part)
    problems = verify(data)["problems"]
    assert any("start from a root not known before them (first at seq 5)" in p for p in problems)


def test_empty_data_folder_has_nothing_to_verify(tmp_path: Path) -> None:
    with DataDir(tmp_path / "empty"):
        pass
    result = verify(tmp_path / "empty")
    assert not result["ok"] and "nothing to verify" in result["problems"][0]


def digest_of(data: Path) -> str:
    with DataDir(data, readonly=True) as d:
        return digest(d)["content"]
