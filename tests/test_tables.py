"""Every published Parquet file has exactly the schema its table declares
(``rechain.schemas.tables``), and nothing is published that is not declared; the Bitcoin tables'
segments and the parts the chain state stages for them have the declared layout. So does a
folder whose Bitcoin tables were not written in one run: after a rerun on a grown chain, and
after a reorg whose unwind cut a staged part (its files written again, then published)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rechain.pipeline.store.datadir import current_generation
from rechain.schemas import tables
from rechain.workers.fault_injection import KILL_TRACE_ENV

from tests.conftest import SHARED, cli, cli_json, gen_chain, reindex
from tests.test_btc_reorg import node_folder

#: How the folder's Bitcoin tables came to be: one reindex; a reindex of part of the chain, then
#: a rerun on the same folder once the node wrote more blocks (no reorg); a reindex up to a
#: branch, then a rerun once the branch won (an unwind that cuts the last staged part).
RUNS = ("fresh", "incremental", "reorg")
#: Depth of the reorg: the blocks unwound.
REORG_DEPTH = 6
#: The Bitcoin tables' staged datasets: a chain-state part's files (``DATADIR/stage``).
STAGED = {
    "spends": tables.BTC_SPENDS,
    **{
        f"rows/{t.name}": t
        for t in (tables.BLOCKS, tables.TRANSACTIONS, tables.INPUTS, tables.OUTPUTS)
    },
}

_SEGMENT = re.compile(r"seg-(\d+)-(\d+)\.parquet")


def _segments(data: Path) -> set[tuple[int, int]]:
    """(first, last) heights of the published ``blocks`` table's best-chain segments."""
    gen = current_generation(data / "parquet" / tables.BLOCKS.name)
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
    """One folder holding a full Bitcoin reindex (written as ``RUNS`` says), a Flow replay (and
    checkpoint stats) and an Ethereum import."""
    root = tmp_path_factory.mktemp(f"tables-{request.param}")
    data = root / "data"
    _bitcoin(request.param, root, data)
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
    cli_json("flow", "replay", "--wal", root / "wal", "--data", data, "--no-progress", "--json")
    # The state as a checkpoint, and its stats tables.
    cli_json("flow", "checkpoint", "write", "--data", data, "--out", root / "cp", "--json")
    cli_json("flow", "checkpoint", "stats", "--dir", root / "cp", "--data", data, "--json")
    era = root / "era1"
    era.mkdir()
    shutil.copy2(SHARED / "data" / "ethereum" / "era1" / "sepolia-00021-b8814b14.era1", era)
    cli_json(
        "eth",
        "import",
        "--era1",
        era,
        "--data",
        data,
        "--network",
        "sepolia",
        "--no-pow",
        "--no-progress",
        "--json",
    )
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
            code, out, err = cli(
                "query", "--data", data, "--format", "json", f'SELECT count(*) AS n FROM "{name}"'
            )
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


#: The Bitcoin tables whose best-chain segments the chain state's parts are (``seg-*``; DuckDB
#: writes the off-chain rows with encodings of its own choosing).
SEGMENTS = (tables.BLOCKS, tables.TRANSACTIONS, tables.INPUTS, tables.OUTPUTS)


def _files(data: Path, table: tables.Table) -> list[Path]:
    """The table's files of the declared layout in the current generation: every part, or the
    Bitcoin tables' best-chain segments."""
    gen = current_generation(data / "parquet" / table.name)
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
    row group of every file."""
    for f in files:
        meta = pq.ParquetFile(f).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        for g in range(meta.num_row_groups):
            for col in table.dictionary_columns:
                chunk = meta.row_group(g).column(names.index(col))
                assert any("DICTIONARY" in e for e in chunk.encodings), (f, g, col)
            for col in set(names) - set(table.dictionary_columns):
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
    """Every column chunk of every file has the declared codec, statistics unless the column
    is declared unsorted, and no row group more rows than declared; every file has page
    indexes (the publish stage copies a staged file's pages into a segment) and the same
    Parquet columns (the leaves of lists named alike)."""
    codec = table.compression.upper()
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
                assert chunk.compression == codec, (f, g, path, chunk.compression)
                unsorted = path.split(".")[0] in table.unsorted_columns
                assert chunk.is_stats_set != unsorted, (f, g, path, chunk.statistics)
                assert chunk.has_offset_index, (f, g, path)
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
