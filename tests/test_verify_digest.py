"""The row-level table digest (``pipeline/verify.py``'s ``tables_digest``) that every
"identical to a fresh / uninterrupted run" assertion rests on.

Each mutation below moves a value between rows and keeps every column's multiset of values, so
a digest that summed a hash per column (the model ``column_digest``, written here) cannot see
it; the row digest must. Rewriting a table's files in another cut and row order must not change
it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, full_tables_digest, tables_digest, verify
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout

from tests.conftest import cli, cli_json, gen_chain, reindex

Mutation = Callable[[pa.Table], pa.Table | None]


@pytest.fixture(scope="module")
def btc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full-mode data folder of a chain with side branches (so some outputs are spent and
    some transactions pay fees)."""
    root = tmp_path_factory.mktemp("digest-chain")
    gen_chain(
        root, "--blocks", "300", "--tx-per-block", "2:8", "--side-branches", "2", "--seed", "5"
    )
    data = tmp_path_factory.mktemp("digest-btc") / "data"
    reindex(root / "blocks", data, "--mode", "full")
    return data


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("digest-flow")
    code, _, err = cli(
        "gen",
        "flow",
        root / "wal",
        "--updates",
        "200",
        "--registers-per-update",
        "5",
        "--seed",
        "3",
    )
    assert code == 0, err
    data = root / "data"
    cli_json("flow", "replay", "--wal", root / "wal", "--data", data, "--no-progress", "--json")
    return data


def generation(data: Path, key: bytes) -> int:
    with DataDir(data, readonly=True) as d:
        gen = d.meta_get(key)
    assert gen is not None
    return int(gen)


def parts(data: Path, table: str, gen: int) -> list[Path]:
    files = sorted((data / "parquet" / table / f"{gen:06d}").rglob("*.parquet"))
    assert files, (table, gen)
    return files


def column_digest(data: Path, table: str, gen: int) -> list[int]:
    """The blind model: a sum of value hashes per column (each column a multiset)."""
    import duckdb

    files = data / "parquet" / table / f"{gen:06d}" / "**" / "*.parquet"
    row = duckdb.sql(
        "SELECT sum(hash(COLUMNS(*))::HUGEINT) "
        f"FROM read_parquet('{files}', hive_partitioning = true)"
    ).fetchall()[0]
    return list(row)


def mutate_one_file(data: Path, table: str, gen: int, mutation: Mutation) -> Path:
    """Applies ``mutation`` to the first part file of ``table`` it can change (it returns None
    for a file it cannot); the file keeps its schema."""
    for path in parts(data, table, gen):
        before = pq.read_table(path)
        after = mutation(before)
        if after is not None:
            assert after.num_rows == before.num_rows and not after.equals(before)
            pq.write_table(after.cast(before.schema), path)
            return path
    raise AssertionError(f"no part of {table} can take the mutation")


def swap_rows(column: pa.ChunkedArray, i: int, j: int) -> pa.Array:
    values = column.to_pylist()
    values[i], values[j] = values[j], values[i]
    return pa.array(values, type=column.type)


def move_spent_to_the_neighbouring_output(t: pa.Table) -> pa.Table | None:
    """An output marked spent hands its flag to the next output of its transaction."""
    txid, vout, spent = (t.column(c).to_pylist() for c in ("txid", "vout", "spent"))
    for i in range(len(txid)):
        for j in range(len(txid)):
            if txid[j] == txid[i] and vout[j] == vout[i] + 1 and spent[i] and not spent[j]:
                return t.set_column(
                    t.schema.get_field_index("spent"), "spent", swap_rows(t["spent"], i, j)
                )
    return None


def swap_two_fees(t: pa.Table) -> pa.Table | None:
    fees = t.column("fee").to_pylist()
    for i in range(len(fees)):
        for j in range(i + 1, len(fees)):
            if fees[i] and fees[j] and fees[i] != fees[j]:
                return t.set_column(
                    t.schema.get_field_index("fee"), "fee", swap_rows(t["fee"], i, j)
                )
    return None


def move_a_register_value(t: pa.Table) -> pa.Table | None:
    values = t.column("value").to_pylist()
    for i in range(1, len(values)):
        if values[i] != values[0]:
            return t.set_column(
                t.schema.get_field_index("value"), "value", swap_rows(t["value"], 0, i)
            )
    return None


@pytest.mark.parametrize(
    "table, mutation",
    [("outputs", move_spent_to_the_neighbouring_output), ("transactions", swap_two_fees)],
)
def test_a_value_moved_between_bitcoin_rows_changes_the_digest(
    btc: Path, tmp_path: Path, table: str, mutation: Mutation
) -> None:
    gen = generation(btc, layout.META_BTC_FULL_GENERATION)
    copy = tmp_path / "data"
    shutil.copytree(btc, copy)
    with DataDir(btc, readonly=True) as d:
        want_full, want = full_tables_digest(d), digest(d)
    mutate_one_file(copy, table, gen, mutation)
    # The mutation is one the per-column model cannot see.
    assert column_digest(copy, table, gen) == column_digest(btc, table, gen)
    with DataDir(copy, readonly=True) as d:
        assert full_tables_digest(d) != want_full
        assert digest(d)["content"] != want["content"]
    assert verify(copy)["digest"]["content"] != want["content"]


def test_a_register_value_moved_changes_the_flow_digest(flow: Path, tmp_path: Path) -> None:
    gen = generation(flow, fs.META_FLOW_GENERATION)
    copy = tmp_path / "data"
    shutil.copytree(flow, copy)
    tables = (fs.TRIE_UPDATES, fs.REGISTERS)
    with DataDir(flow, readonly=True) as d:
        want = tables_digest(d, tables, gen)
    mutate_one_file(copy, fs.REGISTERS, gen, move_a_register_value)
    assert column_digest(copy, fs.REGISTERS, gen) == column_digest(flow, fs.REGISTERS, gen)
    with DataDir(copy, readonly=True) as d:
        assert tables_digest(d, tables, gen) != want


def test_another_cut_and_row_order_keep_the_digest(btc: Path, tmp_path: Path) -> None:
    """The same rows written as other files (each partition's rows reversed and split in two)
    give the same digest: it depends on the rows, not on how units were cut."""
    gen = generation(btc, layout.META_BTC_FULL_GENERATION)
    copy = tmp_path / "data"
    shutil.copytree(btc, copy)
    for table in ("blocks", "transactions", "inputs", "outputs"):
        for folder in {p.parent for p in parts(copy, table, gen)}:
            files = sorted(folder.glob("*.parquet"))
            rows = pa.concat_tables([pq.read_table(p) for p in files])
            for p in files:
                p.unlink()
            rows = rows.take(pa.array(range(rows.num_rows - 1, -1, -1)))
            half = rows.num_rows // 2
            pq.write_table(rows.slice(0, half), folder / "recut-a.parquet")
            pq.write_table(rows.slice(half), folder / "recut-b.parquet")
    with DataDir(btc, readonly=True) as a, DataDir(copy, readonly=True) as b:
        assert full_tables_digest(a) == full_tables_digest(b)


def test_a_dropped_row_changes_the_digest(btc: Path, tmp_path: Path) -> None:
    gen = generation(btc, layout.META_BTC_FULL_GENERATION)
    copy = tmp_path / "data"
    shutil.copytree(btc, copy)
    path = parts(copy, "inputs", gen)[-1]
    rows = pq.read_table(path)
    pq.write_table(rows.slice(0, rows.num_rows - 1), path)
    with DataDir(btc, readonly=True) as a, DataDir(copy, readonly=True) as b:
        assert full_tables_digest(a) != full_tables_digest(b)
