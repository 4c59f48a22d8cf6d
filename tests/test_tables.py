"""Every published Parquet file has exactly the schema its table declares
(``rechain.schemas.tables``), and nothing is published that is not declared."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rechain.pipeline.query import current_generation
from rechain.schemas import tables

from tests.conftest import SHARED, cli, cli_json, gen_chain, reindex


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder holding a full Bitcoin reindex, a Flow replay (and checkpoint stats) and an
    Ethereum import."""
    root = tmp_path_factory.mktemp("tables")
    gen_chain(
        root / "node",
        "--blocks", "300", "--side-branches", "2", "--orphans", "1",
        "--tx-per-block", "1:6", "--seed", "3",
    )  # fmt: skip
    data = root / "data"
    reindex(root / "node" / "blocks", data, "--mode", "full")
    code, _, err = cli(
        "gen", "flow", root / "wal", "--updates", "200", "--registers-per-update", "5",
        "--segment-size", "64K",
    )  # fmt: skip
    assert code == 0, err
    cli_json("flow", "replay", "--wal", root / "wal", "--data", data, "--no-progress", "--json")
    # The state as a checkpoint, and its stats tables.
    cli_json("flow", "checkpoint", "write", "--data", data, "--out", root / "cp", "--json")
    cli_json("flow", "checkpoint", "stats", "--dir", root / "cp", "--data", data, "--json")
    era = root / "era1"
    era.mkdir()
    shutil.copy2(SHARED / "data" / "ethereum" / "era1" / "sepolia-00021-b8814b14.era1", era)
    cli_json(
        "eth", "import", "--era1", era, "--data", data, "--network", "sepolia", "--no-pow",
        "--no-progress", "--json",
    )  # fmt: skip
    return data


def test_every_published_file_has_its_declared_schema(data: Path) -> None:
    published = sorted(p.name for p in (data / "parquet").iterdir())
    assert published == sorted(tables.TABLES), "a published table is not declared (or missing)"
    for name, table in tables.TABLES.items():
        gen = current_generation(data / "parquet" / name)
        assert gen is not None, name
        files = sorted(gen.rglob("*.parquet"))
        declared = [(f.name, f.type) for f in table.schema]
        if not files:
            # Only an Ethereum table without rows has no part; its view still has the schema.
            assert name.startswith("eth_"), name
            code, out, err = cli("query", "--data", data, "--format", "json",
                                 f'SELECT count(*) AS n FROM "{name}"')  # fmt: skip
            assert code == 0 and json.loads(out) == [{"n": 0}], err

            from rechain.pipeline.query import connect

            con = connect(data)
            got = con.sql(f'SELECT * FROM "{name}" LIMIT 0').arrow().read_all().schema
            con.close()
            assert [(c.name, c.type) for c in got] == declared, name
            continue
        for f in files:
            got = pq.read_schema(f)
            assert [(c.name, c.type) for c in got] == declared, f"{f}: {got}"
            if table.partition_by:
                assert f.parent.name.startswith(f"{table.partition_by}="), f
            else:
                assert f.parent == gen, f


def test_declared_dictionary_columns_are_dictionary_encoded(data: Path) -> None:
    written = (tables.HEADERS, tables.TRIE_UPDATES, tables.ETH_BLOCKS)
    # The Bitcoin tables' best-chain segments (the Rust core's files; DuckDB writes the
    # off-chain ones with encodings of its own choosing).
    segments = (tables.TRANSACTIONS, tables.INPUTS, tables.OUTPUTS)
    for table in (*written, *segments):
        gen = current_generation(data / "parquet" / table.name)
        assert gen is not None
        files = sorted(gen.glob("*/seg-*.parquet" if table in segments else "*.parquet"))
        assert files, table.name
        meta = pq.ParquetFile(files[0]).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        for col in table.dictionary_columns:
            chunk = meta.row_group(0).column(names.index(col))
            assert any("DICTIONARY" in e for e in chunk.encodings), (table.name, col)
        for col in set(names) - set(table.dictionary_columns):
            chunk = meta.row_group(0).column(names.index(col))
            assert not any("DICTIONARY" in e for e in chunk.encodings), (table.name, col)


def test_hash_columns_are_delta_length_encoded_and_read_back(data: Path) -> None:
    """The Rust core writes the declared hash columns DELTA_LENGTH_BYTE_ARRAY (and no other
    column so); pyarrow and DuckDB read them as the 64 hex digits they hold."""
    import duckdb

    for table in (tables.TRANSACTIONS, tables.INPUTS, tables.OUTPUTS):
        assert table.delta_length_columns, table.name
        gen = current_generation(data / "parquet" / table.name)
        assert gen is not None
        files = sorted(gen.glob("*/seg-*.parquet"))
        assert files, table.name
        meta = pq.ParquetFile(files[0]).metadata
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        for i, name in enumerate(names):
            encodings = meta.row_group(0).column(i).encodings
            delta = "DELTA_LENGTH_BYTE_ARRAY" in encodings
            assert delta == (name in table.delta_length_columns), (table.name, name, encodings)
        cols = ", ".join(table.delta_length_columns)
        arrow = pq.read_table(files[0], columns=list(table.delta_length_columns))
        for col in table.delta_length_columns:
            values = arrow.column(col).to_pylist()
            assert values and all(len(v) == 64 and int(v, 16) >= 0 for v in values), col
        sql = f"SELECT {cols} FROM read_parquet('{files[0]}')"
        assert duckdb.sql(sql).to_arrow_table().to_pylist() == arrow.to_pylist(), table.name
