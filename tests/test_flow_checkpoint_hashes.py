"""`rechain flow checkpoint write` takes leaf hashes from the data folder's `register_hashes`
table instead of rerunning every leaf's hash chain, and still checks them:

* after a checkpoint read, every leaf's compact hash comes from the table and the written
  files equal flow-go's own checkpoint of the same trie byte for byte; flow-go loads the
  result with every node hash valid;
* without the table every leaf is hashed, to the same bytes;
* a table row whose `HashLeaf` no longer matches its register is hashed instead (counted);
* a wrong compact hash behind a right `HashLeaf`, or a register value changed behind the
  table's back, make the root differ from the state's: the write fails and leaves no file.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import cli, cli_json
from tests.test_flow_checkpoint import wal  # noqa: F401  (fixture)
from tests.test_flow_interop import flowgo, run  # noqa: F401  (fixture)

NAME = "checkpoint.00000000"


def write_cp(data: Path, out: Path) -> dict[str, Any]:
    return cli_json(
        "flow", "checkpoint", "write", "--data", data, "--out", out, "--number", "0", "--json"
    )


def files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def table_file(data: Path, table: str) -> Path:
    [f] = sorted((data / "parquet" / table).glob("*/*.parquet"))
    return f


def rewrite(path: Path, change: Any) -> None:
    """Rewrites one Parquet file with `change(columns)` applied, keeping its row groups."""
    pf = pq.ParquetFile(path)
    group = pf.metadata.row_group(0).num_rows
    t = pf.read()
    cols = {n: t.column(n).to_pylist() for n in t.column_names}
    change(cols)
    new = pa.table({n: pa.array(cols[n], t.schema.field(n).type) for n in t.column_names})
    pq.write_table(new.cast(t.schema), path, row_group_size=group)


def test_write_takes_checked_leaf_hashes_from_the_data_folder(
    flowgo: Path,  # noqa: F811
    wal: tuple[Path, dict[str, Any]],  # noqa: F811
    tmp_path: Path,
) -> None:
    wal_dir, facts = wal
    cp = tmp_path / "cp"
    run(flowgo, "checkpoint", "--wal", wal_dir, "--out", cp, "--tries", "last")
    data = tmp_path / "d"
    # In memory: one `registers` and one `register_hashes` file, which the tampering below
    # rewrites (a streamed read writes one file per subtrie part, same rows).
    cli_json(
        "flow",
        "checkpoint",
        "read",
        "--dir",
        cp,
        "--data",
        data,
        "--file",
        NAME,
        "--in-memory",
        "--json",
    )
    regs = facts["registers"]
    hashes = pq.read_table(table_file(data, "register_hashes"))
    expected = pa.schema(
        [
            ("path", pa.binary(32)),
            ("height", pa.uint16()),
            ("leaf_hash", pa.binary(32)),
            ("node_hash", pa.binary(32)),
        ]
    )
    assert hashes.schema.remove_metadata().equals(expected)
    assert hashes.num_rows == regs

    cached = write_cp(data, tmp_path / "cached")
    assert (cached["cached_leaves"], cached["hashed_leaves"]) == (regs, 0)
    assert cached["root"] == facts["final_root"]
    # Every file equals flow-go's own checkpoint of that trie, the top part's register size
    # (flow-go's accounting, kept in the data folder's summary) included.
    ours, theirs = files(tmp_path / "cached"), files(cp)
    assert ours.keys() == theirs.keys() and len(ours) == 18
    for name in ours:
        assert ours[name] == theirs[name], name
    oracle = run(
        flowgo, "read-checkpoint", "--dir", tmp_path / "cached", "--file", NAME, "--verify"
    )
    [t] = oracle["tries"]
    assert t["root"] == facts["final_root"] and t["valid"] is True and t["registers"] == regs

    # No table (a data folder published before it existed): every chain is run, same bytes.
    saved = tmp_path / "saved_hashes"
    shutil.copytree(data / "parquet" / "register_hashes", saved)
    shutil.rmtree(data / "parquet" / "register_hashes")
    hashed = write_cp(data, tmp_path / "hashed")
    assert (hashed["cached_leaves"], hashed["hashed_leaves"]) == (0, regs)
    assert files(tmp_path / "hashed") == ours
    shutil.copytree(saved, data / "parquet" / "register_hashes")

    # A stale row (its HashLeaf differs) is not used: that leaf is hashed.
    def stale(cols: dict[str, list[Any]]) -> None:
        cols["leaf_hash"][3] = b"\x07" * 32
        cols["node_hash"][3] = b"\x07" * 32

    hfile = table_file(data, "register_hashes")
    rewrite(hfile, stale)
    one = write_cp(data, tmp_path / "one")
    assert (one["cached_leaves"], one["hashed_leaves"]) == (regs - 1, 1)
    assert files(tmp_path / "one") == ours

    # A wrong compact hash behind a right HashLeaf: the root differs, nothing is written.
    def wrong(cols: dict[str, list[Any]]) -> None:
        cols["node_hash"][5] = cols["node_hash"][6]

    rewrite(hfile, wrong)
    code, _, err = cli(
        "flow", "checkpoint", "write", "--data", data, "--out", tmp_path / "w1", "--number", "0"
    )
    assert code != 0 and "registers hash to root" in err, err
    assert not any((tmp_path / "w1").iterdir())
    shutil.rmtree(data / "parquet" / "register_hashes")
    shutil.copytree(saved, data / "parquet" / "register_hashes")

    # A register value changed behind the table's back: its HashLeaf no longer matches, the
    # leaf is hashed from the changed value, and the root gives it away.
    def tamper(cols: dict[str, list[Any]]) -> None:
        cols["value"][7] = cols["value"][7] + b"!"

    rewrite(table_file(data, "registers"), tamper)
    code, _, err = cli(
        "flow", "checkpoint", "write", "--data", data, "--out", tmp_path / "w2", "--number", "0"
    )
    assert code != 0 and "registers hash to root" in err, err
    assert not any((tmp_path / "w2").iterdir())
