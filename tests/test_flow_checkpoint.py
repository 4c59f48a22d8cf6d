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
from typing import Any, NamedTuple

import pytest
from rechain.pipeline.flow.checkpoint import checkpoint_bytes, list_checkpoints
from rechain.pipeline.store.datadir import DataDir
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
        flowgo,
        "gen",
        "--out",
        out_dir,
        "--updates",
        UPDATES,
        "--registers-per-update",
        PER_UPDATE,
        "--seed",
        21,
        "--segment-size",
        SEGMENT,
    )
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
        oracle = run(
            flowgo, "read-checkpoint", "--dir", cp, "--file", "checkpoint.00000000", "--verify"
        )
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
    table = query(
        tmp_path / "d-last",
        "SELECT hex(path) AS p, hex(encoded_key) AS k, hex(value) AS v FROM registers",
    )
    assert len(stored) == len(table) == facts["registers"]
    for row in table:
        key, value = bytes.fromhex(row["k"]), bytes.fromhex(row["v"])
        want = b"\x01" + len(key).to_bytes(4, "big") + key + value
        assert stored[bytes.fromhex(row["p"])] == want
    # Trusting the stored leaf hashes (interior hashes still recomputed) reads the same.
    trusted = cli_json(
        "flow",
        "checkpoint",
        "read",
        "--dir",
        tmp_path / "last",
        "--data",
        tmp_path / "d-trust",
        "--trust-leaf-hashes",
        "--json",
    )
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
        assert info.error is None
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
    w = cli_json(
        "flow",
        "checkpoint",
        "write",
        "--data",
        data,
        "--out",
        out,
        "--root",
        facts["final_root"],
        "--json",
    )
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
    oracle = run(
        flowgo, "read-checkpoint", "--dir", out, "--file", f"checkpoint.{last:08d}", "--verify"
    )
    [t] = oracle["tries"]
    assert t["root"] == facts["final_root"] and t["valid"] is True
    assert t["reg_count"] == t["registers"] == facts["registers"] == w["reg_count"]
    # A root the data folder does not hold is refused before anything is written.
    code, _, err = cli(
        "flow", "checkpoint", "write", "--data", data, "--out", tmp_path / "x", "--root", "00" * 32
    )
    assert code != 0 and "not " + "00" * 32 in err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())
    # The parts are folded on threads: any count gives flow-go's bytes.
    for threads in (1, 3):
        out_t = tmp_path / f"out{threads}"
        cli_json(
            "flow",
            "checkpoint",
            "write",
            "--data",
            data,
            "--out",
            out_t,
            "--threads",
            threads,
            "--json",
        )
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
    first = cli_json(
        "flow",
        "replay",
        "--wal",
        part,
        "--data",
        tmp_path / "d1",
        "--no-progress",
        "--checkpoint-every",
        "3",
        "--checkpoint-dir",
        cps,
        "--json",
    )
    numbers = [n for n, _ in list_checkpoints(cps)]
    assert numbers == [s for s in keep if (s + 1) % 3 == 0]
    # Resume on the full WAL: only the segments after the latest checkpoint are replayed.
    resumed = cli_json(
        "flow",
        "replay",
        "--wal",
        wal_dir,
        "--data",
        tmp_path / "d2",
        "--no-progress",
        "--checkpoint",
        cps,
        "--json",
    )
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
    paged = cli_json(
        "flow",
        "replay",
        "--wal",
        wal_dir,
        "--data",
        tmp_path / "d3",
        "--no-progress",
        "--checkpoint",
        cps,
        "--memory-budget",
        str(budget),
        "--json",
    )
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
        trusted = cli_json(
            "flow",
            "replay",
            "--wal",
            wal_dir,
            "--data",
            tmp_path / d,
            "--no-progress",
            "--checkpoint",
            cps,
            "--trust-hashes",
            "--json",
            *extra,
        )
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


