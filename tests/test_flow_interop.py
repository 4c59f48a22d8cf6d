"""Interop with flow-go v0.33.1 itself (the `flowgo` oracle in tests/flow_go).

Both directions, on WALs with thousands of updates across several segments, with overwrites,
deletes (empty values) and duplicate paths inside one update:

* flow-go's writer writes a WAL; rechain decodes every segment and replays it on its MTrie
  forest, and every root equals the one flow-go computed while writing;
* rechain's generator writes a WAL; flow-go's own replay rebuilds the same roots, and the two
  generators (same workload) write byte-identical segments.

The oracle is built from the Go module proxy by tests/flow_go/build.sh into a cache directory
(RECHAIN_FLOWGO_CACHE, default ~/.cache/rechain/flowgo), rebuilt only when its sources change.
Without Go these tests fail: they are the proof of compatibility, not an optional extra.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from rechain.workers import _native

from tests.conftest import oracle_tools, wal_fragments

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "tests" / "flow_go"
CACHE = Path(os.environ.get("RECHAIN_FLOWGO_CACHE", Path.home() / ".cache" / "rechain" / "flowgo"))

UPDATES = 3000
PER_UPDATE = 12
SEGMENT = 256 * 1024  # small segments, so a few thousand updates span many of them
EMPTY_ROOT = "568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9189e429c5749"


@pytest.fixture(scope="module")
def flowgo() -> Path:
    oracle_tools("flow-go", "go")
    proc = subprocess.run(
        ["bash", str(HARNESS / "build.sh"), str(CACHE)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"building the flow-go oracle failed:\n{proc.stderr}"
    binary = Path(proc.stdout.strip().splitlines()[-1])
    assert binary.is_file()
    return binary


def run(binary: Path, *args: object) -> dict[str, Any]:
    proc = subprocess.run(
        [str(binary), *map(str, args)], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def segments(wal: Path) -> list[tuple[int, Path]]:
    return [(n, Path(p)) for n, p in _native.flow_list_segments(wal)]


def replay_in_rechain(wal: Path) -> tuple[Any, list[str], list[pa.RecordBatch]]:
    """Decodes every segment (asserting each is clean) and applies it in WAL order."""
    forest = _native.FlowForest()
    roots: list[str] = []
    batches = []
    for n, path in segments(wal):
        batch, info = _native.flow_decode_segment(str(path), n)
        assert info.error is None, info.error
        assert info.segment == n and batch.num_rows == info.records
        batches.append(batch)
        roots.extend(r for r in forest.apply(batch) if r is not None)
    return forest, roots, batches


@pytest.fixture(scope="module")
def go_wal(flowgo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    wal = tmp_path_factory.mktemp("flowgo") / "wal"
    out = run(
        flowgo,
        "gen",
        "--out",
        wal,
        "--updates",
        UPDATES,
        "--registers-per-update",
        PER_UPDATE,
        "--seed",
        11,
        "--segment-size",
        SEGMENT,
    )
    return wal, out


def test_empty_root_matches_flow_go(go_wal: tuple[Path, dict[str, Any]]) -> None:
    _, out = go_wal
    assert _native.flow_empty_root() == out["empty_root"] == EMPTY_ROOT


def test_flow_go_wal_replays_to_flow_go_roots(go_wal: tuple[Path, dict[str, Any]]) -> None:
    wal, out = go_wal
    assert len(out["segments"]) >= 5
    forest, roots, batches = replay_in_rechain(wal)
    assert len(roots) == UPDATES == len(out["roots"])
    pairs = enumerate(zip(roots, out["roots"], strict=True))
    mismatch = next((i for i, (a, b) in pairs if a != b), None)
    assert mismatch is None, f"first differing root after update {mismatch}"
    assert forest.root_hex == out["final_root"]
    assert forest.updates_applied == UPDATES
    assert forest.register_count() == out["registers"]
    assert forest.reg_size() == out["reg_size"]

    # The workload really exercises overwrites, deletes and duplicates.
    records = pa.Table.from_batches(batches)
    assert pc.all(pc.equal(records["op"], "update")).as_py()
    assert pc.sum(records["n_paths"]).as_py() == UPDATES * PER_UPDATE
    values = pc.list_flatten(records["values"])
    deletes = pc.sum(pc.equal(pc.binary_length(values), 0)).as_py()
    assert deletes > UPDATES  # ~10% of writes
    paths = pc.list_flatten(records["paths"])
    assert pc.count_distinct(paths).as_py() < len(paths) * 7 // 10  # ~38% rewrite known paths
    # Each parent root is the previous update's root.
    parents = records["parent_root"].to_pylist()
    assert parents == [EMPTY_ROOT, *out["roots"][:-1]]

    # The current payloads: one row per allocated register, in path order.
    regs = pa.Table.from_batches(list(forest.payloads(batch_rows=1000)))
    assert regs.num_rows == out["registers"]
    assert regs.column("path").to_pylist() == sorted(regs.column("path").to_pylist())
    assert pc.min(regs["value_size"]).as_py() > 0
    assert pc.all(pc.equal(pc.binary_length(regs["owner"]), 8)).as_py()


def test_large_updates_replay_in_parallel_to_flow_go_roots(flowgo: Path, tmp_path: Path) -> None:
    """Updates of 2,500 registers: both halves of the root hold far more than the 64 items
    (`PARALLEL_MIN_ITEMS`) that make the update split them into subtries updated and hashed
    on their own threads, and every root is still flow-go's, as with one thread."""
    updates, per_update = 4, 2500
    wal = tmp_path / "wal"
    out = run(
        flowgo,
        "gen",
        "--out",
        wal,
        "--updates",
        updates,
        "--registers-per-update",
        per_update,
        "--seed",
        21,
    )
    parallel = _native.FlowForest(threads=2)
    sequential = _native.FlowForest(threads=1)
    roots: dict[int, list[str]] = {1: [], 2: []}
    for n, path in segments(wal):
        batch, info = _native.flow_decode_segment(str(path), n)
        assert info.error is None, info.error
        for threads, forest in ((2, parallel), (1, sequential)):
            roots[threads].extend(r for r in forest.apply(batch) if r is not None)
    assert roots[2] == out["roots"] == roots[1]
    assert len(roots[2]) == updates
    assert parallel.root_hex == out["final_root"]
    assert parallel.register_count() == out["registers"] == sequential.register_count()
    assert parallel.reg_size() == out["reg_size"] == sequential.reg_size()
    # The parallel path was taken (at least at every update's root), the sequential never.
    assert parallel.parallel_subtries >= updates
    assert sequential.parallel_subtries == 0
    # ~240 chained permutations per new leaf, the same work on either path.
    assert parallel.hash_permutations == sequential.hash_permutations
    assert parallel.hash_permutations > updates * per_update * 200


