"""A user's first hour, driven as a user drives it: real processes, real signals, real pipes.

The tables a reader sees are one publication (interrupted incremental runs, a reader querying
all the while); a folder remembers its mode and chain; wrong inputs and numbers are refused
with a message and an exit code; query results stream out of the CLI; an interrupt is one line
and 130 or 143; outside tools open the documented view.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.query import connect
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.table_view import VIEW_LINK, current_tables
from rechain.pipeline.verify import digest, verify

from tests.conftest import cli, cli_json, gen_chain, reindex, reindex_cmd, run_killed_at

CLI = [sys.executable, "-m", "rechain.pipeline.cli"]
#: The heights each full table reaches: equal in one publication.
HEIGHTS_SQL = (
    "SELECT (SELECT max(height) FROM blocks WHERE in_best_chain) AS blocks, "
    "(SELECT max(height) FROM transactions WHERE in_best_chain) AS transactions, "
    "(SELECT max(height) FROM inputs WHERE in_best_chain) AS inputs, "
    "(SELECT max(height) FROM outputs WHERE in_best_chain) AS outputs"
)


def run(*argv: str | Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *(str(a) for a in argv)], capture_output=True, text=True, timeout=600, **kw
    )


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A chain in many small blk files, the first half of them as an earlier node's folder,
    and a full reindex of that half."""
    root = tmp_path_factory.mktemp("first-hour")
    gen_chain(root / "node", "--blocks", "700", "--tx-per-block", "1:6", "--file-size", "40K")
    blocks = root / "node" / "blocks"
    files = sorted(blocks.glob("blk*.dat"))
    before = root / "before" / "blocks"
    before.mkdir(parents=True)
    shutil.copy(blocks / "xor.dat", before / "xor.dat")
    for f in files[: len(files) // 2]:
        shutil.copy(f, before / f.name)
    base = root / "base"
    reindex(before, base, "--mode", "full")
    return {"blocks": blocks, "before": before, "base": base, "root": root}


def heights(data: Path) -> tuple[int, ...]:
    con = connect(data)
    try:
        row = con.execute(HEIGHTS_SQL).fetchone()
    finally:
        con.close()
    assert row is not None
    return tuple(row)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_a_reader_never_sees_two_generations(chain: dict[str, Path], tmp_path: Path) -> None:
    """An incremental full run interrupted at each point of its publication, with a reader
    querying the whole time: every answer holds the four tables at one height, the old or the
    new, never a mix; the rerun switches to the new one."""
    old = heights(chain["base"])
    assert len(set(old)) == 1
    data = copy(chain["base"], tmp_path / "data")
    seen: set[tuple[int, ...]] = set()
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                seen.add(heights(data))
            except Exception as e:  # a view switched mid-query: never a wrong answer
                errors.append(str(e))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        cmd = reindex_cmd(chain["blocks"], data, "--workers", "1")
        # Full tables: the headers generation is renamed first (pass 1), then blocks,
        # transactions, inputs (passes 2-4) and outputs; then the view switches.
        for point, nth in [
            ("store.generation_renamed", 2),
            ("store.generation_renamed", 4),
            ("publish.manifest_written", 1),
            ("indexes.generations_removed", 1),
        ]:
            run_killed_at(cmd, point, nth)
            assert heights(data) == old, f"killed at {point}:{nth}"
            # The subprocess reader, as a user runs it, sees the same.
            proc = run("query", "--data", data, HEIGHTS_SQL, "--format", "json")
            assert proc.returncode == 0, proc.stderr
            assert tuple(json.loads(proc.stdout)[0].values()) == old
        run_killed_at(cmd, "store.view_switched", 1)
        new = heights(data)
        assert len(set(new)) == 1 and new[0] > old[0]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    finally:
        stop.set()
        thread.join()
    assert seen and all(len(set(h)) == 1 for h in seen), seen
    assert heights(data) == new
    # Anything a reader saw fail was a file of a view already replaced, not a bad answer.
    assert all("No files found" in e or "No such file" in e or "IO Error" in e for e in errors), (
        errors[:3]
    )


def test_the_documented_view_is_what_outside_tools_open(chain: dict[str, Path]) -> None:
    """``DATADIR/tables/<table>/`` holds the current generation only: no hidden temp folder,
    no older generation, the same rows as ``rechain query``."""
    import duckdb
    import pyarrow.dataset as pads

    data = chain["base"]
    want = cli_json(
        "query", "--data", data, "SELECT count(*) AS n FROM outputs", "--format", "json"
    )[0]["n"]
    view = data / VIEW_LINK
    assert view.is_symlink()
    files = list((view / "outputs").rglob("*.parquet"))
    assert files and not any(p.name.startswith(".") for f in files for p in f.parents)
    dataset = pads.dataset(view / "outputs", format="parquet", partitioning="hive")
    assert dataset.count_rows() == want
    glob = str(view / "outputs" / "**" / "*.parquet")
    con = duckdb.connect()
    assert con.execute(f"SELECT count(*) FROM read_parquet('{glob}')").fetchone() == (want,)
    assert {p.name for p in view.iterdir()} == set(current_tables(data))
    assert {"blocks", "transactions", "inputs", "outputs", "headers"} <= set(current_tables(data))


def test_a_copied_folder_that_followed_the_links_gets_its_view_back(
    chain: dict[str, Path], tmp_path: Path
) -> None:
    data = tmp_path / "copy"
    shutil.copytree(chain["base"], data)  # follows the links: ``tables`` is a folder
    assert not (data / VIEW_LINK).is_symlink()
    # Its copied view still reads as the original's; its next run makes the link again.
    assert heights(data) == heights(chain["base"])
    reindex(chain["before"], data)
    assert (data / VIEW_LINK).is_symlink() and heights(data) == heights(chain["base"])


def test_a_rerun_without_mode_runs_the_folders_mode(chain: dict[str, Path], tmp_path: Path) -> None:
    """A full folder rerun without ``--mode`` advances its tables too, to the state a fresh
    full run reaches; asking it for headers only is refused with the command to run."""
    data = copy(chain["base"], tmp_path / "data")
    code, _, err = cli(
        "btc",
        "reindex",
        "--blocks",
        chain["blocks"],
        "--data",
        data,
        "--network",
        "regtest",
        "--mode",
        "headers",
        "--no-progress",
    )
    assert code == 2 and "holds full-mode tables" in err and "Rerun without --mode" in err
    # Neither --mode nor --network: the folder's (full, regtest).
    code, _, err = cli("btc", "reindex", "--blocks", chain["blocks"], "--data", data, "-q")
    assert code == 0, err
    fresh = tmp_path / "fresh"
    reindex(chain["blocks"], fresh, "--mode", "full")
    with DataDir(data, readonly=True) as a, DataDir(fresh, readonly=True) as b:
        assert digest(a) == digest(b)
    assert verify(data)["ok"]
    status = cli_json("btc", "status", "--data", data, "--json")
    assert status["mode"] == "full" and not status["problems"]


def test_status_and_verify_fail_while_a_stage_is_behind(
    chain: dict[str, Path], tmp_path: Path
) -> None:
    data = copy(chain["base"], tmp_path / "data")
    # Killed after the link stage's checkpoint: the index is ahead of the tables.
    run_killed_at(reindex_cmd(chain["blocks"], data), "engine.stage_checkpointed", 2)
    proc = run("btc", "status", "--data", data)
    assert proc.returncode == 1 and "NOT UP TO DATE" in proc.stdout, proc.stdout
    assert "bodies is behind" in proc.stdout
    proc = run("verify", "--data", data)
    assert proc.returncode == 1 and "behind" in proc.stdout
    code, _, err = cli("stages", "--data", data)
    assert code == 0
    reindex(chain["blocks"], data)
    assert verify(data)["ok"]


def test_blocks_given_the_nodes_data_folder(chain: dict[str, Path], tmp_path: Path) -> None:
    """``--blocks ~/.bitcoin`` finds its ``blocks/``; a folder without blk files is an error
    that names where they would be, not a run that indexes nothing."""
    node = chain["root"] / "node"
    result = reindex(node, tmp_path / "a")
    assert result["blocks_indexed"] > 600
    empty = tmp_path / "empty"
    (empty / "blocks").mkdir(parents=True)
    proc = run(
        "btc", "reindex", "--blocks", empty, "--data", tmp_path / "b", "--network", "regtest"
    )
    assert proc.returncode == 2
    assert f"no blk*.dat in {empty}; did you mean {empty / 'blocks'}?" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--memory-budget", "0"], "--memory-budget must be at least 1K (got 0)"),
        (["--memory-budget", "512"], "--memory-budget must be at least 1K (got 512)"),
        (["--workers", "0"], "--workers must be at least 1 (got 0)"),
        (["--workers", "-1"], "--workers must be at least 1 (got -1)"),
        (["--shard-size", "1"], "--shard-size must be at least"),
    ],
)
def test_numbers_are_checked_at_the_door(
    chain: dict[str, Path], tmp_path: Path, flags: list[str], message: str
) -> None:
    code, _, err = cli(
        "btc", "reindex", "--blocks", chain["before"], "--data", tmp_path / "d", *flags
    )
    assert code == 2 and message in err, err
    assert not (tmp_path / "d").exists()