def corrupt_cases(cp: Path, name: str) -> list[tuple[str, str, Any, tuple[Any, ...]]]:
    """(label, damaged file, the damage done to `cp`, the damage as `CheckpointPlaces.place`
    takes it)."""
    part3 = cp / f"{name}.003"
    top = cp / f"{name}.016"
    size = part3.stat().st_size
    cut = size - 7
    return [
        ("flip in a subtrie part", part3.name, lambda: flip(part3, size // 2), ("flip", size // 2)),
        ("flip in the top part", top.name, lambda: flip(top, 20), ("flip", 20)),
        ("flip in the header", name, lambda: flip(cp / name, 9), ("flip", 9)),
        ("truncated part", part3.name, lambda: part3.write_bytes(part3.read_bytes()[:cut]),
         ("truncate", cut)),
        ("missing part", f"{name}.011", lambda: (cp / f"{name}.011").unlink(), ("missing",)),
        ("wrong version", name, lambda: set_version(cp / name, 5), ("version", 5)),
    ]  # fmt: skip


def error_place(err: str) -> tuple[str, int]:
    """The file and offset a reader's error names (`<file> offset <n>: ...`)."""
    found = re.search(r"error: (\S+) offset (\d+):", err)
    assert found, err
    return found[1], int(found[2])


def flip(path: Path, at: int) -> None:
    b = bytearray(path.read_bytes())
    b[at] ^= 0x10
    path.write_bytes(bytes(b))


def set_version(path: Path, v: int) -> None:
    b = bytearray(path.read_bytes())
    b[2:4] = v.to_bytes(2, "big")
    path.write_bytes(bytes(b))


# An independent model of where a v6 checkpoint reader must report a damaged byte (spec
# flow-ledger.md §5.2-§5.7), written from the format, not from the reader: the tests compare
# the file and offset of each error with it.
LEAF, INTERIOR_LEN, TRIE_LEN = 0, 51, 56
# An interior node's child indices (§5.2): a child out of descendants-first order is named
# at the field of the index that is wrong.
LEFT_FIELD, RIGHT_FIELD = 35, 43


class CpNode(NamedTuple):
    start: int
    leaf: bool
    height: int
    path: bytes  # a leaf's own; an interior node's: a leaf path under it (§5.4)
    left: int  # child indices as stored (0 = nil)
    right: int


def u(b: bytes, at: int, n: int) -> int:
    return int.from_bytes(b[at : at + n], "big")


def parse_nodes(b: bytes, at: int, count: int, lookup: Any) -> list[CpNode]:
    """`count` node records (§5.2) from offset `at`; `lookup(i, nodes)` resolves a child index."""
    nodes: list[CpNode] = []
    for _ in range(count):
        height = u(b, at + 1, 2)
        if b[at] == LEAF:
            nodes.append(CpNode(at, True, height, b[at + 35 : at + 67], 0, 0))
            at += 71 + u(b, at + 67, 4)
        else:
            left, right = u(b, at + LEFT_FIELD, 8), u(b, at + RIGHT_FIELD, 8)
            under = lookup(left or right, nodes)
            nodes.append(CpNode(at, False, height, under.path, left, right))
            at += INTERIOR_LEN
    return nodes


def bit(path: bytes, i: int) -> int:
    return (path[i // 8] >> (7 - i % 8)) & 1


class CheckpointPlaces:
    """The nodes of every part of a good v6 checkpoint, and where a reader must name damage
    put in a copy of it: `place(file, damage, mode)` for a flipped byte (`("flip", at)`, the
    byte xor 0x10, as `flip`), a truncated part, a missing part or a changed version. `mode`
    is the hashes the reader recomputes: "full", "interior" (leaf hashes trusted) or "none"
    (stored hashes trusted in the subtrie parts; the top part is always re-hashed).

    A checkpoint of one trie is streamed: the parts' footers and the top part (parsed, its
    CRC checked) come first, its nodes are hashed after the parts; several tries are loaded
    in memory: part by part, each node checked as it is read."""

    def __init__(self, cp: Path, name: str) -> None:
        self.name = name
        self.main = (cp / name).read_bytes()
        self.bytes = [(cp / f"{name}.{i:03d}").read_bytes() for i in range(17)]
        self.parts: list[list[CpNode]] = []
        for b in self.bytes[:16]:
            self.parts.append(parse_nodes(b, 4, u(b, len(b) - 12, 8), lambda c, ns: ns[c - 1]))
        self.flat = [n for p in self.parts for n in p]
        top = self.bytes[16]
        self.subtrie_total = len(self.flat)
        assert u(top, 4, 8) == self.subtrie_total
        self.top = parse_nodes(top, 12, u(top, len(top) - 14, 8), self.node_lookup)
        self.tries = u(top, len(top) - 6, 2)
        self.streamed = self.tries == 1

    def node_lookup(self, c: int, top: list[CpNode]) -> CpNode:
        return self.flat[c - 1] if c <= self.subtrie_total else top[c - self.subtrie_total - 1]

    def node(self, index: int, c: int) -> CpNode | None:
        """Child index `c` as a node of part `index` reads it (local in a subtrie part)."""
        if c == 0:
            return None
        if index < 16:
            return self.parts[index][c - 1]
        if c > self.subtrie_total + len(self.top):
            return None
        return self.node_lookup(c, self.top)

    def place(self, file: str, damage: tuple[Any, ...], mode: str = "full") -> int:
        if damage[0] == "missing":
            return 0
        if damage[0] == "version":
            # Version 5 is one file (§5.8): the header is read as one, and its footer's node
            # count (the 10 bytes before the CRC) cannot fit in it.
            return len(self.main) - 14 if damage[1:] == (5,) else 2
        if file == self.name:  # the main file: its own CRC (offset 74) covers bytes 0..73
            (at,) = damage[1:]
            return 0 if at < 2 else 2 if at < 4 else 4 if at < 6 else 74
        index = int(file.rsplit(".", 1)[1])
        b = self.bytes[index]
        if damage[0] == "truncate":
            # The last 4 bytes left are taken as the part's CRC, which is not the header's.
            return damage[1] - 4
        at = damage[1]
        crc = len(b) - 4
        if at < 4:
            return 0 if at < 2 else 2
        if at >= crc:
            return crc
        top = index == 16
        footer = len(b) - (14 if top else 12)
        nodes = self.top if top else self.parts[index]
        first = 12 if top else 4
        records_end = (
            nodes[-1].start
            + (INTERIOR_LEN if not nodes[-1].leaf else 71 + u(b, nodes[-1].start + 67, 4))
            if nodes
            else first
        )
        if top and at < 12:
            return 4  # the subtrie node count, against the parts' counts
        if at >= footer:
            return self._footer(b, index, at, footer, records_end, nodes)
        if top and self.streamed:  # parsed, then its CRC checked, before any hash
            if at >= records_end:
                return crc
            i = max(k for k, n in enumerate(nodes) if n.start <= at)
            n, off = nodes[i], at - nodes[i].start
            if off == 0:
                return n.start
            if n.leaf:
                return self._leaf(b, index, i, off, footer, False)
            if off >= LEFT_FIELD:
                field = LEFT_FIELD if off < RIGHT_FIELD else RIGHT_FIELD
                c = u(b, n.start + field, 8) ^ (0x10 << 8 * (field + 7 - off))
                if c >= i + 1 + self.subtrie_total:
                    return n.start + field
            return crc
        if at >= records_end:  # a trie record (§5.3)
            t = records_end + (at - records_end) // TRIE_LEN * TRIE_LEN
            field = at - t
            if field < 8:
                c = u(b, t, 8) ^ (0x10 << 8 * (7 - field))
                return t if c and self.node(16, c) is None else t + 24
            return crc if field < 24 else t + 24  # counts are not checked; the root hash is
        i = max(k for k, n in enumerate(nodes) if n.start <= at)
        return self._node(b, index, i, at - nodes[i].start, footer, mode)

    def _footer(self, b: bytes, index: int, at: int, footer: int, end: int, nodes: Any) -> int:
        top = index == 16
        shift = 8 * (footer + 7 - at)
        if at < footer + 8:
            count = len(nodes) ^ (0x10 << shift)
            room = footer - (12 if top else 4) - (self.tries * TRIE_LEN if top else 0)
            if count > room // INTERIOR_LEN:
                return footer  # cannot fit
            if not top and self.streamed:
                # The counts are summed first; the top part's total then differs, and the
                # parts' CRCs say which count is damaged.
                return len(b) - 4
            if count > len(nodes):
                return footer  # records read up to the footer
            if not top:
                return nodes[count].start  # node records left over before the footer
        raise AssertionError(f"no model for damage at {at} of part {index}")

    def _node(self, b: bytes, index: int, i: int, off: int, footer: int, mode: str) -> int:
        n = (self.top if index == 16 else self.parts[index])[i]
        s, top, crc = n.start, index == 16, len(b) - 4
        leaf_hashed = top or mode == "full"
        if off == 0:
            return s  # node type
        if off == 1 or (off == 2 and (not n.leaf or (n.height ^ 0x10) > 256)):
            return s + 1  # height: above 256, or not its children's plus one
        if off == 2:  # a leaf's height: its hash, or its parent's height check
            return s + 3 if leaf_hashed else self._parent(index, i, 1)
        if off < 35:  # the stored hash
            if leaf_hashed or (not n.leaf and mode == "interior"):
                return s + 3
            return self._parent(index, i, 3) if mode == "interior" else crc
        if n.leaf:
            return self._leaf(b, index, i, off, footer, leaf_hashed)
        # A child index: order, the child's height, the leaf paths under it, then the hash.
        own = i + 1 + (self.subtrie_total if top else 0)
        field = LEFT_FIELD if off < RIGHT_FIELD else RIGHT_FIELD
        c = u(b, s + field, 8) ^ (0x10 << 8 * (field + 7 - off))
        if c >= own:
            return s + field  # the index that is out of order
        children = [n.left, n.right]
        children[field == RIGHT_FIELD] = c
        left, right = (self.node(index, x) for x in children)
        if any(k is not None and k.height + 1 != n.height for k in (left, right)):
            return s + 1
        if left is None and right is None:
            return s
        depth = 256 - n.height
        paths_ok = (left is None or bit(left.path, depth) == 0) and (
            right is None or bit(right.path, depth) == 1
        )
        if left is not None and right is not None:
            paths_ok = paths_ok and all(
                bit(left.path, k) == bit(right.path, k) for k in range(depth)
            )
        if top:
            return s + 3 if paths_ok else s  # top nodes: hash checked before the paths
        if not paths_ok:
            return s
        return s + 3 if mode != "none" else crc

    def _leaf(self, b: bytes, index: int, i: int, off: int, footer: int, hashed: bool) -> int:
        n = (self.top if index == 16 else self.parts[index])[i]
        s, crc = n.start, len(b) - 4
        if off < 67:  # the path
            if index < 16 and off == 35:
                return s  # its first 4 bits are the subtrie position: the wrong part
            return s + 3 if hashed else self._path_check(index, i, off - 35)
        if off < 71:
            return s + 71  # payload length: not what the key and value take
        key_len = u(b, s + 71, 4)
        if off < 75 or s + 75 + key_len <= s + off < s + 79 + key_len:
            # A key or value length: read as stored, up to the footer, then the payload length.
            d = bytearray(b[s + 71 : s + 79 + key_len])
            d[off - 71] ^= 0x10
            k = u(d, 0, 4)
            if s + 75 + k > footer:
                return s + 75
            at = s + 75 + k
            v = u(bytes(d) + b[s + 79 + key_len :], k + 4, 4) if at + 4 <= footer else None
            if v is None:
                return at
            if at + 4 + v > footer:
                return at + 4
            return s + 71
        if off < 75 + key_len:
            return crc  # the key is not hashed: only the part's CRC covers it
        return s + 3 if hashed else crc

    def _parent(self, index: int, i: int, field: int) -> int:
        """The parent of node `i` of subtrie part `index` checks it (`field` of the parent's
        record) if it is in the same part; otherwise the part's CRC fails first."""
        nodes = self.parts[index]
        for n in nodes[i + 1 :]:
            if not n.leaf and i + 1 in (n.left, n.right):
                return n.start + field
        return len(self.bytes[index]) - 4

    def _path_check(self, index: int, i: int, k: int) -> int:
        """A leaf path byte `k` changed, its hash trusted: the first node from it on whose
        path is off its place (`bad_path_order` at that node): children's paths that disagree
        with their side or each other, or (streamed) a leaf not after the part's leaf before
        it; otherwise the part's CRC."""
        nodes = self.parts[index]
        path = bytearray(nodes[i].path)
        path[k] ^= 0x10
        paths = {i + 1: bytes(path)}
        before = [n.path for n in nodes[:i] if n.leaf]
        last = before[-1] if before else None
        for j in range(i, len(nodes)):
            n = nodes[j]
            if n.leaf:
                mine = paths.get(j + 1, n.path)
                if self.streamed and last is not None and mine <= last:
                    return n.start
                last = mine
                continue
            if not ({n.left, n.right} & paths.keys()):
                continue
            lp = paths.get(n.left) or (nodes[n.left - 1].path if n.left else None)
            rp = paths.get(n.right) or (nodes[n.right - 1].path if n.right else None)
            depth = 256 - n.height
            if (lp and bit(lp, depth)) or (rp and not bit(rp, depth)):
                return n.start
            if lp and rp and any(bit(lp, x) != bit(rp, x) for x in range(depth)):
                return n.start
            paths[j + 1] = lp or rp
        return len(self.bytes[index]) - 4


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
    places = CheckpointPlaces(good, name)
    for index, (label, victim, _, damage) in enumerate(corrupt_cases(good, name)):
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(good, bad)
        corrupt_cases(bad, name)[index][2]()  # the same damage, on the copy
        code, _, err = cli("flow", "checkpoint", "read", "--dir", bad, "--data", data, "--json")
        assert code != 0, label
        # The damaged file, at the offset the format puts the damage's check.
        assert error_place(err) == (str(bad / victim), places.place(victim, damage)), (label, err)
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
