"""kill -9 at random moments, then rerun: the final state equals an uninterrupted run's."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from rechain.pipeline.store import DataDir
from rechain.pipeline.verify import digest, verify

from tests import conftest
from tests.conftest import gen_chain, kill_after

KILL_POINTS = int(os.environ.get("RECHAIN_KILL_POINTS", "4"))


def reindex_cmd(blocks: Path, data: Path, mode: str = "headers") -> list[str]:
    return conftest.reindex_cmd(
        blocks, data, "--workers", "2", "--shard-size", "64K", "--mode", mode
    )


def run_to_end(blocks: Path, data: Path, mode: str = "headers") -> float:
    t0 = time.monotonic()
    proc = subprocess.run(
        reindex_cmd(blocks, data, mode), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return time.monotonic() - t0


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
    with DataDir(ref, readonly=True) as d:
        want = digest(d)
    rng = random.Random(1234)
    data = tmp_path / "killed"
    kills = attempts = 0
    # Kill points spread over the whole run: start-up, scanning/commits, linking, publishing.
    # A resumed run has less left to do, so a run that finishes before its kill point starts
    # the sequence again from an empty folder.
    while kills < KILL_POINTS and attempts < 3 * KILL_POINTS:
        attempts += 1
        if kill_after(reindex_cmd(chain, data, mode), rng.uniform(0.3, full)):
            kills += 1
        else:
            shutil.rmtree(data)
    assert kills == KILL_POINTS
    run_to_end(chain, data, mode)
    with DataDir(data, readonly=True) as d:
        assert digest(d) == want
    assert verify(data)["ok"]
