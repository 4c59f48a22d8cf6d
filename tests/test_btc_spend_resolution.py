"""The chain state on Ray workers (``RECHAIN_CHAIN_STATE=partitioned``, the rule with
``--ray-address``, which also sends publish's outputs copies and the tx index's first build to
Ray): spends resolved by txid
partition and every chunk applied on its own must
end exactly where the coordinator's in-order apply does, on a fresh chain with side branches
and orphans, through reorgs that unwind and apply on top of a stored set, after a kill -9 at
each of its commit points, with workers that cannot reach the data folder, and for a block
that breaks a consensus rule. Oracle: the in-order path's verify digest content (block index,
best chain, UTXO set, undo data, tx index, every table), hash_serialized_3 and the
generator's UTXO set."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.bitcoin import chain_parts, spend_resolution
from rechain.pipeline.bitcoin.stages import chain_state
from rechain.pipeline.runtime import executor
from rechain.pipeline.runtime.executor import Executor
from rechain.pipeline.store.datadir import DataDir

from tests.conftest import cli_json, gen_chain, reindex, reindex_cmd, run_killed_at
from tests.test_btc_full import REGTEST_MAGIC, _mine_on
from tests.test_btc_reorg import content, node_folder

SEQUENTIAL = {executor.PARTITIONED_ENV: "sequential"}


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of a few blocks (runs in this process), so that a chain of hundreds of blocks
    is many chunks whose coins come from each other."""
    monkeypatch.setattr(chain_state, "SEGMENT_BLOCKS", 40)
    monkeypatch.setattr(chain_state, "MIN_CHUNK_BYTES", 1)
    monkeypatch.setattr(chain_state, "MAX_CHUNK_BYTES", 60_000)


