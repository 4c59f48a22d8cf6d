"""`rechain gen flow` + `rechain flow replay/status`: roots, registers, tables, bad input.

The generator computes its roots with the same forest the replay uses, so the reference roots
and register counts are flow-go's: its own replay of each generated WAL (the `flowgo` oracle).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from rechain.pipeline.runtime import local_runner
from rechain.schemas import tables

from tests.conftest import cli, cli_json, wal_fragments
from tests.test_flow_interop import flowgo, run  # noqa: F401  (fixture)


def gen(out: Path, updates: int = 1500, per: int = 8) -> dict:
    code, _, err = cli(
        "gen",
        "flow",
        out,
        "--updates",
        str(updates),
        "--registers-per-update",
        str(per),
        "--segment-size",
        "128K",
        "--seed",
        "4",
    )
    assert code == 0, err
    return json.loads((out / "expected.json").read_text())


def go_replay(flowgo: Path, wal: Path, roots: bool = True) -> dict:  # noqa: F811
    """flow-go's replay of a WAL: every root (or only the last), registers, updates."""
    out = run(flowgo, "replay", "--wal", wal, f"--roots={str(roots).lower()}")
    assert out["deletes"] == 0 and out["updates"] > 0
    return out


def test_replay_reaches_flow_gos_roots(tmp_path: Path, flowgo: Path) -> None:  # noqa: F811
    facts = gen(tmp_path / "wal")
    go = go_replay(flowgo, tmp_path / "wal")
    result = cli_json(
        "flow",
        "replay",
        "--wal",
        tmp_path / "wal",
        "--data",
        tmp_path / "d",
        "--no-progress",
        "--json",
    )
    assert result["root"] == go["final_root"]
    assert result["registers"] == go["registers"]
    assert result["updates_applied"] == go["updates"] == 1500
    segments = sorted(p.name for p in (tmp_path / "wal").iterdir() if p.name.isdigit())
    assert result["segments"] == len(segments) > 3 and facts["segments"] == segments
    st = cli_json("flow", "status", "--data", tmp_path / "d", "--json")
    for key in ("root", "updates_applied", "registers", "segments", "skipped"):
        assert st[key] == result[key]
    roots = go["roots"]
    rows = cli_json(
        "query",
        "--data",
        tmp_path / "d",
        "SELECT seq, root, op, n_paths FROM trie_updates ORDER BY seq",
        "--format",
        "json",
    )
    assert [r["root"] for r in rows] == roots
    assert {r["op"] for r in rows} == {"update"} and all(r["n_paths"] == 8 for r in rows)
    regs = cli_json(
        "query",
        "--data",
        tmp_path / "d",
        "SELECT count(*) AS n, sum(value_size) AS s FROM registers",
        "--format",
        "json",
    )
    assert regs[0]["n"] == go["registers"]
    assert result["run"]["node_store"] is None
    # Under a budget the state could outgrow (the WAL's size: the forest's objects take about
    # three times the payloads), the forest is paged to a node store from the first update:
    # the same roots, registers and tables, and the scratch store is gone after the run.
    wal_bytes = sum(p.stat().st_size for p in (tmp_path / "wal").iterdir() if p.name.isdigit())
    paged = cli_json(
        "flow",
        "replay",
        "--wal",
        tmp_path / "wal",
        "--data",
        tmp_path / "p",
        "--no-progress",
        "--memory-budget",
        str(wal_bytes),
        "--json",
    )
    store = paged["run"]["node_store"]
    assert store["nodes_written"] > 0 and store["loads"] > 0
    for key in ("root", "registers", "updates_applied", "segments"):
        assert paged[key] == result[key], key
    assert not (tmp_path / "p" / "stage" / "flow_nodes").exists()
    for sql in (
        "SELECT seq, root, parent_root, n_paths FROM trie_updates ORDER BY seq",
        "SELECT hex(path) AS p, hex(encoded_key) AS k, hex(value) AS v FROM registers ORDER BY p",
    ):
        want = cli_json("query", "--data", tmp_path / "d", sql, "--format", "json")
        assert cli_json("query", "--data", tmp_path / "p", sql, "--format", "json") == want


