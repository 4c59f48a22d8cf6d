"""kill -9 of `rechain flow replay` at random moments, then rerun: the final state (RocksDB
registers and roots, the summary, the Parquet tables row for row, the `rechain verify` digest)
equals an uninterrupted run's.
A short version runs in `make test`; `make soak` sets RECHAIN_KILL_POINTS (the attempts). The kills
by name at each commit boundary are in test_kill_points.py."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.flow.checkpoint import checkpoint_bytes, list_checkpoints
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import verify
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout

from tests.conftest import cli, cli_json, kill_after

#: Killed runs attempted per test: each is killed or, having finished first, compared.
ATTEMPTS = int(os.environ.get("RECHAIN_KILL_POINTS", "3"))
#: Summary fields that time the run rather than describe the state.
TIMINGS = {"publish_s", "load_s"}


def replay_cmd(wal: Path, data: Path) -> list[str]:
    # Checkpoints every 3 segments, so that kills also land inside checkpoint writes.
    return [
        sys.executable,
        "-m",
        "rechain.pipeline.cli",
        "flow",
        "replay",
        "--wal",
        str(wal),
        "--data",
        str(data),
        "--no-progress",
        "--workers",
        "2",
        "--checkpoint-every",
        "3",
        "--checkpoint-dir",
        str(checkpoint_dir(data)),
    ]


def checkpoint_dir(data: Path) -> Path:
    return data.with_name(data.name + "-checkpoints")


def checkpoint_files(data: Path) -> dict[str, str]:
    """Every file in the run's checkpoint folder and its hash (a killed writer's temporary
    files included, so that leftovers show)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(checkpoint_dir(data).iterdir())
    }


def run_to_end(wal: Path, data: Path, *extra: str) -> float:
    # No time limit: a replay of the module's WAL takes what the host gives it.
    t0 = time.monotonic()
    cmd = replay_cmd(wal, data) + list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return time.monotonic() - t0


def state(data: Path) -> dict[str, Any]:
    """Everything a Flow replay leaves behind that describes content, run details excluded."""
    out: dict[str, Any] = {}
    with DataDir(data, readonly=True) as d:
        for cf in (layout.CF_FLOW_REGISTERS, layout.CF_FLOW_ROOTS):
            h = hashlib.sha256()
            n = 0
            for key, value in d.items(cf):
                h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
                n += 1
            out[cf] = (n, h.hexdigest())
        summary = d.meta_get(fs.META_FLOW_SUMMARY)
        out["summary"] = {k: v for k, v in summary.items() if k not in TIMINGS}
        if out["summary"].get("resumed_from"):
            out["summary"]["resumed_from"] = {
                k: v for k, v in summary["resumed_from"].items() if k not in TIMINGS
            }
    for table, order in (("trie_updates", "seq"), ("registers", "path")):
        code, rows, err = cli(
            "query", "--data", data, f"SELECT * FROM {table} ORDER BY {order}", "--format", "csv"
        )
        assert code == 0, err
        out[table] = hashlib.sha256(rows.encode()).hexdigest()
    checked = verify(data)
    assert checked["ok"], checked["problems"]
    out["verify_digest"] = checked["digest"]["content"]
    return out


def killed_runs(cmd: list[str], data: Path, full: float, seed: int, finished: Any) -> int:
    """``ATTEMPTS`` runs of ``cmd`` on ``data``, each killed at a random moment of an
    uninterrupted run's time on this host (``full``). A resumed run has less left to do and may
    finish first: ``finished(data)`` checks its folder, then the sequence starts again from an
    empty one. Returns the kills that landed, asserting there was one."""
    rng = random.Random(seed)
    kills = 0
    for _ in range(ATTEMPTS):
        if kill_after(cmd, rng.uniform(0.3, max(0.3, 0.9 * full))):
            kills += 1
        else:
            finished(data)
            shutil.rmtree(data)
            shutil.rmtree(checkpoint_dir(data), ignore_errors=True)
    # A run from an empty folder outlasts most of these moments: some kill landed.
    assert kills >= 1
    return kills


@pytest.fixture(scope="module")
def wal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("flowkill") / "wal"
    code, _, err = cli(
        "gen",
        "flow",
        out,
        "--updates",
        "3000",
        "--registers-per-update",
        "8",
        "--segment-size",
        "128K",
        "--seed",
        "9",
    )
    assert code == 0, err
    return out


def test_killed_replays_rerun_to_the_same_state(wal: Path, tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    full = run_to_end(wal, ref)
    want = state(ref)
    facts = json.loads((wal / "expected.json").read_text())
    assert want["summary"]["root"] == facts["final_root"]
    # The checkpoints are byte-identical to the uninterrupted run's, with nothing left over.
    written = checkpoint_files(ref)
    assert len(written) >= 2 * 18 and not any(n.startswith("writing-") for n in written)

    def same(data: Path) -> None:
        assert state(data) == want
        assert checkpoint_files(data) == written

    data = tmp_path / "killed"
    killed_runs(replay_cmd(wal, data), data, full, 4321, same)
    run_to_end(wal, data)
    same(data)
    st = cli_json("flow", "status", "--data", data, "--json")
    assert st["root"] == facts["final_root"]


def test_killed_paged_replays_rerun_to_the_same_state(wal: Path, tmp_path: Path) -> None:
    """Replays resuming from a checkpoint too large for their memory budget (so the forest is
    paged into a node store), killed at random moments: the rerun ends in the uninterrupted
    paged run's state, which holds the WAL's final root, and no node store is left behind."""
    segments = sorted(p.name for p in wal.iterdir() if p.name.isdigit())
    half = tmp_path / "half"
    half.mkdir()
    for name in segments[: len(segments) // 2]:
        shutil.copy(wal / name, half / name)
    cps = tmp_path / "cps"
    base = tmp_path / "base"
    run_to_end(
        half, base, "--checkpoint-every", str(len(segments) // 2), "--checkpoint-dir", str(cps)
    )
    [(_, name)] = list_checkpoints(cps)
    # An in-memory read takes about three times the checkpoint's size: this budget pages.
    paged = ["--checkpoint", str(cps), "--memory-budget", str(checkpoint_bytes(cps, name))]
    ref = tmp_path / "ref"
    full = run_to_end(wal, ref, *paged)
    want = state(ref)
    facts = json.loads((wal / "expected.json").read_text())
    assert want["summary"]["root"] == facts["final_root"]
    with DataDir(ref, readonly=True) as d:
        run = d.meta_get(fs.META_FLOW_RUN)
    assert run["node_store"]["loads"] > 0

    def same(data: Path) -> None:
        assert state(data) == want
        assert not (data / "stage" / "flow_nodes").exists()

    data = tmp_path / "killed"
    killed_runs(replay_cmd(wal, data) + paged, data, full, 99, same)
    run_to_end(wal, data, *paged)
    same(data)
