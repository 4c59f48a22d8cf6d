"""Every published Parquet file has exactly the schema its table declares
(``rechain.schemas.tables``), and nothing is published that is not declared; the Bitcoin tables'
segments and the parts the chain state stages for them have the declared layout, and so do the
files pyarrow writes from the registry: ``headers``, the Flow checkpoint stats, the Ethereum
tables and the staged body parts. So does a
folder whose Bitcoin tables were not written in one run: after a rerun on a grown chain, and
after a reorg whose unwind cut a staged part (its files written again, then published)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rechain.pipeline.store.table_view import newest_generation
from rechain.schemas import bitcoin as ds
from rechain.schemas import tables
from rechain.workers import btc_decode
from rechain.workers.fault_injection import KILL_TRACE_ENV

from tests.conftest import SHARED, cli, cli_json, gen_chain, reindex
from tests.test_btc_reorg import node_folder

#: How the folder's Bitcoin tables came to be: one reindex; a reindex of part of the chain, then
#: a rerun on the same folder once the node wrote more blocks (no reorg); a reindex up to a
#: branch, then a rerun once the branch won (an unwind that cuts the last staged part).
RUNS = ("fresh", "incremental", "reorg")
#: Depth of the reorg: the blocks unwound.
REORG_DEPTH = 6
#: The data folder of each chain's tables, beside one another (a folder holds one chain's data).
FOLDERS = {"bitcoin": "data", "flow": "flow", "eth": "eth"}
FLOW_TABLES = (tables.TRIE_UPDATES, tables.REGISTERS, tables.REGISTER_HASHES)
#: The Flow folder a checkpoint read (beside ``FOLDERS``) wrote.
FLOW_READ = "flow-read"
#: The Bitcoin tables' staged datasets: a chain-state part's files (``DATADIR/stage``).
STAGED = {
    "spends": tables.BTC_SPENDS,
    **{
        f"rows/{t.name}": t
        for t in (tables.BLOCKS, tables.TRANSACTIONS, tables.INPUTS, tables.OUTPUTS)
    },
}

_SEGMENT = re.compile(r"seg-(\d+)-(\d+)\.parquet")


def _chain(name: str) -> str:
    """The chain whose data folder holds table ``name``."""
    if name in {t.name for t in tables.ETH_TABLES}:
        return "eth"
    if name in {t.name for t in (*FLOW_TABLES, *tables.FLOW_CHECKPOINT_STATS)}:
        return "flow"
    return "bitcoin"


def _folder(data: Path, name: str) -> Path:
    """The data folder holding table ``name`` (``data``, the Bitcoin folder, or a sibling)."""
    return data.parent / FOLDERS[_chain(name)]


def _segments(data: Path) -> set[tuple[int, int]]:
    """(first, last) heights of the published ``blocks`` table's best-chain segments."""
    gen = newest_generation(data / "parquet" / tables.BLOCKS.name)
    assert gen is not None
    found = (_SEGMENT.fullmatch(f.name) for f in gen.glob("*/seg-*.parquet"))
    return {(int(m[1]), int(m[2])) for m in found if m}