def test_a_flipped_byte_is_reported_with_segment_and_offset(tmp_path: Path) -> None:
    gen(tmp_path / "wal", updates=600)
    seg = tmp_path / "wal" / "00000002"
    raw = bytearray(seg.read_bytes())
    # The damage: a payload byte of the last fragment of the segment's first record split
    # across pages (types 1 full, 2 first, 4 last): its CRC (which covers that fragment's
    # payload only) fails there, a page after the record's start.
    fragments = wal_fragments(bytes(raw))
    last = next(i for i, f in enumerate(fragments) if f[2] == 4)
    start, end, _ = fragments[last]
    record = fragments[last - 1][0]
    assert fragments[last - 1][2] == 2 and record < start
    raw[(start + 7 + end) // 2] ^= 0xFF
    # Every record before the damaged one is applied (one update a record): those of the
    # segments before, and of this one up to it.
    earlier = [wal_fragments((tmp_path / "wal" / s).read_bytes()) for s in ("00000000", "00000001")]
    before = sum(f[2] in (1, 2) for f in [*earlier[0], *earlier[1], *fragments[: last - 1]])
    seg.write_bytes(bytes(raw))
    code, out, err = cli(
        "flow",
        "replay",
        "--wal",
        tmp_path / "wal",
        "--data",
        tmp_path / "d",
        "--no-progress",
        "--json",
    )
    assert code == 1, err
    result = json.loads(out)
    # The segment, and the start of the fragment whose CRC fails (§2.2).
    place = [(s["segment"], s["offset"], s["reason"]) for s in result["skipped"]]
    assert place == [(seg.name, start, "checksum")]
    assert result["updates_applied"] == before


def test_a_missing_segment_is_a_clear_error(tmp_path: Path) -> None:
    gen(tmp_path / "wal", updates=600)
    (tmp_path / "wal" / "00000001").unlink()
    code, _, err = cli(
        "flow", "replay", "--wal", tmp_path / "wal", "--data", tmp_path / "d", "--no-progress"
    )
    assert code == 2 and "wal" in err and err.count("\n") == 1


def test_in_process_and_ray_decoding_give_the_same_state(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flowgo: Path,  # noqa: F811
) -> None:
    """A small WAL is decoded in this process (no Ray); above the size rule, on Ray. Both
    must publish the same roots, registers and trie_updates rows, and reach flow-go's root."""
    gen(tmp_path / "wal", updates=400, per=6)
    go = go_replay(flowgo, tmp_path / "wal")
    states = {}
    for mode, execution in (("in_process", "threads"), ("ray", "ray")):
        monkeypatch.setenv(local_runner.EXECUTION_ENV, execution)
        data = tmp_path / mode
        result = cli_json(
            "flow",
            "replay",
            "--wal",
            tmp_path / "wal",
            "--data",
            data,
            "--no-progress",
            "--json",
            "--workers",
            "2",
        )
        assert result["run"]["decode"] == mode
        assert result["root"] == go["final_root"]
        assert result["registers"] == go["registers"]
        rows = cli_json(
            "query", "--data", data, "SELECT * FROM trie_updates ORDER BY seq", "--format", "json"
        )
        assert [r["root"] for r in rows] == go["roots"]
        regs = cli_json(
            "query",
            "--data",
            data,
            "SELECT path, value FROM registers ORDER BY path",
            "--format",
            "json",
        )
        states[mode] = (result["root"], result["registers"], rows, regs)
    assert states["in_process"] == states["ray"]
    assert len(states["ray"][2]) == 400


def test_a_replay_never_loads_pyarrow_numpy_or_the_metrics_client(tmp_path: Path) -> None:
    """The replay publishes through the Rust core's Parquet writer, so its process stays
    within flow-go's memory (pyarrow and numpy alone are ~45 MiB, prometheus_client ~12)."""
    gen(tmp_path / "wal", updates=50, per=4)
    script = (
        "import json, sys\n"
        "from rechain.pipeline.cli import main\n"
        f"code = main(['flow', 'replay', '--wal', {str(tmp_path / 'wal')!r}, '--data', "
        f"{str(tmp_path / 'd')!r}, '--no-progress'])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'pyarrow', 'numpy', 'prometheus_client', 'ray', 'duckdb'})\n"
        "print(json.dumps({'code': code, 'heavy': heavy}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout.splitlines()[-1]) == {"code": 0, "heavy": []}


def test_registers_and_register_hashes_share_their_row_groups(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flowgo: Path,  # noqa: F811
) -> None:
    """Row groups close on a byte limit too; the checkpoint writer pairs the two tables' groups,
    so they must close together."""
    import pyarrow.parquet as pq

    gen(tmp_path / "wal", updates=2000, per=12)  # > 2 steps of 4,096 registers
    monkeypatch.setattr(tables, "REGISTERS", replace(tables.REGISTERS, row_group_bytes=64 << 10))
    cli_json("flow", "replay", "--wal", tmp_path / "wal", "--data", tmp_path / "d", "--json")
    files = {
        t: pq.ParquetFile(next((tmp_path / "d" / "parquet" / t).glob("*/part-00000.parquet")))
        for t in ("registers", "register_hashes")
    }
    groups = {
        t: [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)]
        for t, f in files.items()
    }
    assert len(groups["registers"]) > 1
    assert groups["registers"] == groups["register_hashes"]
    assert sum(groups["registers"]) == go_replay(flowgo, tmp_path / "wal", False)["registers"]
    regs = files["registers"].read()
    assert regs.schema.names == ["path", "owner", "key", "value_size", "value", "encoded_key"]
    assert (
        regs.column("path").to_pylist()
        == files["register_hashes"].read().column("path").to_pylist()
    )


def test_a_checkpoint_of_several_tries_too_large_for_the_budget_is_read_in_memory(
    tmp_path: Path,
    flowgo: Path,  # noqa: F811
) -> None:
    """Tries of one checkpoint share nodes, which the paged read does not take: a resume from
    such a checkpoint (flow-go writes them) reads it in memory whatever the budget, and still
    ends at the WAL's final root."""
    from rechain.pipeline.flow.checkpoint import checkpoint_bytes
    from rechain.workers import _native

    gen(tmp_path / "wal", updates=600)
    segments = _native.flow_list_segments(str(tmp_path / "wal"))
    half = segments[: len(segments) // 2]
    forest = _native.FlowForest()
    for number, path in half:
        forest.replay_segment(str(path), number)
    cps = tmp_path / "cps"
    cps.mkdir()
    name = f"checkpoint.{half[-1][0]:08d}"
    _native.flow_checkpoint_write(forest, str(cps), name, roots=forest.roots()[-3:])
    budget = checkpoint_bytes(cps, name)
    out = cli_json(
        "flow",
        "replay",
        "--wal",
        tmp_path / "wal",
        "--data",
        tmp_path / "d",
        "--no-progress",
        "--checkpoint",
        cps,
        "--memory-budget",
        str(budget),
        "--json",
    )
    assert out["resumed_from"]["tries"] == 3 and out["resumed_from"]["paged"] is False
    go = go_replay(flowgo, tmp_path / "wal", roots=False)
    assert (out["root"], out["registers"]) == (go["final_root"], go["registers"])
    assert not (tmp_path / "d" / "stage" / "flow_nodes").exists()


def paged_peak(wal: Path, cps: Path, data: Path, budget: int) -> tuple[dict, int]:
    """A replay of `wal` resumed from the checkpoint in `cps`, paged within `budget`: its
    summary and peak RSS."""
    from tests.measure import BIN, run_measured

    done, rss, _ = run_measured(
        [
            str(BIN),
            "flow",
            "replay",
            "--wal",
            str(wal),
            "--data",
            str(data),
            "--workers",
            "2",
            "--checkpoint",
            str(cps),
            "--memory-budget",
            str(budget),
            "--no-progress",
            "--json",
        ]
    )
    out = json.loads(done.stdout)
    assert out["resumed_from"]["paged"], out["resumed_from"]
    return out, rss.peak_root


def test_a_paged_replay_on_ten_times_the_budget_stays_within_it(
    tmp_path: Path,
    flowgo: Path,  # noqa: F811
) -> None:
    """A replay resumed from a checkpoint of more than ten times `--memory-budget`, with
    segments on top, paged and published: peak RSS within the baseline plus the budget, where
    the baseline is the same command on a checkpoint of a few MiB under a budget of 1 MiB
    (Python, the native code's pages, RocksDB, the threads and the writers' fixed buffers:
    what no budget scales). The final root is the generator's."""
    from rechain.pipeline.flow.checkpoint import checkpoint_bytes, list_checkpoints

    budget = 8 << 20
    wal = tmp_path / "wal"
    code, _, err = cli(
        "gen",
        "flow",
        wal,
        "--updates",
        "1000",
        "--registers-per-update",
        "500",
        "--seed",
        "5",
        "--segment-size",
        "4M",
    )
    assert code == 0, err
    segments = sorted(p for p in wal.iterdir() if p.name.isdigit())

    def checkpoint_of(first: int, name: str) -> Path:
        part, cps = tmp_path / f"{name}-wal", tmp_path / f"{name}-cps"
        part.mkdir()
        for p in segments[:first]:
            (part / p.name).symlink_to(p)
        cli_json(
            "flow",
            "replay",
            "--wal",
            part,
            "--data",
            tmp_path / f"{name}-data",
            "--no-progress",
            "--checkpoint-every",
            str(first),
            "--checkpoint-dir",
            cps,
            "--json",
        )
        return cps

    big = checkpoint_of(len(segments) * 9 // 10, "big")
    [(_, name)] = list_checkpoints(big)
    assert checkpoint_bytes(big, name) >= 10 * budget, checkpoint_bytes(big, name)
    small = checkpoint_of(1, "small")
    two = tmp_path / "two"
    two.mkdir()
    for p in segments[:2]:
        (two / p.name).symlink_to(p)
    _, base_rss = paged_peak(two, small, tmp_path / "base", 1 << 20)
    out, rss = paged_peak(wal, big, tmp_path / "paged", budget)
    go = go_replay(flowgo, wal, roots=False)
    assert (out["root"], out["registers"]) == (go["final_root"], go["registers"])
    assert out["segments"] == len(segments) - len(segments) * 9 // 10
    assert out["run"]["node_store"]["loads"] > 0
    print(f"\npeak RSS {rss >> 20} MiB, baseline {base_rss >> 20} MiB, budget {budget >> 20} MiB")
    assert rss - base_rss <= budget
