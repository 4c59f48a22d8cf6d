"""Disk and permission faults: a data folder on a full file system, a read-only data folder, a
missing blocks folder. Each gives one clear line and a non-zero exit, never a traceback, and a
full disk keeps what was committed: after more space (or a move) the run resumes to the state
of an undisturbed run.

The small file systems are tmpfs mounts made by the test. CI runs as root, so there they must
mount: a root that cannot mount fails; only a run as another user, which CI never is, skips
them, with that reason (printed by `-rs`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, verify
from rechain.schemas import rocksdb as layout

from tests.conftest import cli, gen_chain, reindex

SHARD = "64K"


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs needs root (CI runs as root); this is uid {os.geteuid()}")
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"root cannot mount a tmpfs: {proc.stderr.strip()}"
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def remount(where: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(where)], check=True)


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("diskchain")
    gen_chain(root, "--blocks", "12000", "--file-size", "512K", "--seed", "3")
    return root / "blocks"


@pytest.fixture(scope="module")
def undisturbed(chain: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("ref") / "data"
    result = reindex(chain, data, "--shard-size", SHARD)
    with DataDir(data, readonly=True) as d:
        return {"result": result, "digest": digest(d), "data": data}


def failed_run(blocks: Path, data: Path) -> str:
    code, out, err = cli(
        "btc",
        "reindex",
        "--blocks",
        blocks,
        "--data",
        data,
        "--network",
        "regtest",
        "--no-progress",
        "--shard-size",
        SHARD,
    )
    assert code != 0, out
    assert "Traceback" not in err
    return err


def committed_bytes(data: Path) -> int:
    with DataDir(data, readonly=True) as d:
        return sum(json.loads(v)["committed_pos"] for _, v in d.items(layout.CF_BTC_FILES))


def test_full_disk_is_a_clear_error_and_the_run_resumes(
    chain: Path, undisturbed: dict[str, Any], tmp_path: Path
) -> None:
    with tmpfs(tmp_path / "small", "2M") as mnt:
        data = mnt / "data"
        err = failed_run(chain, data)
        line = err.strip().splitlines()[-1]
        assert line.startswith("rechain: error: data folder ") and str(data) in line, err
        assert "no space left" in line
        # The last checkpoint: shards committed before the disk filled up.
        done = committed_bytes(data)
        assert done > 0
        moved = tmp_path / "moved"
        shutil.copytree(data, moved)
        # Free space where it is and resume there...
        remount(mnt, "size=256M")
        resumed = reindex(chain, data, "--shard-size", SHARD)
        assert resumed["run"]["shards"] < undisturbed["result"]["run"]["shards"]
        with DataDir(data, readonly=True) as d:
            assert digest(d) == undisturbed["digest"]
        assert verify(data)["ok"]
    # ...or resume from a copy on a bigger disk.
    reindex(chain, moved, "--shard-size", SHARD)
    with DataDir(moved, readonly=True) as d:
        assert digest(d) == undisturbed["digest"]


def test_read_only_data_folder(undisturbed: dict[str, Any], chain: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "64M") as mnt:
        shutil.copytree(undisturbed["data"], mnt / "data")
        remount(mnt, "ro")
        for data in (mnt / "data", mnt / "new"):
            err = failed_run(chain, data)
            assert err.strip().splitlines()[-1] == (
                f"rechain: error: {data}: cannot use data folder: Read-only file system"
            )
        remount(mnt, "rw")
        # Nothing was changed by the refused runs.
        with DataDir(mnt / "data", readonly=True) as d:
            assert digest(d) == undisturbed["digest"]


def test_missing_blocks_folder(tmp_path: Path) -> None:
    err = failed_run(tmp_path / "nope", tmp_path / "data")
    assert err.strip() == f"rechain: error: {tmp_path / 'nope'}: blocks folder not found"
