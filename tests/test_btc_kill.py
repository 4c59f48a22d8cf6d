"""kill -9 at random wall-clock moments, then rerun: every resumed folder ends in the state of
an uninterrupted run (the kills by name at each commit boundary are in test_kill_points.py).
A short version runs in `make test`; `make soak` sets RECHAIN_KILL_POINTS (the attempts)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, verify

from tests import conftest
from tests.conftest import gen_chain, kill_after

#: Killed runs attempted per test: each is killed or, having finished first, compared.
ATTEMPTS = int(os.environ.get("RECHAIN_KILL_POINTS", "4"))


def reindex_cmd(blocks: Path, data: Path, mode: str = "headers") -> list[str]:
    return conftest.reindex_cmd(
        blocks, data, "--workers", "2", "--shard-size", "64K", "--mode", mode
    )


def run_to_end(blocks: Path, data: Path, mode: str = "headers") -> float:
    # No time limit: a reindex of the module's chain takes what the host gives it.
    t0 = time.monotonic()
    proc = subprocess.run(reindex_cmd(blocks, data, mode), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return time.monotonic() - t0


def content(data: Path) -> dict[str, str]:
    assert verify(data)["ok"]
    with DataDir(data, readonly=True) as d:
        return digest(d)


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("killchain")
    gen_chain(
        root,
        "--blocks",
        "60000",
        "--file-size",
        "1M",
        "--side-branches",
        "10",
        "--orphans",
        "5",
        "--shuffle-window",
        "256",
        "--seed",
        "11",
    )
    return root / "blocks"


@pytest.mark.parametrize("mode", ["headers", "full"])
def test_killed_runs_resume_to_the_same_state(chain: Path, tmp_path: Path, mode: str) -> None:
    ref = tmp_path / "ref"
    full = run_to_end(chain, ref, mode)
    want = content(ref)
    rng = random.Random(1234)
    data = tmp_path / "killed"
    kills = 0
    # Kill moments spread over an uninterrupted run's time on this host (start-up, scanning and
    # commits, linking, publishing). A resumed run has less left to do and may finish before
    # its kill: its folder is compared, then the sequence starts again from an empty one.
    for _ in range(ATTEMPTS):
        if kill_after(reindex_cmd(chain, data, mode), rng.uniform(0.3, max(0.3, 0.9 * full))):
            kills += 1
        else:
            assert content(data) == want
            shutil.rmtree(data)
    # A run from an empty folder outlasts most of these moments: some kill landed.
    assert kills >= 1
    run_to_end(chain, data, mode)
    assert content(data) == want
