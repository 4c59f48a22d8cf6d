"""Flow v6 checkpoints against flow-go v0.33.1 itself (the `flowgo` oracle in tests/flow_go):

* flow-go writes checkpoints (one trie, and every trie of a forest with shared nodes);
  `rechain flow checkpoint read` verifies and loads them to the same roots and counters, and
  publishes exactly the registers flow-go counts by walking its trie;
* rechain writes checkpoints (from the replay forest and, streamed, from a data folder);
  flow-go's `LoadCheckpoint` reads them to the same roots, every node hash valid, and the
  forest writer's bytes equal flow-go's own writer's for the same WAL;
* `rechain flow replay --checkpoint` resumes from the latest checkpoint, and flow-go's replay
  resumes from rechain's checkpoints too;
* damaged checkpoints fail with the file and offset, leaving the data folder as it was.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.flow_checkpoint import checkpoint_bytes, list_checkpoints
from rechain.pipeline.store import DataDir
from rechain.pipeline.verify import verify
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

from tests.conftest import REPO, cli, cli_json
from tests.test_flow_interop import flowgo, run  # noqa: F401  (fixture)

UPDATES = 400
PER_UPDATE = 15
SEGMENT = 64 * 1024


@pytest.fixture(scope="module")
def wal(flowgo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:  # noqa: F811
    out_dir = tmp_path_factory.mktemp("cpwal") / "wal"
    out = run(
        flowgo, "gen", "--out", out_dir, "--updates", UPDATES,
        "--registers-per-update", PER_UPDATE, "--seed", 21, "--segment-size", SEGMENT,
    )  # fmt: skip
    assert len(out["segments"]) >= 8
    return out_dir, out


def read_cp(cpdir: Path, data: Path, name: str | None = None) -> dict[str, Any]:
    args = ["flow", "checkpoint", "read", "--dir", cpdir, "--data", data, "--json"]
    if name:
        args += ["--file", name]
    return cli_json(*args)


def query(data: Path, sql: str) -> list[dict[str, Any]]:
    return cli_json("query", "--data", data, sql, "--format", "json")


def test_flow_go_checkpoints_read_to_flow_go_roots(
    flowgo: Path,  # noqa: F811
    wal: tuple[Path, dict[str, Any]],
    tmp_path: Path,
) -> None:
    wal_dir, facts = wal
    for which in ("last", "all"):
        cp = tmp_path / which
        written = run(flowgo, "checkpoint", "--wal", wal_dir, "--out", cp, "--tries", which)
        oracle = run(flowgo, "read-checkpoint", "--dir", cp, "--file", "checkpoint.00000000",
                     "--verify")  # fmt: skip
        assert oracle["tries"][-1]["root"] == facts["final_root"]
        if which == "all":
            assert len(oracle["tries"]) > UPDATES // 2  # many tries sharing nodes
        data = tmp_path / f"d-{which}"
        got = read_cp(cp, data)
        want = [{k: t[k] for k in ("root", "reg_count", "reg_size")} for t in written["tries"]]
        assert got["tries"] == want
        assert got["root"] == facts["final_root"]
        assert got["reg_count"] == facts["registers"]
        # Registers published = the non-empty payloads flow-go finds walking its trie.
        assert got["registers_published"] == oracle["tries"][-1]["registers"]
        rows = query(data, "SELECT count(*) AS n, count(DISTINCT path) AS p FROM registers")
        assert rows == [{"n": facts["registers"], "p": facts["registers"]}]
        st = cli_json("flow", "status", "--data", data, "--json")
        assert (st["root"], st["registers"]) == (facts["final_root"], facts["registers"])
    # RocksDB holds the same registers as the table: path -> 01 | u32 key length | key | value.
    with DataDir(tmp_path / "d-last", readonly=True) as d:
        stored = dict(d.items(layout.CF_FLOW_REGISTERS))
    table = query(tmp_path / "d-last", "SELECT hex(path) AS p, hex(encoded_key) AS k, "
                  "hex(value) AS v FROM registers")  # fmt: skip
    assert len(stored) == len(table) == facts["registers"]
    for row in table:
        key, value = bytes.fromhex(row["k"]), bytes.fromhex(row["v"])
        want = b"\x01" + len(key).to_bytes(4, "big") + key + value
        assert stored[bytes.fromhex(row["p"])] == want
    # Trusting the stored leaf hashes (interior hashes still recomputed) reads the same.
    trusted = cli_json("flow", "checkpoint", "read", "--dir", tmp_path / "last", "--data",
                       tmp_path / "d-trust", "--trust-leaf-hashes", "--json")  # fmt: skip
    assert trusted["verified_leaf_hashes"] is False
    assert (trusted["root"], trusted["reg_count"]) == (facts["final_root"], facts["registers"])


def test_rechain_checkpoints_load_in_flow_go(
    flowgo: Path,  # noqa: F811
    wal: tuple[Path, dict[str, Any]],
    tmp_path: Path,
) -> None:
    wal_dir, facts = wal
    # Forest writer: same bytes as flow-go's writer for the same final trie.
    forest = _native.FlowForest()
    for n, p in _native.flow_list_segments(str(wal_dir)):
        batch, info = _native.flow_decode_segment(p, n)
        assert info["error"] is None
        forest.apply(batch)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    _native.flow_checkpoint_write(forest, str(ours), "checkpoint.00000000")
    run(flowgo, "checkpoint", "--wal", wal_dir, "--out", theirs, "--tries", "last")
    names = sorted(p.name for p in theirs.iterdir())
    assert names == sorted(p.name for p in ours.iterdir()) and len(names) == 18
    for name in names:
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name

    # Streamed writer, from a data folder filled by a replay.
    data = tmp_path / "d"
    res = cli_json("flow", "replay", "--wal", wal_dir, "--data", data, "--no-progress", "--json")
    assert res["root"] == facts["final_root"]
    out = tmp_path / "out"
    w = cli_json("flow", "checkpoint", "write", "--data", data, "--out", out,
                 "--root", facts["final_root"], "--json")  # fmt: skip
    last = int(facts["segments"][-1])
    assert w["checkpoint"].endswith(f"checkpoint.{last:08d}")
    # Byte for byte flow-go's own checkpoint of that trie (register size as flow-go accounts
    # it, leaf hashes from the replay's register_hashes).
    assert w["cached_leaves"] == facts["registers"] and w["hashed_leaves"] == 0
    streamed = {
        p.name.removeprefix(f"checkpoint.{last:08d}"): p.read_bytes() for p in out.iterdir()
    }
    flowgo_own = {
        p.name.removeprefix("checkpoint.00000000"): p.read_bytes() for p in theirs.iterdir()
    }
    assert streamed == flowgo_own
    oracle = run(flowgo, "read-checkpoint", "--dir", out, "--file", f"checkpoint.{last:08d}",
                 "--verify")  # fmt: skip
    [t] = oracle["tries"]
    assert t["root"] == facts["final_root"] and t["valid"] is True
    assert t["reg_count"] == t["registers"] == facts["registers"] == w["reg_count"]
    # A root the data folder does not hold is refused before anything is written.
    code, _, err = cli("flow", "checkpoint", "write", "--data", data, "--out", tmp_path / "x",
                       "--root", "00" * 32)  # fmt: skip
    assert code != 0 and "not " + "00" * 32 in err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())
    # The parts are folded on threads: any count gives flow-go's bytes.
    for threads in (1, 3):
        out_t = tmp_path / f"out{threads}"
        cli_json("flow", "checkpoint", "write", "--data", data, "--out", out_t,
                 "--threads", threads, "--json")  # fmt: skip
        assert {
            p.name.removeprefix(f"checkpoint.{last:08d}"): p.read_bytes() for p in out_t.iterdir()
        } == flowgo_own, threads
    # A registers file whose rows are out of path order is refused with the file, and nothing
    # is written.
    import pyarrow.parquet as pq

    regs = sorted((data / "parquet" / "registers").glob("*/*.parquet"))[-1]
    table = pq.read_table(regs)
    pq.write_table(table.take(list(reversed(range(table.num_rows)))), regs)
    code, _, err = cli("flow", "checkpoint", "write", "--data", data, "--out", tmp_path / "y")
    assert code != 0 and "not strictly increasing" in err and regs.name in err, err
    assert not (tmp_path / "y").exists() or not any((tmp_path / "y").iterdir())


def test_replay_writes_checkpoints_and_resumes_from_them(
    flowgo: Path,  # noqa: F811
    wal: tuple[Path, dict[str, Any]],
    tmp_path: Path,
) -> None:
    wal_dir, facts = wal
    segs = [int(s) for s in facts["segments"]]
    cps = tmp_path / "cps"
    # A partial WAL (the node stopped early), checkpointed every 3 segments.
    part = tmp_path / "part"
    part.mkdir()
    keep = segs[: len(segs) - 2]
    for s in keep:
        shutil.copy(wal_dir / f"{s:08d}", part / f"{s:08d}")
    first = cli_json("flow", "replay", "--wal", part, "--data", tmp_path / "d1", "--no-progress",
                     "--checkpoint-every", "3", "--checkpoint-dir", cps, "--json")  # fmt: skip
    numbers = [n for n, _ in list_checkpoints(cps)]
    assert numbers == [s for s in keep if (s + 1) % 3 == 0]
    # Resume on the full WAL: only the segments after the latest checkpoint are replayed.
    resumed = cli_json("flow", "replay", "--wal", wal_dir, "--data", tmp_path / "d2",
                       "--no-progress", "--checkpoint", cps, "--json")  # fmt: skip
    assert resumed["resumed_from"]["number"] == numbers[-1]
    assert resumed["segments"] == len(segs) - numbers[-1] - 1
    assert resumed["root"] == facts["final_root"]
    assert resumed["registers"] == facts["registers"]
    assert 0 < resumed["updates_applied"] < first["updates_applied"] < UPDATES
    # The resumed state passes verify: its first update starts from the checkpoint's root.
    checked = verify(tmp_path / "d2")
    assert checked["ok"], checked["problems"]
    assert checked["flow"]["root_recomputed"] == facts["final_root"]
    assert resumed["resumed_from"]["paged"] is False and resumed["run"]["node_store"] is None
    # The same resume under a budget the checkpoint does not fit in (an in-memory read takes
    # about three times its size): the checkpoint is paged into a node store while it is
    # verified, the replay loads nodes through a cache of half the budget, and the state,
    # registers and checks are the same. The node store is scratch, gone after the run.
    budget = checkpoint_bytes(cps, f"checkpoint.{numbers[-1]:08d}")
    paged = cli_json("flow", "replay", "--wal", wal_dir, "--data", tmp_path / "d3",
                     "--no-progress", "--checkpoint", cps, "--memory-budget", str(budget),
                     "--json")  # fmt: skip
    assert paged["resumed_from"]["paged"] is True
    for key in ("root", "registers", "updates_applied", "segments"):
        assert paged[key] == resumed[key], key
    store = paged["run"]["node_store"]
    assert store["loads"] > 0 and store["nodes_written"] > 0
    assert store["cached_bytes"] <= budget // 2
    assert not (tmp_path / "d3" / "stage" / "flow_nodes").exists()
    registers = (
        "SELECT hex(path) AS p, hex(encoded_key) AS k, hex(value) AS v FROM registers ORDER BY p"
    )
    assert query(tmp_path / "d3", registers) == query(tmp_path / "d2", registers)
    checked = verify(tmp_path / "d3")
    assert checked["ok"], checked["problems"]
    assert checked["flow"]["root_recomputed"] == facts["final_root"]
    # Taking the stored hashes as flow-go does (paged and in memory): the same state.
    for d, extra in (("d4", ["--memory-budget", str(budget)]), ("d5", [])):
        trusted = cli_json("flow", "replay", "--wal", wal_dir, "--data", tmp_path / d,
                           "--no-progress", "--checkpoint", cps, "--trust-hashes", "--json",
                           *extra)  # fmt: skip
        assert trusted["resumed_from"]["paged"] is bool(extra)
        assert trusted["root"] == facts["final_root"]
        assert query(tmp_path / d, registers) == query(tmp_path / "d2", registers)
    # flow-go's own replay picks up rechain's latest checkpoint and replays the rest.
    node_dir = tmp_path / "node"
    shutil.copytree(wal_dir, node_dir)
    for p in cps.iterdir():
        shutil.copy(p, node_dir / p.name)
    go = run(flowgo, "replay", "--wal", node_dir, "--roots=false")
    assert go["final_root"] == facts["final_root"]
    assert go["updates"] == resumed["updates_applied"]


def corrupt_cases(cp: Path, name: str) -> list[tuple[str, str, Any]]:
    part3 = cp / f"{name}.003"
    top = cp / f"{name}.016"
    size = part3.stat().st_size
    return [
        ("flip in a subtrie part", part3.name, lambda: flip(part3, size // 2)),
        ("flip in the top part", top.name, lambda: flip(top, 20)),
        ("flip in the header", name, lambda: flip(cp / name, 9)),
        ("truncated part", part3.name, lambda: part3.write_bytes(part3.read_bytes()[: size - 7])),
        ("missing part", f"{name}.011", lambda: (cp / f"{name}.011").unlink()),
        ("wrong version", name, lambda: set_version(cp / name, 5)),
    ]


def flip(path: Path, at: int) -> None:
    b = bytearray(path.read_bytes())
    b[at] ^= 0x10
    path.write_bytes(bytes(b))


def set_version(path: Path, v: int) -> None:
    b = bytearray(path.read_bytes())
    b[2:4] = v.to_bytes(2, "big")
    path.write_bytes(bytes(b))


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as flow-go's checkpoint files carry it; bitwise, for test files of
    a few KB."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def rewrite_with_crcs(cp: Path, name: str, index: int, body: bytes) -> None:
    """Part `index` of checkpoint `name` replaced by `body` (its CRC trailer excluded) with a
    right CRC, and the header's copy of it and its own CRC set right: a file whose checksums
    all hold, damaged only where `body` differs."""
    crc = crc32c(body).to_bytes(4, "big")
    (cp / f"{name}.{index:03d}").write_bytes(body + crc)
    head = bytearray((cp / name).read_bytes())
    head[6 + 4 * index : 10 + 4 * index] = crc
    head[-4:] = crc32c(bytes(head[:-4])).to_bytes(4, "big")
    (cp / name).write_bytes(bytes(head))


def test_damaged_checkpoints_name_file_and_offset_and_leave_data_alone(
    flowgo: Path,  # noqa: F811
    wal: tuple[Path, dict[str, Any]],
    tmp_path: Path,
) -> None:
    wal_dir, facts = wal
    good = tmp_path / "good"
    run(flowgo, "checkpoint", "--wal", wal_dir, "--out", good)
    name = "checkpoint.00000000"
    data = tmp_path / "d"
    before = read_cp(good, data)
    state = json.dumps(cli_json("flow", "status", "--data", data, "--json"), sort_keys=True)
    bad = tmp_path / "bad"
    for index, (label, victim, _) in enumerate(corrupt_cases(good, name)):
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(good, bad)
        corrupt_cases(bad, name)[index][2]()  # the same damage, on the copy
        code, _, err = cli("flow", "checkpoint", "read", "--dir", bad, "--data", data, "--json")
        assert code != 0, label
        assert victim in err and "offset" in err, (label, err)
        if label == "wrong version":
            assert "version 5" in err
        after = json.dumps(cli_json("flow", "status", "--data", data, "--json"), sort_keys=True)
        assert after == state, label
    assert before["root"] == facts["final_root"]
    rows = query(data, "SELECT count(*) AS n FROM registers")
    assert rows == [{"n": facts["registers"]}]


def readme_flow_queries(section: str) -> list[str]:
    """The queries of the README's Flow examples from the comment starting `# {section}` to
    the next comment that starts with `# after`."""
    readme = (REPO / "README.md").read_text()
    flow_examples = readme.split("\nFlow:\n", 1)[1].split("\n```\n", 1)[0]
    tail = flow_examples.split(f"\n# {section}", 1)[1]
    block = re.split(r"^# after ", tail, maxsplit=1, flags=re.M)[0]
    return re.findall(r'^\$R query --data DATA "(.*)"$', block, re.M)


def test_readme_analytics_queries(
    flowgo: Path,  # noqa: F811
    wal: tuple[Path, dict[str, Any]],
    tmp_path: Path,
) -> None:
    wal_dir, facts = wal
    cp = tmp_path / "cp"
    run(flowgo, "checkpoint", "--wal", wal_dir, "--out", cp)
    data = tmp_path / "d"
    read_cp(cp, data)
    # The README's three queries after `flow checkpoint read`, verbatim.
    per_owner_sql, largest_sql, dist_sql = readme_flow_queries("after `flow checkpoint read`")
    assert "GROUP BY owner" in per_owner_sql
    per_owner = query(data, per_owner_sql)
    assert per_owner and all(r["registers"] >= 1 for r in per_owner)
    largest = query(data, largest_sql)
    assert largest[0]["bytes"] >= largest[-1]["bytes"] > 0
    dist = query(data, dist_sql)
    assert sum(r["registers"] for r in dist) == facts["registers"]
    assert all(r["up_to_bytes"] & (r["up_to_bytes"] - 1) == 0 for r in dist)