def test_rechain_wal_replays_in_flow_go(flowgo: Path, tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    gen = _native.flow_generate(str(wal), UPDATES, PER_UPDATE, seed=12, segment_size=SEGMENT)
    assert len(gen.segments) >= 5
    before = sorted(p.name for p in wal.iterdir())
    out = run(flowgo, "replay", "--wal", wal)
    assert out["updates"] == UPDATES
    assert out["roots"] == gen.roots
    assert out["final_root"] == gen.final_root
    assert out["registers"] == gen.registers
    assert out["reg_size"] == gen.reg_size
    assert sorted(p.name for p in wal.iterdir()) == before  # the oracle leaves the WAL alone
    # And rechain's own replay of its own WAL agrees.
    forest, roots, _ = replay_in_rechain(wal)
    assert roots == gen.roots


def test_generators_write_identical_bytes(flowgo: Path, tmp_path: Path) -> None:
    go_dir, rs_dir = tmp_path / "go", tmp_path / "rs"
    updates, per, seed, seg = 400, 25, 5, 64 * 1024
    out = run(
        flowgo,
        "gen",
        "--out",
        go_dir,
        "--updates",
        updates,
        "--registers-per-update",
        per,
        "--seed",
        seed,
        "--segment-size",
        seg,
    )
    gen = _native.flow_generate(str(rs_dir), updates, per, seed=seed, segment_size=seg)
    assert gen.segments == out["segments"]
    assert len(out["segments"]) >= 3
    for name in out["segments"]:
        assert (go_dir / name).read_bytes() == (rs_dir / name).read_bytes(), name
    assert gen.roots == out["roots"]


def test_corrupt_and_torn_segments(flowgo: Path, tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    run(
        flowgo,
        "gen",
        "--out",
        wal,
        "--updates",
        200,
        "--registers-per-update",
        40,
        "--seed",
        3,
        "--segment-size",
        64 * 1024,
    )
    segs = segments(wal)
    assert len(segs) >= 3
    n, victim = segs[1]
    clean, clean_info = _native.flow_decode_segment(str(victim), n)
    assert clean_info.error is None and clean.num_rows >= 2
    # Record starts (a full or first fragment) walked from the format, not by the reader.
    starts = [at for at, _, kind in wal_fragments(victim.read_bytes()) if kind in (1, 2)]
    assert clean.column("offset").to_pylist() == starts
    second = starts[1]

    # A flipped byte inside the second record: the first record survives, the error names the
    # segment and the offset of the fragment whose checksum fails.
    bad = tmp_path / "bad"
    shutil.copytree(wal, bad)
    data = bytearray((bad / victim.name).read_bytes())
    data[second + 3] ^= 0x40  # its first fragment's stored CRC
    (bad / victim.name).write_bytes(bytes(data))
    batch, info = _native.flow_decode_segment(str(bad / victim.name), n)
    assert batch.num_rows == 1
    assert info.error.kind == "checksum"
    assert (info.error.segment, info.error.offset) == (n, second)
    with pytest.raises(_native.FlowWalError) as exc:
        _native.flow_decode_segment(str(bad / victim.name), n, strict=True)
    assert (exc.value.segment, exc.value.offset, exc.value.kind) == (n, second, "checksum")
    assert exc.value.retryable is False
    # flow-go's replay stops silently there and reports success (spec §7.1).
    silent = run(flowgo, "replay", "--wal", bad)
    assert silent["updates"] < 200

    # A segment cut at the page boundary inside a record that spans pages: torn, reported at
    # the record's start, with the records before it intact.
    page = 32 * 1024
    spanning = None
    for seg_no, path in segs:
        offsets = [at for at, _, kind in wal_fragments(path.read_bytes()) if kind in (1, 2)]
        for i in range(len(offsets) - 1):
            if offsets[i] // page != (offsets[i + 1] - 1) // page:
                spanning = (seg_no, path, i, offsets[i])
                break
        if spanning:
            break
    assert spanning, "the workload has records spanning pages"
    seg_no, path, index, start = spanning
    torn = tmp_path / "torn"
    torn.write_bytes(path.read_bytes()[: (start // page + 1) * page])
    tbatch, tinfo = _native.flow_decode_segment(str(torn), seg_no)
    assert tinfo.torn is True
    assert tinfo.error.kind == "torn_record"
    assert (tinfo.error.segment, tinfo.error.offset) == (seg_no, start)
    assert tbatch.num_rows == index

    # A gap in the segment numbers.
    gap = tmp_path / "gap"
    shutil.copytree(wal, gap)
    (gap / segs[1][1].name).unlink()
    with pytest.raises(_native.FlowWalError) as exc:
        _native.flow_list_segments(str(gap))
    assert exc.value.kind == "segment_gap"


def test_unknown_parent_root_stops_the_forest(go_wal: tuple[Path, dict[str, Any]]) -> None:
    wal, out = go_wal
    (n0, p0), (n1, p1) = segments(wal)[:2]
    forest = _native.FlowForest()
    batch, _ = _native.flow_decode_segment(str(p1), n1)  # skips segment 0
    with pytest.raises(_native.FlowWalError) as exc:
        forest.apply(batch)
    assert exc.value.kind == "unknown_parent_root"
    assert (exc.value.segment, exc.value.offset) == (n1, batch.column("offset")[0].as_py())
    assert exc.value.roots == []
    assert forest.root_hex == EMPTY_ROOT and forest.updates_applied == 0
    first, _ = _native.flow_decode_segment(str(p0), n0)
    roots = forest.apply(first)
    assert roots == out["roots"][: first.num_rows]
