"""`rechain flow checkpoint stats` (flow-go's checkpoint-collect-stats, streamed): the counts
per trie, depth, register kind and owner equal those of flow-go v0.33.1's own reader and trie
(the `flowgo stats` oracle) and of DuckDB over the `registers` table of a full read; the read
stays within its memory budget (owner counts spilled); damage publishes nothing.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, cli_json
from tests.measure import BIN, run_measured
from tests.test_flow_checkpoint import (
    CheckpointPlaces,
    corrupt_cases,
    error_place,
    readme_flow_queries,
)
from tests.test_flow_checkpoint_stream import NAME, make_checkpoint
from tests.test_flow_interop import flowgo, run  # noqa: F401  (fixture)

TABLES = (
    "flow_checkpoint_tries",
    "flow_checkpoint_depths",
    "flow_checkpoint_register_kinds",
    "flow_checkpoint_owners",
)
#: Register keys of every kind flow-go names (and one it does not).
KEYS = [
    b"a.s", b"contract_names", b"code.FlowToken", b"storage", b"public", b"private",
    b"contract", b"inbox", b"cap_con", b"cap_tag", b"path_cap", b"acc_cap", b"stored",
    b"apk_0", b"pk_b0", b"sn_4", b"public_key_2", b"uuid", b"uuid_3",
    b"account_address_state", b"AccountsStorageIDKey", b"CodesStorageIDKey", b"LatestBlock",
    b"LatestBlockProposal", b"BlockHashListBucket1", b"BlockHashListMeta",
    b"$\x00\x00\x00\x00\x00\x00\x00\x07", b"something_else",
]  # fmt: skip


def encode_key(owner: bytes, key: bytes) -> bytes:
    """flow-go's `encodeKey`: u16 part count, then per part u32 length | u16 type | value."""
    out = struct.pack(">H", 2)
    for typ, value in ((0, owner), (2, key)):
        out += struct.pack(">IH", 2 + len(value), typ) + value
    return out


def kinds_checkpoint(out: Path, registers: int, owners: int, seed: int) -> dict[str, Any]:
    """A one-trie v6 checkpoint whose registers have every kind of key, spread over `owners`
    accounts (the empty owner too: flow-go's global registers)."""
    import numpy as np
    import pyarrow as pa
    from rechain.workers import _native

    rng = np.random.default_rng(seed)
    paths = rng.integers(0, 256, size=(registers, 32), dtype=np.uint8)
    paths = paths[np.lexsort(paths[:, ::-1].T)]
    pool = [b""] + [rng.integers(0, 256, 8, dtype=np.uint8).tobytes() for _ in range(owners)]
    keys, values = [], []
    for i in range(registers):
        owner = pool[int(rng.integers(0, len(pool)))]
        keys.append(encode_key(owner, KEYS[i % len(KEYS)]))
        values.append(rng.integers(0, 256, int(rng.integers(1, 3000)), dtype=np.uint8).tobytes())
    builder = _native.FlowCheckpointBuilder(str(out), NAME)
    for lo in range(0, registers, 4096):
        hi = min(registers, lo + 4096)
        builder.push(
            pa.RecordBatch.from_arrays(
                [
                    pa.array([p.tobytes() for p in paths[lo:hi]], pa.binary(32)),
                    pa.array(keys[lo:hi], pa.binary()),
                    pa.array(values[lo:hi], pa.binary()),
                ],
                names=["path", "encoded_key", "value"],
            )
        )
    info = builder.finish()
    return {"root": info.tries[0].root, "bytes": int(info.bytes)}


def stats(cp: Path, data: Path, *extra: str) -> dict[str, Any]:
    got: dict[str, Any] = cli_json(
        "flow", "checkpoint", "stats", "--dir", cp, "--data", data, "--json", *extra
    )
    return got