def _bitcoin(run: str, root: Path, data: Path) -> None:
    """The folder's Bitcoin tables, written as ``run`` says (see ``RUNS``)."""
    chain = (
        "--blocks",
        "300",
        "--side-branches",
        "2",
        "--orphans",
        "1",
        "--tx-per-block",
        "1:6",
        "--seed",
        "3",
    )
    if run == "fresh":
        gen_chain(root / "node", *chain)
        reindex(root / "node" / "blocks", data, "--mode", "full")
        return
    # Small blk files, and a branch 6 deep written last, which wins.
    facts = gen_chain(root / "node", *chain, "--file-size", "120K", "--reorg", str(REORG_DEPTH))
    branch = facts["reorg_records"][0]
    # Where each record starts, in file order, from a headers-only reindex.
    ref = root / "headers"
    reindex(root / "node" / "blocks", ref, "--mode", "headers")
    rows = cli_json(
        "query",
        "--data",
        ref,
        'SELECT file, "offset" FROM headers ORDER BY file, "offset"',
        "--format",
        "json",
    )
    records = [(int(r["file"]), int(r["offset"])) for r in rows]
    before_branch = records[-branch]
    blocks = root / "blocks"
    if run == "incremental":
        node_folder(root / "node", blocks, records[len(records) // 2])
        first = reindex(blocks, data, "--mode", "full")
        node_folder(root / "node", blocks, before_branch)
        grown = reindex(blocks, data, "--mode", "full")
        # The rerun applied the new blocks above the old tip and unwound none.
        assert grown["tip_height"] > first["tip_height"]
        assert grown["run"].get("chain_state_applied", 0) > 0, grown["run"]
        assert grown["run"].get("chain_state_unwound", 0) == 0, grown["run"]
        return
    assert run == "reorg", run
    node_folder(root / "node", blocks, before_branch)
    fork = reindex(blocks, data, "--mode", "full")["tip_height"] - REORG_DEPTH
    before = _segments(data)
    node_folder(root / "node", blocks, None)
    trace = root / "trace"
    with pytest.MonkeyPatch.context() as env:
        env.setenv(KILL_TRACE_ENV, str(trace))
        reorg = reindex(blocks, data, "--mode", "full")
    assert reorg["tip_hash"] == facts["tip_hash"]
    assert reorg["run"]["chain_state_unwound"] == REORG_DEPTH, reorg["run"]
    assert "chain_state.unwound" in trace.read_text().split()
    # The unwind cut a part across the fork point (``_trim_parts``): its rows up to there were
    # written again, under a new name, and published as a new segment from the same height.
    after = _segments(data)
    cut = [
        (f, last)
        for f, last in after - before
        if last == fork and any(f == f0 and fork < l0 for f0, l0 in before)
    ]
    assert cut, (fork, before, after)


@pytest.fixture(scope="module", params=RUNS)
def data(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a full Bitcoin reindex (written as ``RUNS`` says), beside those of a Flow
    replay (and checkpoint stats) and of an Ethereum import (``FOLDERS``)."""
    root = tmp_path_factory.mktemp(f"tables-{request.param}")
    data = root / FOLDERS["bitcoin"]
    _bitcoin(request.param, root, data)
    flow, eth = root / FOLDERS["flow"], root / FOLDERS["eth"]
    code, _, err = cli(
        "gen",
        "flow",
        root / "wal",
        "--updates",
        "200",
        "--registers-per-update",
        "5",
        "--segment-size",
        "64K",
    )
    assert code == 0, err
    cli_json("flow", "replay", "--wal", root / "wal", "--data", flow, "--no-progress", "--json")
    # The state as a checkpoint, and its stats tables.
    cli_json("flow", "checkpoint", "write", "--data", flow, "--out", root / "cp", "--json")
    cli_json("flow", "checkpoint", "stats", "--dir", root / "cp", "--data", flow, "--json")
    # The same state read back from the checkpoint (the streamed read writes the registers).
    cli_json(
        "flow", "checkpoint", "read", "--dir", root / "cp", "--data", root / FLOW_READ, "--json"
    )
    era = root / "era1"
    era.mkdir()
    shutil.copy2(SHARED / "data" / "ethereum" / "era1" / "sepolia-00021-b8814b14.era1", era)
    cli_json(
        "eth",
        "import",
        "--era1",
        era,
        "--data",
        eth,
        "--network",
        "sepolia",
        "--no-pow",
        "--no-progress",
        "--json",
    )
    return data


def test_every_published_file_has_its_declared_schema(data: Path) -> None:
    for chain, folder in FOLDERS.items():
        published = sorted(p.name for p in (data.parent / folder / "parquet").iterdir())
        declared_here = sorted(n for n in tables.TABLES if _chain(n) == chain)
        assert published == declared_here, (
            f"{chain}: a published table is not declared (or missing)"
        )
    for name, table in tables.TABLES.items():
        folder = _folder(data, name)
        gen = newest_generation(folder / "parquet" / name)
        assert gen is not None, name
        files = sorted(gen.rglob("*.parquet"))
        declared = [(f.name, f.type) for f in table.schema]
        if not files:
            # Only an Ethereum table without rows has no part; its view still has the schema.
            assert name.startswith("eth_"), name
            code, out, err = cli(
                "query", "--data", folder, "--format", "json", f'SELECT count(*) AS n FROM "{name}"'
            )
            assert code == 0 and json.loads(out) == [{"n": 0}], err

            from rechain.pipeline.query import connect

            con = connect(folder)
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


#: The Bitcoin tables whose best-chain segments the chain state's parts are (``seg-*``; DuckDB
#: writes the off-chain rows with encodings of its own choosing).
SEGMENTS = (tables.BLOCKS, tables.TRANSACTIONS, tables.INPUTS, tables.OUTPUTS)


def _files(data: Path, table: tables.Table) -> list[Path]:
    """The table's files of the declared layout in the current generation: every part, or the
    Bitcoin tables' best-chain segments."""
    gen = newest_generation(_folder(data, table.name) / "parquet" / table.name)
    assert gen is not None
    files = sorted(gen.glob("*/seg-*.parquet" if table in SEGMENTS else "*.parquet"))
    assert files, table.name
    return files


def _staged(data: Path) -> list[tuple[tables.Table, list[Path]]]:
    """Each staged dataset of the chain state's parts (``STAGED``) and its files."""
    out = []
    for where, table in STAGED.items():
        files = sorted((data / "stage" / where).glob("*.parquet"))
        assert files, where
        out.append((table, files))
    return out


def _check_dictionaries(table: tables.Table, files: list[Path]) -> None:
    """The declared dictionary columns, and no other column, are dictionary-encoded in every
    row group of every file (``ALL_COLUMNS``: every column Parquet can, all but booleans)."""
    for f in files:
        meta = pq.ParquetFile(f).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        declared = set(table.dictionary_columns)
        if table.dictionary_columns == tables.ALL_COLUMNS:
            declared = {
                c.name
                for c in (meta.schema.column(i) for i in range(meta.num_columns))
                if c.physical_type != "BOOLEAN"
            }
        for g in range(meta.num_row_groups):
            for col in declared:
                chunk = meta.row_group(g).column(names.index(col))
                assert any("DICTIONARY" in e for e in chunk.encodings), (f, g, col)
            for col in set(names) - declared:
                chunk = meta.row_group(g).column(names.index(col))
                assert not any("DICTIONARY" in e for e in chunk.encodings), (f, g, col)


def _check_delta_lengths(table: tables.Table, files: list[Path]) -> None:
    """The declared hash columns, and no other column, are DELTA_LENGTH_BYTE_ARRAY in every row
    group of every file; pyarrow and DuckDB read them as the 64 hex digits they hold."""
    import duckdb

    for f in files:
        meta = pq.ParquetFile(f).metadata
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        for g in range(meta.num_row_groups):
            for i, name in enumerate(names):
                encodings = meta.row_group(g).column(i).encodings
                delta = "DELTA_LENGTH_BYTE_ARRAY" in encodings
                assert delta == (name in table.delta_length_columns), (f, g, name, encodings)
        if not table.delta_length_columns:
            continue
        cols = ", ".join(table.delta_length_columns)
        arrow = pq.read_table(f, columns=list(table.delta_length_columns))
        for col in table.delta_length_columns:
            values = arrow.column(col).to_pylist()
            assert values and all(len(v) == 64 and int(v, 16) >= 0 for v in values), (f, col)
        sql = f"SELECT {cols} FROM read_parquet('{f}')"
        assert duckdb.sql(sql).to_arrow_table().to_pylist() == arrow.to_pylist(), f


def _check_layout(table: tables.Table, files: list[Path]) -> None:
    """Every column chunk of every file has the declared codec (none where the column is
    declared uncompressed), statistics unless the column is declared unsorted, and no row group
    more rows than declared; every file has the same Parquet columns (the leaves of lists named
    alike), and page indexes where its pages are the Rust core's (the publish stage copies a
    staged file's pages into a segment), none where they are pyarrow's."""
    codec = "UNCOMPRESSED" if table.compression == "none" else table.compression.upper()
    leaves = set()
    for f in files:
        meta = pq.ParquetFile(f).metadata
        paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
        leaves.add(tuple(paths))
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            assert group.num_rows <= table.row_group_rows, (f, g, group.num_rows)
            for i, path in enumerate(paths):
                chunk = group.column(i)
                column = path.split(".")[0]
                plain = "UNCOMPRESSED" if column in table.uncompressed_columns else codec
                assert chunk.compression == plain, (f, g, path, chunk.compression)
                unsorted = column in table.unsorted_columns
                assert chunk.is_stats_set != unsorted, (f, g, path, chunk.statistics)
                assert chunk.has_offset_index == (table.pages == "rust"), (f, g, path)
    assert len(leaves) == 1, f"{table.name}: {sorted(leaves)}"


def test_declared_dictionary_columns_are_dictionary_encoded(data: Path) -> None:
    written = (tables.HEADERS, tables.TRIE_UPDATES, tables.ETH_BLOCKS)
    for table in (*written, *SEGMENTS):
        _check_dictionaries(table, _files(data, table))


def test_hash_columns_are_delta_length_encoded_and_read_back(data: Path) -> None:
    """The Rust core writes the declared hash columns DELTA_LENGTH_BYTE_ARRAY (and no other
    column so); pyarrow and DuckDB read them as the 64 hex digits they hold."""
    for table in (tables.TRANSACTIONS, tables.INPUTS, tables.OUTPUTS):
        assert table.delta_length_columns, table.name
        _check_delta_lengths(table, _files(data, table))


def test_bitcoin_segments_have_the_declared_layout(data: Path) -> None:
    for table in SEGMENTS:
        _check_layout(table, _files(data, table))


def test_flow_tables_have_the_declared_layout(data: Path) -> None:
    """A replay's tables and those a streamed checkpoint read wrote (its registers come from
    the Rust writers, which take the layout from the registry)."""
    for folder in (FOLDERS["flow"], FLOW_READ):
        for table in FLOW_TABLES:
            gen = newest_generation(data.parent / folder / "parquet" / table.name)
            assert gen is not None, (folder, table.name)
            files = sorted(gen.rglob("*.parquet"))
            assert files, (folder, table.name)
            _check_layout(table, files)


def test_staged_parts_have_their_declared_schema_and_layout(data: Path) -> None:
    """The chain state's staged parts (what the publish stage links or copies into the
    segments), the files an unwind cut included, as declared in the same registry."""
    for table, files in _staged(data):
        declared = [(f.name, f.type) for f in table.schema]
        for f in files:
            got = pq.read_schema(f)
            assert [(c.name, c.type) for c in got] == declared, f"{f}: {got}"
        _check_dictionaries(table, files)
        _check_delta_lengths(table, files)
        _check_layout(table, files)


def test_files_pyarrow_writes_have_their_declared_schema_and_layout(data: Path) -> None:
    """What pyarrow writes with a dataset's declared options (``Table.pyarrow_options``): the
    ``headers`` and Flow checkpoint stats generations (``DataDir.stage_parquet_parts``), the
    Ethereum tables' parts (``workers/eth_import.write_part``) and the body parts the body pass
    stages (``workers/btc_decode.py``, registered as ``tables.STAGED``), each as declared."""
    assert {k: t.name for k, t in btc_decode.STAGED.items()} == ds.BODY_SLIM
    assert all(tables.STAGED[t.name] is t for t in btc_decode.STAGED.values())
    written = [
        (table, sorted((data / "stage" / "bodies").glob(f"*.{key}.parquet")))
        for key, table in btc_decode.STAGED.items()
    ]
    for table in (tables.HEADERS, *tables.FLOW_CHECKPOINT_STATS, *tables.ETH_TABLES):
        gen = newest_generation(_folder(data, table.name) / "parquet" / table.name)
        assert gen is not None, table.name
        written.append((table, sorted(gen.glob("*.parquet"))))
    for table, files in written:
        assert table.pages == "pyarrow", table.name
        if not files:
            # Ethereum tables without rows (the Sepolia file has no withdrawals) have no part.
            assert table in tables.ETH_TABLES[1:], table.name
            continue
        declared = [(f.name, f.type) for f in table.schema]
        for f in files:
            got = pq.read_schema(f)
            assert [(c.name, c.type) for c in got] == declared, f"{f}: {got}"
        _check_dictionaries(table, files)
        _check_delta_lengths(table, files)
        _check_layout(table, files)
