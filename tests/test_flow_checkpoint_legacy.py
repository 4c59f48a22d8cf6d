"""Flow checkpoints of versions 1, 3, 4 and 5 (one file, no parts), read by `rechain flow
checkpoint read` as flow-go v0.33.1 reads them:

* flow-go's own test files (`tests/data/flow_checkpoints`, copied from flow-go's
  `ledger/complete/wal/test_data`) give the roots flow-go's versioning test publishes, and the
  register counts and sizes flow-go's `LoadCheckpoint` gives (the `flowgo` oracle);
* the v5 file is flow-go's `StoreCheckpointV5` output (written again here, byte for byte);
* damage gives the file and offset, and leaves the data folder as it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, cli, cli_json
from tests.test_flow_checkpoint import error_place
from tests.test_flow_interop import flowgo, run  # noqa: F401  (fixture)

DATA = REPO / "tests" / "data" / "flow_checkpoints"
VERSIONS = (1, 3, 4, 5)
# flow-go's checkpointer_versioning_test.go: the roots of every test_data file.
ROOTS = [
    "568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9189e429c5749",
    "f53f9696b85b7428227f1b39f40b2ce07c175f58dea2b86cb6f84dc7c9fbeabd",
    "7ac8daf34733cce3d5d03b5a1afde33a572249f81c45da91106412e94661e109",
    "63df641430e5e0745c3d99ece6ac209467ccfdb77e362e7490a830db8e8803ae",
]


def read_cp(cpdir: Path, name: str, data: Path) -> dict[str, Any]:
    return cli_json(
        "flow", "checkpoint", "read", "--dir", cpdir, "--file", name, "--data", data, "--json"
    )


def status(data: Path) -> str:
    return json.dumps(cli_json("flow", "status", "--data", data, "--json"), sort_keys=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_legacy_checkpoints_read_as_flow_go_reads_them(
    flowgo: Path,  # noqa: F811
    version: int,
    tmp_path: Path,
) -> None:
    name = f"checkpoint.v{version}"
    oracle = run(flowgo, "read-checkpoint", "--dir", DATA, "--file", name, "--verify")
    assert [t["root"] for t in oracle["tries"]] == ROOTS
    data = tmp_path / "d"
    got = read_cp(DATA, name, data)
    assert got["version"] == version and got["mode"] == "in_memory"
    want = [{k: t[k] for k in ("root", "reg_count", "reg_size")} for t in oracle["tries"]]
    assert got["tries"] == want
    assert got["root"] == ROOTS[-1]
    assert got["registers_published"] == oracle["tries"][-1]["registers"] == 4
    rows = cli_json(
        "query", "--data", data, "SELECT count(*) AS n FROM registers", "--format", "json"
    )
    assert rows == [{"n": 4}]
    st = cli_json("flow", "status", "--data", data, "--json")
    assert (st["root"], st["registers"]) == (ROOTS[-1], 4)
    code, out, err = cli("verify", "--data", data, "--json")
    assert code == 0, err + out


def test_v5_file_is_flow_go_s_own_writer_output(flowgo: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "v5"
    run(
        flowgo,
        "rewrite-checkpoint",
        "--dir",
        DATA,
        "--file",
        "checkpoint.v4",
        "--out",
        out,
        "--name",
        "checkpoint.v5",
        "--version",
        5,
    )
    assert (out / "checkpoint.v5").read_bytes() == (DATA / "checkpoint.v5").read_bytes()


def first_node_hash(good: bytes, version: int) -> int:
    """Where the first node record's stored hash lies (§5.8), walked from the format: v5 as
    v6 (§5.2: type, u16 height, hash); v4 after type, u16 height, u16 max depth and u64
    register count; v1/v3 (records after magic, version, u64 node count and u16 trie count)
    the last 32 bytes of the record: after u16 encoding version, u16 height, two u64 child
    indices, u16 max depth, u64 register count, the u16-length path, the u32-length payload
    and the hash's own u16 length."""
    if version == 5:
        return 4 + 1 + 2
    if version == 4:
        return 4 + 1 + 2 + 2 + 8
    path = 4 + 8 + 2 + 2 + 2 + 8 + 8 + 2 + 8
    payload = path + 2 + int.from_bytes(good[path : path + 2], "big")
    hash_len = payload + 4 + int.from_bytes(good[payload : payload + 4], "big")
    assert good[hash_len : hash_len + 2] == (32).to_bytes(2, "big")
    return hash_len + 2


def test_damaged_legacy_checkpoints_name_file_and_offset(tmp_path: Path) -> None:
    data = tmp_path / "d"
    read_cp(DATA, "checkpoint.v4", data)
    before = status(data)
    bad = tmp_path / "bad"
    for version in VERSIONS:
        name = f"checkpoint.v{version}"
        good = (DATA / name).read_bytes()
        # A flipped byte in the first node's hash, in its value, and a truncated file (v1 has
        # no checksum: the recomputed hashes catch the first two).
        leaf_value = good.index(b"\x00\x00\x00\x01a") + 4
        first_hash = first_node_hash(good, version)
        # v1/v3: the hash follows the leaf's value (its last byte) and the hash's length.
        assert version > 3 or first_hash == leaf_value + 3
        cases = {
            "flipped hash byte": bytearray(good),
            "flipped value byte": bytearray(good),
            "truncated": bytearray(good[: len(good) - 5]),
        }
        cases["flipped hash byte"][first_hash] ^= 0x10
        # Where each must be named (§5.8): a hash or value flip at the first node's (it is the
        # leaf) stored hash, a cut at the field the new end falls in: v4/v5 read their footer
        # (u64 node count, u16 trie count, CRC) from the new end, v1/v3 find the last trie
        # record's root hash running past it (v3 takes the last 4 bytes left as its CRC).
        places = {
            "flipped hash byte": first_hash,
            "flipped value byte": first_hash,
            "truncated": len(good) - 5 - 14
            if version >= 4
            else len(good) - 32 - (4 if version == 3 else 0),
        }
        cases["flipped value byte"][leaf_value] ^= 0x10
        for label, content in cases.items():
            shutil.rmtree(bad, ignore_errors=True)
            bad.mkdir()
            (bad / name).write_bytes(bytes(content))
            code, _, err = cli(
                "flow", "checkpoint", "read", "--dir", bad, "--file", name, "--data", data, "--json"
            )
            assert code != 0, (name, label)
            assert f"version {version}" in err, (label, err)
            assert error_place(err) == (str(bad / name), places[label]), (label, err)
            assert status(data) == before, (name, label)
