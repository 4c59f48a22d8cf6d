"""The streamed `rechain flow checkpoint read` (v6, one trie; the default): bounded memory (and
`checkpoint verify`'s), same output as the in-memory read and flow-go v0.33.1, damage reported
with nothing published, kill -9 then rerun identical.

Large checkpoints are written by rechain's streaming checkpoint builder (byte for byte
flow-go's checkpoint of the same trie, see test_flow_checkpoint) from generated registers in
path order: realistic encoded keys (owner + key parts) and 2 KB values.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, cli_json
from tests.measure import BIN, run_measured
from tests.test_flow_checkpoint import (
    CheckpointPlaces,
    corrupt_cases,
    error_place,
    flip,
    rewrite_with_crcs,
)
from tests.test_flow_interop import flowgo, run  # noqa: F401  (fixture)

NAME = "checkpoint.00000000"


def make_checkpoint(out: Path, registers: int, value_size: int, seed: int) -> dict[str, Any]:
    """A one-trie v6 checkpoint of `registers` random registers, written in batches (the
    builder holds one batch), so generating it needs little memory."""
    import numpy as np
    import pyarrow as pa
    from rechain.workers import _native

    rng = np.random.default_rng(seed)
    paths = rng.integers(0, 256, size=(registers, 32), dtype=np.uint8)
    paths = paths[np.lexsort(paths[:, ::-1].T)]  # byte order: column 0 first
    builder = _native.FlowCheckpointBuilder(str(out), NAME)
    step = 4096
    for lo in range(0, registers, step):
        n = min(step, registers - lo)
        # Encoded key (flow-go `encodeKey`): 2 parts, each u32 length | u16 type | bytes.
        owner = rng.integers(0, 256, size=(n, 8), dtype=np.uint8)
        name = rng.integers(97, 123, size=(n, 12), dtype=np.uint8)
        keys = np.concatenate(
            [
                np.tile(np.frombuffer(b"\x00\x02\x00\x00\x00\x0a\x00\x00", np.uint8), (n, 1)),
                owner,
                np.tile(np.frombuffer(b"\x00\x00\x00\x0e\x00\x02", np.uint8), (n, 1)),
                name,
            ],
            axis=1,
        )
        key_len = keys.shape[1]
        values = rng.integers(0, 256, size=n * value_size, dtype=np.uint8)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.FixedSizeBinaryArray.from_buffers(
                    pa.binary(32), n, [None, pa.py_buffer(paths[lo : lo + n].tobytes())]
                ),
                pa.Array.from_buffers(
                    pa.binary(),
                    n,
                    [
                        None,
                        pa.py_buffer(np.arange(n + 1, dtype=np.int32) * key_len),
                        pa.py_buffer(keys.tobytes()),
                    ],
                ),
                pa.Array.from_buffers(
                    pa.binary(),
                    n,
                    [
                        None,
                        pa.py_buffer(np.arange(n + 1, dtype=np.int32) * value_size),
                        pa.py_buffer(values.tobytes()),
                    ],
                ),
            ],
            names=["path", "encoded_key", "value"],
        )
        builder.push(batch)
    info = builder.finish()
    return {"root": info.tries[0].root, "registers": registers, "bytes": int(info.bytes)}


def read_cmd(cp: Path, data: Path, *extra: str) -> list[str]:
    return [
        str(BIN),
        "flow",
        "checkpoint",
        "read",
        "--dir",
        str(cp),
        "--data",
        str(data),
        "--json",
        *extra,
    ]


def digest(data: Path) -> dict[str, Any]:
    code, out, err = cli("verify", "--data", data, "--json")
    assert code == 0, err + out
    return json.loads(out)


def measure(cp: Path, data: Path, budget: str) -> tuple[dict[str, Any], int]:
    done, rss, _ = run_measured(read_cmd(cp, data, "--memory-budget", budget))
    return json.loads(done.stdout), rss.peak_root


def bounded_read(tmp_path: Path, budget: int, registers: int) -> None:
    small = make_checkpoint(tmp_path / "small", 2000, 2000, seed=1)
    big = make_checkpoint(tmp_path / "big", registers, 2000, seed=2)
    assert big["bytes"] >= 10 * budget, f"checkpoint of {big['bytes'] >> 20} MiB"
    base, base_rss = measure(tmp_path / "small", tmp_path / "d0", str(budget))
    assert base["root"] == small["root"]
    got, rss = measure(tmp_path / "big", tmp_path / "d1", str(budget))
    assert got["mode"] == "streaming"
    assert (got["root"], got["registers_published"]) == (big["root"], big["registers"])
    print(
        f"\ncheckpoint {big['bytes'] >> 20} MiB, budget {budget >> 20} MiB: peak RSS "
        f"{rss >> 20} MiB (baseline {base_rss >> 20} MiB), read {got['total_s']:.1f} s"
    )
    assert rss - base_rss <= budget
    assert digest(tmp_path / "d1")["ok"]
    # `checkpoint verify` streams the same way, keeping nothing.
    verified = {}
    for cp in ("small", "big"):
        done, v_rss, _ = run_measured(
            [
                str(BIN),
                "flow",
                "checkpoint",
                "verify",
                "--dir",
                str(tmp_path / cp),
                "--json",
                "--memory-budget",
                str(budget),
            ]
        )
        verified[cp] = (json.loads(done.stdout), v_rss.peak_root)
    (v_got, v_rss), (_, v_base_rss) = verified["big"], verified["small"]
    assert (v_got["mode"], v_got["root"]) == ("streaming", big["root"])
    print(f"verify: peak RSS {v_rss >> 20} MiB (baseline {v_base_rss >> 20} MiB)")
    assert v_rss - v_base_rss <= budget


def test_streamed_read_of_ten_times_the_budget_stays_within_it(tmp_path: Path) -> None:
    bounded_read(tmp_path, 16 << 20, 100_000)  # ~205 MB


@pytest.mark.slow
def test_streamed_read_of_ten_times_a_64m_budget(tmp_path: Path) -> None:
    bounded_read(tmp_path, 64 << 20, 330_000)  # ~675 MB


@pytest.fixture(scope="module")
def go_checkpoint(flowgo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    base = tmp_path_factory.mktemp("gocp")
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
        5,
        "--segment-size",
        64 * 1024,
    )
    run(flowgo, "checkpoint", "--wal", base / "wal", "--out", base / "cp", "--tries", "last")
    return base / "cp"


def test_streamed_read_equals_the_in_memory_read_and_flow_go(
    flowgo: Path,  # noqa: F811
    go_checkpoint: Path,
    tmp_path: Path,
) -> None:
    oracle = run(flowgo, "read-checkpoint", "--dir", go_checkpoint, "--file", NAME, "--verify")
    reads = {}
    for label, extra in {
        "stream": [],
        "memory": ["--in-memory"],
        "trust": ["--trust-hashes"],
        "trust_leaves": ["--trust-leaf-hashes"],
    }.items():
        data = tmp_path / label
        reads[label] = cli_json(
            "flow",
            "checkpoint",
            "read",
            "--dir",
            go_checkpoint,
            "--data",
            data,
            "--json",
            "--memory-budget",
            "16M",
            *extra,
        )
        got = reads[label]
        assert got["mode"] == ("in_memory" if label == "memory" else "streaming"), label
        want = [{k: t[k] for k in ("root", "reg_count", "reg_size")} for t in oracle["tries"]]
        assert got["tries"] == want, label
        assert got["registers_published"] == oracle["tries"][-1]["registers"], label
        reads[label]["digest"] = json.dumps(digest(data)["digest"], sort_keys=True)
    assert reads["trust"]["verified_leaf_hashes"] is False
    # Same tables and RocksDB content, whichever path published them.
    assert len({r["digest"] for r in reads.values()}) == 1
    # The leaf hashes published agree with the in-memory read's, row for row.
    q = (
        "SELECT hex(path) p, height, hex(leaf_hash) l, hex(node_hash) n "
        "FROM register_hashes ORDER BY p"
    )
    rows = [
        cli_json("query", "--data", tmp_path / k, q, "--format", "json")
        for k in ("stream", "memory")
    ]
    assert rows[0] == rows[1] and len(rows[0]) == oracle["tries"][-1]["registers"]
    # Both writers encode the tables as declared: hashes (random bytes) uncompressed, the rest
    # zstd.
    import pyarrow.parquet as pq

    raw = {"registers": {"path"}, "register_hashes": {"path", "leaf_hash", "node_hash"}}
    for k in ("stream", "memory"):
        for table, uncompressed in raw.items():
            files = sorted((tmp_path / k / "parquet" / table).glob("*/*.parquet"))
            assert files, (k, table)
            for f in files:
                meta = pq.ParquetFile(f).metadata
                for g in range(meta.num_row_groups):
                    for c in range(meta.num_columns):
                        col = meta.row_group(g).column(c)
                        want = "UNCOMPRESSED" if col.path_in_schema in uncompressed else "ZSTD"
                        assert col.compression == want, (k, table, col.path_in_schema)


def damaged_copies(
    cp: Path, bad: Path, flips: int
) -> Iterator[tuple[str, str, Path, tuple[Any, ...]]]:
    """Copies of checkpoint `cp` at `bad`, one at a time, each with one damage: the
    `corrupt_cases`, then `flips` flipped bytes spread along parts 0 and 7 and the top part.
    Yields (label, the damaged file's name, `bad`, the damage for `CheckpointPlaces.place`)."""
    import shutil

    cases: list[tuple[str, str, Any, tuple[Any, ...]]] = list(corrupt_cases(cp, NAME))
    for index in (0, 7, 16):
        victim = cp / f"{NAME}.{index:03d}"
        size = victim.stat().st_size
        for at in range(4, size, max(1, size // flips)):
            cases.append((f"flip {victim.name}@{at}", victim.name, None, ("flip", at)))
    for label, name, action, damage in cases:
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(cp, bad)
        if action is None:
            flip(bad / name, damage[1])
        else:
            [c for c in corrupt_cases(bad, NAME) if c[0] == label][0][2]()
        yield label, name, bad, damage


def test_streamed_read_damage_names_file_and_offset_publishes_nothing(
    go_checkpoint: Path, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    cli_json("flow", "checkpoint", "read", "--dir", go_checkpoint, "--data", data, "--json")
    state = json.dumps(cli_json("flow", "status", "--data", data, "--json"), sort_keys=True)
    before = json.dumps(digest(data)["digest"], sort_keys=True)
    places = CheckpointPlaces(go_checkpoint, NAME)
    for label, victim, bad, damage in damaged_copies(go_checkpoint, tmp_path / "bad", flips=23):
        code, _, err = cli("flow", "checkpoint", "read", "--dir", bad, "--data", data, "--json")
        assert code != 0, label
        # The damaged file, at the offset the format puts the damage's check.
        assert error_place(err) == (str(bad / victim), places.place(victim, damage)), (label, err)
        after = json.dumps(cli_json("flow", "status", "--data", data, "--json"), sort_keys=True)
        assert after == state, label
    # No staged generation left behind, and the content is what it was.
    assert not list((data / "parquet").glob("*/.*.tmp"))
    assert json.dumps(digest(data)["digest"], sort_keys=True) == before


def test_leaf_off_its_place_or_no_trie_refused_by_every_read(tmp_path: Path) -> None:
    """Checksums right, content wrong (found by fuzzing, `checkpoint_stream`): a leaf whose
    path leads to another subtrie, which a read that trusts the stored hashes took (in memory
    it then failed in the SST writer with a traceback), and a checkpoint without a trie record,
    which broke a paged replay (an IndexError). Every read (and `checkpoint verify`) names the
    file and offset; nothing is published."""
    from rechain.workers import _native

    misplaced = tmp_path / "misplaced"
    misplaced.mkdir()
    make_checkpoint(misplaced, 300, 8, 1)
    part = bytearray((misplaced / f"{NAME}.003").read_bytes()[:-4])
    part[4 + 35] = 0x70  # the part's first node is a leaf: its path's first byte
    rewrite_with_crcs(misplaced, NAME, 3, bytes(part))

    empty = tmp_path / "empty"
    _native.flow_checkpoint_write(_native.FlowForest(threads=1), str(empty), NAME)
    top = (empty / f"{NAME}.016").read_bytes()[:-4]
    record = 8 + 8 + 8 + 32  # the empty trie's record, before the counts (u64, u16)
    rewrite_with_crcs(empty, NAME, 16, top[: -10 - record] + top[-10:-2] + bytes(2))

    wal = tmp_path / "wal"
    wal.mkdir()
    for cp, want in (
        (misplaced, f"{NAME}.003 offset 4: leaf path 70"),
        (empty, f"{NAME} offset 0: checkpoint holds no tries"),
    ):
        data = tmp_path / f"d-{cp.name}"
        for extra in ([], ["--in-memory"], ["--trust-hashes"], ["--trust-hashes", "--in-memory"]):
            code, _, err = cli("flow", "checkpoint", "read", "--dir", cp, "--data", data, *extra)
            assert code != 0 and want in err, (cp.name, extra, err)
        for extra in ([], ["--trust-hashes"]):
            code, _, err = cli("flow", "checkpoint", "verify", "--dir", cp, *extra)
            assert code != 0 and want in err, (cp.name, "verify", extra, err)
        # A replay from it, paged (the budget far below the checkpoint) and in memory.
        for budget in ("1K", "1G"):
            code, _, err = cli(
                "flow",
                "replay",
                "--wal",
                wal,
                "--data",
                data,
                "--checkpoint",
                cp,
                "--memory-budget",
                budget,
                "--trust-hashes",
                "--no-progress",
            )
            assert code != 0 and want in err, (cp.name, budget, err)
        assert not list((data / "parquet").glob("*/0*")), "nothing published"


def test_kill_during_streamed_read_then_rerun_is_identical(tmp_path: Path) -> None:
    cp = tmp_path / "cp"
    make_checkpoint(cp, 60_000, 2000, seed=3)
    clean = tmp_path / "clean"
    cli_json("flow", "checkpoint", "read", "--dir", cp, "--data", clean, "--json")
    want = json.dumps(digest(clean)["digest"], sort_keys=True)
    data = tmp_path / "d"
    for delay in (0.5, 1.5, 3.0):
        proc = subprocess.Popen(
            read_cmd(cp, data, "--memory-budget", "16M"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    got = cli_json("flow", "checkpoint", "read", "--dir", cp, "--data", data, "--json")
    assert got["mode"] == "streaming"
    assert json.dumps(digest(data)["digest"], sort_keys=True) == want