def full(blocks: Path, data: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    with monkeypatch.context() as m:
        m.setenv(executor.PARTITIONED_ENV, mode)
        return reindex(blocks, data, "--mode", "full")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("resolve")
    facts = gen_chain(
        root,
        "--blocks",
        "400",
        "--side-branches",
        "3",
        "--orphans",
        "2",
        "--tx-per-block",
        "1:12",
        "--file-size",
        "200000",
        "--seed",
        "23",
    )
    return root, facts


def test_partitioned_equals_in_order_and_runs_on_ray(
    node: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, facts = node
    ref = full(root / "blocks", tmp_path / "ref", "sequential", monkeypatch)
    got = full(root / "blocks", tmp_path / "got", "partitioned", monkeypatch)
    assert got["run"]["chain_state_applied"] == facts["tip_height"] + 1
    assert (got["full"]["utxo_count"], got["full"]["total_amount"]) == (
        facts["utxo_count"],
        facts["total_amount"],
    )
    assert got["full"] == ref["full"]
    assert content(tmp_path / "got") == content(tmp_path / "ref")
    # Many chunks, their work in Ray tasks: events and apply per chunk, resolve per partition.
    with DataDir(tmp_path / "got", readonly=True) as d:
        parts = len(chain_parts.parts(d))
    assert parts > 10
    tasks = sum(got["run"]["placement"]["chain_state"]["ray_tasks"].values())
    assert tasks >= 2 * parts + 2
    assert "ray_tasks" not in ref["run"]["placement"]["chain_state"]
    # Publish's outputs copies went to Ray with it: split tasks, then a copy task per group
    # of segments.
    assert 2 <= sum(got["run"]["placement"]["publish"]["ray_tasks"].values()) < parts
    # And the tx index's first build: split tasks, then a build task per range of txids.
    assert sum(got["run"]["placement"]["indexes"]["ray_tasks"].values()) >= 2
    assert "ray_tasks" not in ref["run"]["placement"]["indexes"]


def test_rounds_of_a_small_budget_apply_on_the_rounds_before(
    node: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds of a few chunks each: every round reads what it leaves to the set from the
    rounds committed before it."""
    root, _ = node
    ref = full(root / "blocks", tmp_path / "ref", "sequential", monkeypatch)
    monkeypatch.setattr(spend_resolution, "round_bytes", lambda budget: 200_000)
    cut = spend_resolution.rounds
    planned: list[int] = []

    def counted(specs: list[Any], max_bytes: int) -> list[Any]:
        planned.append(len(cut(specs, max_bytes)))
        return cut(specs, max_bytes)

    monkeypatch.setattr(spend_resolution, "rounds", counted)
    got = full(root / "blocks", tmp_path / "got", "partitioned", monkeypatch)
    assert planned and planned[0] >= 3
    assert got["full"] == ref["full"]
    assert content(tmp_path / "got") == content(tmp_path / "ref")


def test_rounds_cut_at_their_size() -> None:
    specs = [
        spend_resolution.ChunkSpec(i, (), (), (), (), "regtest", b"", size)
        for i, size in enumerate([5, 5, 5, 12, 1])
    ]
    cut = spend_resolution.rounds(specs, 10)
    assert [[s.first for s in r] for r in cut] == [[0, 1], [2], [3], [4]]


def test_workers_without_the_data_folder_return_their_parts(
    node: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers on other machines hand back their part's files as bytes: same result."""
    root, _ = node
    ref = full(root / "blocks", tmp_path / "ref", "sequential", monkeypatch)
    monkeypatch.setattr(Executor, "workers_share_data_folder", property(lambda self: False))
    got = full(root / "blocks", tmp_path / "got", "partitioned", monkeypatch)
    assert got["full"] == ref["full"]
    assert content(tmp_path / "got") == content(tmp_path / "ref")


def test_reorgs_apply_on_the_stored_set_as_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain grown in steps and reorganised 6 deep and back: each partitioned run unwinds
    and applies on the set the runs before stored, and ends where the in-order path does."""
    root = tmp_path / "node"
    gen_chain(
        root,
        "--blocks",
        "260",
        "--tx-per-block",
        "1:12",
        "--file-size",
        "120K",
        "--seed",
        "11",
        "--reorg",
        "6",
        "--reorg-back",
    )
    ref = tmp_path / "ref-headers"
    reindex(root / "blocks", ref, "--mode", "headers")
    rows = cli_json(
        "query",
        "--data",
        ref,
        'SELECT file, "offset" FROM headers ORDER BY file, "offset"',
        "--format",
        "json",
    )
    tail = [(int(r["file"]), int(r["offset"])) for r in rows[-9:]]
    blocks = tmp_path / "blocks"
    for i, cut in enumerate([tail[0], tail[7], None]):
        node_folder(root, blocks, cut)
        run = full(blocks, tmp_path / "got", "partitioned", monkeypatch)
        shutil.rmtree(tmp_path / "ref", ignore_errors=True)
        full(blocks, tmp_path / "ref", "sequential", monkeypatch)
        assert content(tmp_path / "got") == content(tmp_path / "ref"), f"step {i}"
        if i > 0:
            assert run["run"]["chain_state_unwound"] > 0


@pytest.mark.parametrize("point", ["chain_state.spends_written", "chain_state.applied"])
def test_killed_partitioned_runs_resume_to_the_in_order_result(
    node: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    root, _ = node
    data = tmp_path / "data"
    monkeypatch.setenv(executor.PARTITIONED_ENV, "partitioned")
    # A subprocess: the default chunks; the 400 blocks are one segment's chunks.
    run_killed_at(reindex_cmd(root / "blocks", data, "--mode", "full"), point)
    killed = content(data)
    full(root / "blocks", data, "partitioned", monkeypatch)
    full(root / "blocks", tmp_path / "ref", "sequential", monkeypatch)
    assert killed != content(tmp_path / "ref")
    assert content(data) == content(tmp_path / "ref")


#: One task of each kind the full mode runs on Ray workers (function/submission index).
RAY_TASKS = (
    "decode_and_stage_unit/1",  # bodies
    "chunk_events/0",  # chain state: a chunk's spends and outputs by partition
    "resolve_partition/1",  # chain state: one partition's spends resolved
    "_apply_task/0",  # chain state: a chunk applied
    "split_spends/0",  # publish: spends split by outputs group
    "_copy_group/0",  # publish: a group of outputs segments copied with `spent` set
    "split_txids/0",  # tx index: txids split by range
    "_build_range/0",  # tx index: one range built
)


def test_killed_workers_of_every_heavy_stage_are_retried_to_the_in_order_result(
    node: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt of one task of each kind SIGKILLs its Ray worker (a lost node, an
    OOM kill): Ray runs it again, and the run ends where the in-order run does."""
    root, _ = node
    data = tmp_path / "data"
    markers = {task: tmp_path / f"killed-{i}" for i, task in enumerate(RAY_TASKS)}
    fault = ";".join(f"kill:{task}:{m}" for task, m in markers.items())
    env = {**os.environ, executor.PARTITIONED_ENV: "partitioned", "RECHAIN_FAULT": fault}
    cmd = reindex_cmd(root / "blocks", data, "--mode", "full", "--workers", "2")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Each marker is made by the attempt that then killed its own worker.
    assert [t for t, m in markers.items() if not m.exists()] == []
    full(root / "blocks", tmp_path / "ref", "sequential", monkeypatch)
    assert content(data) == content(tmp_path / "ref")


def test_an_invalid_block_is_the_in_order_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = gen_chain(tmp_path / "node", "--blocks", "200", "--no-xor")
    block = _mine_on(facts["tip_hash"], facts["tip_height"] + 1, ("ab" * 32, 3), 1_700_000_000)
    blocks = tmp_path / "node" / "blocks"
    last = sorted(blocks.glob("blk*.dat"))[-1]
    nxt = blocks / f"blk{int(last.stem[3:]) + 1:05d}.dat"
    nxt.write_bytes(REGTEST_MAGIC + struct.pack("<I", len(block)) + block)
    got = full(blocks, tmp_path / "got", "partitioned", monkeypatch)
    ref = full(blocks, tmp_path / "ref", "sequential", monkeypatch)
    (inv,) = got["full"]["invalid_blocks"]
    assert inv["reason"] == "bad-txns-inputs-missingorspent"
    assert got["tip_hash"] == facts["tip_hash"]
    assert got["full"] == ref["full"]
    assert content(tmp_path / "got") == content(tmp_path / "ref")


def test_partitions_follow_the_budget() -> None:
    assert spend_resolution.partitions(1 << 30, 1 << 30, 2) == 8
    assert spend_resolution.partitions(1 << 20, 1 << 30, 16) == 32
    assert spend_resolution.partitions(1 << 50, 1 << 20, 2) == spend_resolution.MAX_PARTITIONS