def test_a_config_is_held_to_the_same_minimums_and_serves_the_reads(
    chain: dict[str, Path], tmp_path: Path
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    data = copy(chain["base"], job / "data")
    shutil.copytree(chain["before"], job / "blocks")
    config = job / "job.toml"
    config.write_text(
        '[defaults]\nmemory-budget = "0"\n'
        '[btc.reindex]\nblocks = "blocks"\ndata = "data"\nnetwork = "regtest"\n'
    )
    code, _, err = cli("btc", "reindex", "--config", config)
    assert code == 2 and "--memory-budget must be at least 1K (got 0)" in err
    config.write_text('[btc.reindex]\nblocks = "blocks"\ndata = "data"\nnetwork = "regtest"\n')
    # From another folder: the file's paths are relative to the file.
    proc = run("btc", "reindex", "--config", config, "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = run("btc", "status", "--config", config, "--json", cwd="/")
    assert proc.returncode == 0 and json.loads(proc.stdout)["mode"] == "full", proc.stderr
    proc = run("query", "--config", config, "SELECT count(*) AS n FROM blocks", cwd="/")
    assert proc.returncode == 0 and "(1 row)" in proc.stdout, proc.stderr
    proc = run("verify", "--config", config, cwd="/")
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout
    assert data.exists()


def test_another_chains_import_is_refused(chain: dict[str, Path], tmp_path: Path) -> None:
    eth = tmp_path / "eth"
    code, _, err = cli("gen", "eth", eth, "--blocks", "40", "--format", "era1", "--network", "dev")
    assert code == 0, err
    data = copy(chain["base"], tmp_path / "data")
    code, _, err = cli(
        "eth", "import", "--era1", eth / "era1", "--data", data, "--network", "dev", "--no-pow"
    )
    assert code == 2 and "holds bitcoin data" in err, err
    assert verify(data)["ok"]
    # Into a folder of its own, the era1 file names give the network.
    code, _, err = cli(
        "eth", "import", "--era1", eth / "era1", "--data", tmp_path / "e", "--no-pow"
    )
    assert code == 0, err


def test_query_out_writes_each_format_through_duckdb(
    chain: dict[str, Path], tmp_path: Path
) -> None:
    data = chain["base"]
    n = cli_json("query", "--data", data, "SELECT count(*) AS n FROM inputs", "--format", "json")
    rows = n[0]["n"]
    import pyarrow.parquet as pq

    for name in ("in.parquet", "in.csv", "in.json", "in.jsonl"):
        out = tmp_path / name
        code, _, err = cli("query", "--data", data, "SELECT * FROM inputs", "--out", out)
        assert code == 0 and f"wrote {rows:,} rows" in err, err
        if name.endswith(".parquet"):
            assert pq.read_metadata(out).num_rows == rows
        elif name.endswith(".csv"):
            assert len(out.read_text().splitlines()) == rows + 1
        elif name.endswith(".jsonl"):
            assert len(out.read_text().splitlines()) == rows
        else:
            assert len(json.loads(out.read_text())) == rows
    assert not list(tmp_path.glob(".*.tmp"))
    code, _, err = cli("query", "--data", data, "SELECT 1", "--out", tmp_path / "x.xlsx")
    assert code == 2 and "unknown extension" in err


def test_every_duckdb_type_renders_in_json(chain: dict[str, Path]) -> None:
    sql = (
        "SELECT INTERVAL 1 DAY + INTERVAL 90 MINUTE AS i, "
        "'6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID AS u, 'nan'::DOUBLE AS nan, "
        "[1, 2] AS l, {'a': 1, 'b': 'x'} AS s, MAP {'k': 2} AS m, "
        "TIMESTAMPTZ '2024-01-01 10:00:00+00' AS t, TIME '10:00' AS tm, DATE '2024-01-02' AS d, "
        "1.50::DECIMAL(10, 2) AS dec, 'ab'::BLOB AS b, "
        "170141183460469231731687303715884105727::HUGEINT AS h"
    )
    for fmt in ("json", "csv", "table"):
        proc = run("query", "--data", chain["base"], sql, "--format", fmt)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    row = json.loads(run("query", "--data", chain["base"], sql, "--format", "json").stdout)[0]
    assert row["i"] == "P1DT5400S" and row["u"] == "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
    assert row["nan"] is None and row["l"] == [1, 2] and row["s"] == {"a": 1, "b": "x"}
    assert row["dec"] == 1.5 and row["b"] == "6162" and row["h"] == 2**127 - 1
    assert row["d"] == "2024-01-02" and row["tm"] == "10:00:00"


def test_a_closed_pipe_ends_quietly(chain: dict[str, Path]) -> None:
    for argv in (
        ["query", "--data", chain["base"], "SELECT * FROM range(2000000)", "--format", "csv"],
        ["query", "--data", chain["base"], "SELECT * FROM range(2000000)"],
        ["btc", "status", "--data", chain["base"]],
    ):
        proc = subprocess.Popen(
            [*CLI, *map(str, argv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
        assert "Traceback" not in err and "Exception" not in err, err
        assert code in (0, 141), (argv, code, err)


@pytest.mark.parametrize(
    ("stage", "sig", "code"),
    [
        ("chain_state", signal.SIGINT, 130),
        ("chain_state", signal.SIGTERM, 143),
        # DuckDB's queries: its own interrupt error.
        ("publish", signal.SIGINT, 130),
        ("publish", signal.SIGTERM, 143),
    ],
)
def test_an_interrupt_is_one_line_and_its_exit_code(
    chain: dict[str, Path], tmp_path: Path, stage: str, sig: signal.Signals, code: int
) -> None:
    """SIGINT or SIGTERM during a full run: one line, 130 or 143, and a rerun finishes."""
    data = tmp_path / "data"
    cmd = reindex_cmd(chain["blocks"], data, "--mode", "full", "--workers", "1", "-v")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    # The signal lands as the stage starts (-v logs each stage as it starts).
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if f"stage {stage}: run" in line:
            proc.send_signal(sig)
            break
    out, rest = proc.communicate(timeout=300)
    err = "".join(lines) + rest
    assert proc.returncode == code, err
    assert "rechain: interrupted; committed work is kept, rerun to resume" in err
    assert "Traceback" not in err, err
    reindex(chain["blocks"], data)
    assert verify(data)["ok"]


def test_progress_is_quiet_when_asked_and_logs_only_with_v(
    chain: dict[str, Path], tmp_path: Path
) -> None:
    quiet = run(
        "btc",
        "reindex",
        "--blocks",
        chain["before"],
        "--data",
        tmp_path / "q",
        "--network",
        "regtest",
        "--quiet",
    )
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    plain = run(
        "btc",
        "reindex",
        "--blocks",
        chain["before"],
        "--data",
        tmp_path / "p",
        "--network",
        "regtest",
    )
    assert "INFO" not in plain.stderr and "None" not in plain.stdout
    loud = run(
        "-v",
        "btc",
        "reindex",
        "--blocks",
        chain["before"],
        "--data",
        tmp_path / "v",
        "--network",
        "regtest",
        "--no-progress",
    )
    assert "INFO rechain.pipeline.engine.driver: stage scan: run" in loud.stderr


def test_status_and_verify_count_the_same_blocks(chain: dict[str, Path], tmp_path: Path) -> None:
    data = copy(chain["base"], tmp_path / "data")
    status = cli_json("btc", "status", "--data", data, "--json")
    checked = cli_json("verify", "--data", data, "--json")
    assert status["blocks_indexed"] == checked["blocks_indexed"]


def test_status_serves_the_commitments_recorded_for_the_set(
    chain: dict[str, Path], tmp_path: Path
) -> None:
    """``hash_serialized_3`` is computed once per state of the UTXO set and then read back, so
    a status is instant at any size; a run that changes the set makes it computed again."""
    data = copy(chain["base"], tmp_path / "data")
    first = cli_json("btc", "status", "--data", data, "--json")
    recorded = data / "reports" / "btc_utxo_set.json"
    mark = json.loads(recorded.read_text())
    assert mark["hash_serialized_3"] == first["hash_serialized_3"]
    # What is served is the record (a stand-in value shows it), while the set stands.
    recorded.write_text(json.dumps({**mark, "hash_serialized_3": "recorded"}))
    assert cli_json("btc", "status", "--data", data, "--json")["hash_serialized_3"] == "recorded"
    reindex(chain["blocks"], data)
    after = cli_json("btc", "status", "--data", data, "--json")
    assert after["hash_serialized_3"] not in ("recorded", first["hash_serialized_3"])
