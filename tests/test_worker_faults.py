"""Scan workers that die or fail: killed workers are retried to an identical result; a shard that
fails on its bytes is skipped once, reported with file/offset/reason, and the run finishes.

Faults come from ``RECHAIN_FAULT`` (``workers/fault_injection.py``), which the Ray workers of a
fresh CLI process inherit; so these runs are subprocesses with their own Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.bitcoin.scan_log import skipped_from
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, verify

from tests.conftest import gen_chain, reindex, time_limit


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("faultchain")
    gen_chain(root, "--blocks", "6000", "--file-size", "256K", "--orphans", "2", "--seed", "5")
    return root / "blocks"


SHARD = "32K"


@pytest.fixture(scope="module")
def undisturbed(chain: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("ref") / "data"
    result = reindex(chain, data, "--workers", "2", "--shard-size", SHARD)
    with DataDir(data, readonly=True) as d:
        return {"result": result, "digest": digest(d)}


def faulty_reindex(blocks: Path, data: Path, fault: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RECHAIN_FAULT": fault, "RAY_AUTH_MODE": "disabled"}
    argv = [sys.executable, "-m", "rechain.pipeline.cli", "btc", "reindex"]
    argv += ["--blocks", str(blocks), "--data", str(data), "--network", "regtest"]
    argv += ["--no-progress", "--json", "--workers", "2", "--shard-size", SHARD]
    limit = time_limit(blocks)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=limit)


def test_killed_workers_are_retried_to_the_same_result(
    chain: Path, undisturbed: dict[str, Any], tmp_path: Path
) -> None:
    markers = [tmp_path / f"killed-{seq}" for seq in (1, 4, 9)]
    fault = ";".join(f"kill:{seq}:{m}" for seq, m in zip((1, 4, 9), markers, strict=True))
    data = tmp_path / "data"
    proc = faulty_reindex(chain, data, fault)
    assert proc.returncode == 0, proc.stderr
    # Each marker is made by the attempt that then SIGKILLed its own worker.
    assert all(m.exists() for m in markers)
    out = json.loads(proc.stdout)
    assert out["tip_hash"] == undisturbed["result"]["tip_hash"]
    with DataDir(data, readonly=True) as d:
        assert digest(d) == undisturbed["digest"]
    assert verify(data)["ok"]


def shard_place(blocks: Path, seq: int) -> tuple[str, int, int, int]:
    """Where a failed shard `seq` is reported, walked here from the shard plan and the files,
    not with rechain's reader: shards are a fixed grid of SHARD bytes over each blk file in
    file order, numbered across files from 0; a blk file (XORed with xor.dat's key) is records
    of regtest magic, u32 LE size and block. The skip runs from the shard's start (or past the
    record of the shard before that runs into it) to the shard's end; the records lost are
    those that start in the shard. Returns (file, offset, end, records lost)."""
    cell = 32 * 1024  # SHARD
    key = (blocks / "xor.dat").read_bytes()
    for path in sorted(blocks.glob("blk*.dat")):
        cells = -(-path.stat().st_size // cell)
        if seq < cells:
            break
        seq -= cells
    raw = path.read_bytes()
    raw = bytes(b ^ key[i % len(key)] for i, b in enumerate(raw))
    start, bound = seq * cell, min(len(raw), (seq + 1) * cell)
    offset, lost, at = start, 0, 0
    while at < len(raw):
        assert raw[at : at + 4] == bytes.fromhex("fabfb5da"), (path.name, at)
        end = at + 8 + int.from_bytes(raw[at + 4 : at + 8], "little")
        if at < start:
            offset = max(offset, end)
        elif at < bound:
            lost += 1
        at = end
    return path.name, offset, bound, lost


def test_a_shard_failing_on_its_bytes_is_skipped_once_and_reported(
    chain: Path, undisturbed: dict[str, Any], tmp_path: Path
) -> None:
    attempts = tmp_path / "attempts"
    data = tmp_path / "data"
    proc = faulty_reindex(chain, data, f"raise:3:{attempts}")
    assert proc.returncode == 0, proc.stderr
    assert len(attempts.read_text().splitlines()) == 1, "a deterministic failure was retried"
    assert "skipping bytes" in proc.stderr
    status = json.loads(
        subprocess.run(
            [sys.executable, "-m", "rechain.pipeline.cli", "btc", "status"]
            + ["--data", str(data), "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    failed = [s for s in status["skipped"] if s["reason"] == "shard_failed"]
    assert len(failed) == 1, status["skipped"]
    skip = failed[0]
    # The file and byte range of shard 3 in the shard plan, and the records starting in it.
    name, offset, end, lost = shard_place(chain, 3)
    assert (skip["file"], skip["offset"], skip["end"]) == (name, offset, end), skip
    assert "injected fault: shard 3 cannot be decoded" in skip["detail"]
    # The coordinator went on: every other shard was committed and linked.
    ref = undisturbed["result"]
    got = json.loads(proc.stdout)
    assert ref["records"] - got["records"] == lost
    assert verify(data)["ok"]


def test_a_shard_that_kills_every_worker_is_skipped_after_the_retries(
    chain: Path, undisturbed: dict[str, Any], tmp_path: Path
) -> None:
    attempts = tmp_path / "attempts"
    data = tmp_path / "data"
    proc = faulty_reindex(chain, data, f"kill-always:2:{attempts}")
    assert proc.returncode == 0, proc.stderr
    # The first attempt and Ray's three retries (max_retries=3), then no more.
    assert len(attempts.read_text().splitlines()) == 4
    with DataDir(data, readonly=True) as d:
        failed = [s for s in skipped_from(d) if s["reason"] == "shard_failed"]
    assert len(failed) == 1, failed
    assert failed[0]["detail"] == "worker process died on every attempt (WorkerCrashedError)"
    assert json.loads(proc.stdout)["records"] < undisturbed["result"]["records"]
    assert verify(data)["ok"]