def query(data: Path, sql: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = cli_json("query", "--data", data, sql, "--format", "json")
    return rows


SIZES = "registers, key_bytes, value_bytes, min_value_bytes, max_value_bytes"


def assert_equals_flowgo(oracle: dict[str, Any], data: Path, report: dict[str, Any]) -> None:
    [want] = oracle["tries"]
    [trie] = query(data, "SELECT * FROM flow_checkpoint_tries")
    for k in ("root", "leaf_nodes", "interim_nodes", "registers", "key_bytes", "value_bytes"):
        assert trie[k] == want[k], k
    assert trie["max_depth"] == want["max_depth"]
    assert trie["nodes"] == want["leaf_nodes"] + want["interim_nodes"]
    depths = query(data, "SELECT * FROM flow_checkpoint_depths ORDER BY depth")
    assert {str(d["depth"]): [d["leaf_nodes"], d["interim_nodes"]] for d in depths} == {
        k: list(v) for k, v in want["depths"].items()
    }
    kinds = query(data, f"SELECT kind, {SIZES} FROM flow_checkpoint_register_kinds")
    assert {k.pop("kind"): k for k in kinds} == want["kinds"]
    owners = query(data, f"SELECT hex(owner) AS owner, {SIZES} FROM flow_checkpoint_owners")
    assert {o.pop("owner").lower(): o for o in owners} == want["owners"]
    assert report["owners"] == len(want["owners"])
    assert report["root"] == want["root"] and report["max_depth"] == want["max_depth"]


@pytest.fixture(scope="module")
def kinds_cp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cp = tmp_path_factory.mktemp("kinds") / "cp"
    kinds_checkpoint(cp, 6000, 300, seed=11)
    return cp


def test_stats_equal_flow_go_on_every_register_kind(
    flowgo: Path,  # noqa: F811
    kinds_cp: Path,
    tmp_path: Path,
) -> None:
    oracle = run(flowgo, "stats", "--dir", kinds_cp, "--file", NAME)
    assert set(oracle["tries"][0]["kinds"]) >= {"atree slab", "domain storage", "others"}
    data = tmp_path / "d"
    report = stats(kinds_cp, data, "--memory-budget", "16M")
    assert_equals_flowgo(oracle, data, report)
    assert len(report["kinds"]) == len(oracle["tries"][0]["kinds"]) == 27
    # The empty owner (global registers) is an owner like any other, as in flow-go.
    assert query(data, "SELECT count(*) AS n FROM flow_checkpoint_owners WHERE owner = ''") == [
        {"n": 1}
    ]


def test_stats_equal_flow_go_on_a_checkpoint_it_wrote(
    flowgo: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base = tmp_path_factory.mktemp("gostats")
    run(
        flowgo,
        "gen",
        "--out",
        base / "wal",
        "--updates",
        300,
        "--registers-per-update",
        30,
        "--seed",
        7,
        "--segment-size",
        64 * 1024,
    )
    run(flowgo, "checkpoint", "--wal", base / "wal", "--out", base / "cp", "--tries", "last")
    oracle = run(flowgo, "stats", "--dir", base / "cp", "--file", NAME)
    for extra in ([], ["--trust-hashes", "--workers", "1"]):
        data = base / f"d{len(extra)}"
        report = stats(base / "cp", data, *extra)
        assert_equals_flowgo(oracle, data, report)


def test_stats_equal_duckdb_over_the_registers_of_a_full_read(
    kinds_cp: Path, tmp_path: Path
) -> None:
    """A second oracle: the registers table of `checkpoint read`, aggregated by DuckDB."""
    data = tmp_path / "d"
    cli_json("flow", "checkpoint", "read", "--dir", kinds_cp, "--data", data, "--json")
    # A small budget: the owner counts spill into many runs, merged when written.
    report = stats(kinds_cp, data, "--memory-budget", "1M", "--workers", "2")
    got = query(data, f"SELECT owner, {SIZES} FROM flow_checkpoint_owners ORDER BY owner")
    want = query(
        data,
        "SELECT owner, count(*) AS registers, sum(octet_length(encoded_key)) AS key_bytes, "
        "sum(value_size) AS value_bytes, min(value_size) AS min_value_bytes, "
        "max(value_size) AS max_value_bytes FROM registers GROUP BY owner ORDER BY owner",
    )
    assert got == want and len(got) == report["owners"] == 301
    [trie] = query(data, "SELECT * FROM flow_checkpoint_tries")
    [n] = query(data, "SELECT count(*) AS n, sum(value_size) AS v FROM registers")
    assert (trie["leaf_nodes"], trie["registers"], trie["value_bytes"]) == (n["n"], n["n"], n["v"])
    assert trie["reg_count"] == n["n"]
    # Every register's kind, counted once.
    [k] = query(data, "SELECT sum(registers) AS n FROM flow_checkpoint_register_kinds")
    assert k["n"] == n["n"]
    # The report and the summary in the data folder's meta agree with the tables.
    assert report["registers"] == n["n"] and report["nodes"] == trie["nodes"]
    assert (data / "reports" / "flow_checkpoint_stats.json").is_file()
    # The README's queries over these tables, verbatim, agree with the registers table.
    largest_sql, kinds_sql = readme_flow_queries("after `flow checkpoint stats`")
    largest = query(data, largest_sql)
    top = query(
        data,
        "SELECT hex(owner) AS owner, count(*) AS registers, "
        "sum(value_size + octet_length(encoded_key)) AS bytes FROM registers "
        "GROUP BY owner ORDER BY bytes DESC LIMIT 10",
    )
    assert largest == top and len(largest) == 10
    kinds = query(data, kinds_sql)
    assert sum(r["registers"] for r in kinds) == n["n"]
    assert sum(r["value_bytes"] for r in kinds) == n["v"]


def test_summary_json_and_config(kinds_cp: Path, tmp_path: Path) -> None:
    data = tmp_path / "d"
    conf = tmp_path / "job.toml"
    conf.write_text(
        f'[flow.checkpoint.stats]\ndir = "{kinds_cp}"\ndata = "{data}"\nmemory-budget = "8M"\n'
    )
    code, out, err = cli("flow", "checkpoint", "stats", "--config", conf)
    assert code == 0, err
    assert "registers 6,000 of 301 owner(s)" in out and "max depth" in out, out
    got = stats(kinds_cp, data, "--config", str(conf))
    assert got["memory_budget"] == 8 << 20 and got["generation"] == 2
    # Only the newest generation stays.
    for t in TABLES:
        assert [p.name for p in (data / "parquet" / t).iterdir()] == ["000002"], t


def test_truncated_checkpoint_is_a_clear_error_and_publishes_nothing(
    kinds_cp: Path, tmp_path: Path
) -> None:
    import shutil

    data = tmp_path / "d"
    stats(kinds_cp, data)
    before = {t: query(data, f"SELECT * FROM {t}") for t in TABLES[:3]}
    bad = tmp_path / "bad"
    places = CheckpointPlaces(kinds_cp, NAME)
    for label, victim, _, damage in corrupt_cases(kinds_cp, NAME):
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(kinds_cp, bad)
        [c for c in corrupt_cases(bad, NAME) if c[0] == label][0][2]()
        code, _, err = cli("flow", "checkpoint", "stats", "--dir", bad, "--data", data, "--json")
        assert code != 0, label
        # The damaged file, at the offset the format puts the damage's check (stats refuse a
        # version but 6 at its field, before reading the file as that version).
        want = 2 if damage[0] == "version" else places.place(victim, damage)
        assert error_place(err) == (str(bad / victim), want), (label, err)
        for t in TABLES:
            assert [p.name for p in (data / "parquet" / t).iterdir()] == ["000001"], (label, t)
        assert not (data / ".checkpoint-stats-spill").exists()
    assert {t: query(data, f"SELECT * FROM {t}") for t in TABLES[:3]} == before
    # Nothing there yet: a damaged checkpoint leaves no table behind.
    fresh = tmp_path / "fresh"
    code, _, err = cli("flow", "checkpoint", "stats", "--dir", bad, "--data", fresh)
    assert code != 0
    assert not (fresh / "parquet").exists() or not any((fresh / "parquet").iterdir())


def test_stats_of_ten_times_the_budget_stay_within_it(tmp_path: Path) -> None:
    budget = 16 << 20
    small = tmp_path / "small"
    make_checkpoint(small, 2000, 2000, seed=1)
    big = tmp_path / "big"
    # 100,000 registers, each of its own owner: 24 MB of owner counts, spilled past 2 MiB.
    info = make_checkpoint(big, 100_000, 2000, seed=2)
    assert info["bytes"] >= 10 * budget

    def measure(cp: Path, data: Path) -> tuple[dict[str, Any], int]:
        cmd = [
            str(BIN),
            "flow",
            "checkpoint",
            "stats",
            "--dir",
            str(cp),
            "--data",
            str(data),
            "--json",
            "--memory-budget",
            str(budget),
        ]
        done, rss, _ = run_measured(cmd)
        return json.loads(done.stdout), rss.peak_root

    _, base_rss = measure(small, tmp_path / "d0")
    got, rss = measure(big, tmp_path / "d1")
    print(
        f"\ncheckpoint {info['bytes'] >> 20} MiB, budget {budget >> 20} MiB: peak RSS "
        f"{rss >> 20} MiB (baseline {base_rss >> 20} MiB), stats {got['total_s']:.1f} s"
    )
    assert rss - base_rss <= budget
    assert (got["root"], got["registers"]) == (info["root"], 100_000)
    assert got["owners"] == len(query(tmp_path / "d1", "SELECT owner FROM flow_checkpoint_owners"))
