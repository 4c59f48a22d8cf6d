"""A blk file the node was still writing: its last record cut mid-header or mid-body (at the
end of the file, or followed by the zero-filled preallocation Core leaves), then completed by
the node, which also starts new files. The rerun must end exactly where a fresh reindex of the
completed folder does, in header and full mode, with and without xor.dat, and when a run on
the torn folder was killed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, verify

from tests.conftest import cli_json, gen_chain, reindex, reindex_cmd, run_killed_at

#: (mode, where the record is cut, xor.dat, what follows the cut)
CASES = [
    ("headers", "header", True, "eof"),
    ("headers", "header", False, "zeros"),
    ("headers", "body", True, "eof"),
    ("headers", "body", False, "eof"),
    ("headers", "body", True, "zeros"),
    ("headers", "body", False, "zeros"),
    ("full", "header", True, "eof"),
    ("full", "header", False, "zeros"),
    ("full", "body", True, "eof"),
    ("full", "body", False, "zeros"),
    ("full", "body", True, "zeros"),
]


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, tuple[Path, dict[str, Any]]]:
    out = {}
    for xor in (True, False):
        root = tmp_path_factory.mktemp(f"torn-xor{int(xor)}")
        facts = gen_chain(
            root,
            "--blocks",
            "400",
            "--tx-per-block",
            "1:4",
            "--file-size",
            "40K",
            "--side-branches",
            "2",
            "--seed",
            "5",
            "--xor" if xor else "--no-xor",
        )
        out[xor] = (root, facts)
    return out


@pytest.fixture(scope="module")
def fresh(
    chains: dict[bool, tuple[Path, dict[str, Any]]], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[bool, str], Path]:
    """A fresh reindex of each complete folder in each mode: what every rerun must equal."""
    out = {}
    for xor, (root, _) in chains.items():
        for mode in ("headers", "full"):
            data = tmp_path_factory.mktemp(f"fresh-{int(xor)}-{mode}")
            reindex(root / "blocks", data, "--mode", mode)
            out[(xor, mode)] = data
    return out


def torn_folder(
    root: Path, ref: Path, dest: Path, cut_in: str, tail: str
) -> tuple[Path, list[Path]]:
    """The node's folder earlier on: the files before the third-last, that file cut inside
    its middle record (a header or a body), and the files after it not yet started. Returns
    the folder and the files the node completes later."""
    full = root / "blocks"
    files = sorted(full.glob("blk*.dat"))
    assert len(files) >= 4
    blocks = dest / "blocks"
    blocks.mkdir(parents=True)
    if (full / "xor.dat").exists():
        shutil.copy(full / "xor.dat", blocks / "xor.dat")
    for f in files[:-3]:
        shutil.copy(f, blocks / f.name)
    last = files[-3]
    rows = cli_json(
        "query",
        "--data",
        ref,
        f'SELECT "offset", size FROM headers WHERE file = {len(files) - 3} ORDER BY "offset"',
        "--format",
        "json",
    )
    record = rows[len(rows) // 2]
    offset, size = int(record["offset"]), int(record["size"])
    cut = offset + 8 + (40 if cut_in == "header" else 80 + (size - 80) // 2)
    raw = last.read_bytes()
    torn = raw[:cut] + (bytes(len(raw) - cut) if tail == "zeros" else b"")
    (blocks / last.name).write_bytes(torn)
    return blocks, files[-3:]


def complete(blocks: Path, files: list[Path]) -> None:
    for f in files:
        shutil.copy(f, blocks / f.name)


def content(data: Path) -> Any:
    with DataDir(data, readonly=True) as d:
        return digest(d)


@pytest.mark.parametrize(("mode", "cut_in", "xor", "tail"), CASES)
def test_a_torn_record_is_read_again_once_the_node_completes_it(
    chains: Any, fresh: Any, tmp_path: Path, mode: str, cut_in: str, xor: bool, tail: str
) -> None:
    root, facts = chains[xor]
    ref = fresh[(xor, mode)]
    blocks, later = torn_folder(root, ref, tmp_path, cut_in, tail)
    data = tmp_path / "data"
    first = reindex(blocks, data, "--mode", mode)
    assert first["tip_height"] < facts["tip_height"]
    again = reindex(blocks, data, "--mode", mode)
    if mode == "full" and cut_in == "body" and tail == "zeros":
        # The header scan cannot tell a half-written body in the preallocation from a
        # finished one (the zeros confirm its size): the copy whose decode failed there is
        # decoded again on every run until it decodes (by the body pass, or by the chain
        # state when it is on the best chain above the applied one, whose verdict the body
        # pass then stages: ``unreached_units``).
        decoded_again = again["run"].get("units", 0) + again["run"].get("unreached_units", 0)
        assert decoded_again >= 1
    else:
        # Nothing changed on disk: the torn tail is scanned again, the tree not relinked.
        assert "link_s" not in again["run"]
    assert again["tip_hash"] == first["tip_hash"]
    complete(blocks, later)
    second = reindex(blocks, data, "--mode", mode)
    assert second["tip_hash"] == facts["tip_hash"]
    if mode == "full":
        # The completed blocks extend the applied chain: publish read only their spends, kept
        # every segment below them and the off-chain rows of the parts that did not change.
        work = second["run"]
        assert work["publish_spends_appended"] == 1
        assert work["publish_segments_kept"] >= 1 and work["publish_offchain_parts_kept"] >= 1
        # The new blocks spent outputs of a kept segment, whose flags were set in place.
        assert work["publish_outputs_rewritten"] >= 1
    assert second["tip_height"] == facts["tip_height"]
    assert content(data) == content(ref)
    status = cli_json("btc", "status", "--data", data, "--json")
    assert status["skipped"] == cli_json("btc", "status", "--data", ref, "--json")["skipped"]
    if mode == "full":
        want = cli_json("btc", "status", "--data", ref, "--json")
        for key in ("utxo_count", "total_amount", "hash_serialized_3", "tables"):
            assert status[key] == want[key]
    assert verify(data)["ok"]


@pytest.mark.parametrize(
    ("mode", "point"),
    [("headers", "scan.shard_committed:3"), ("full", "chain_state.applied:1")],
)
def test_a_run_killed_while_the_file_is_torn_resumes_to_the_fresh_result(
    chains: Any, fresh: Any, tmp_path: Path, mode: str, point: str
) -> None:
    """kill -9 of the coordinator between two commits (mid-scan, or once the chain state has
    applied its first chunk) while the last file is torn; the node then completes it."""
    root, _ = chains[True]
    ref = fresh[(True, mode)]
    blocks, later = torn_folder(root, ref, tmp_path, "body", "zeros")
    data = tmp_path / "data"
    name, nth = point.rsplit(":", 1)
    run_killed_at(reindex_cmd(blocks, data, "--shard-size", "16K", "--mode", mode), name, int(nth))
    complete(blocks, later)
    reindex(blocks, data, "--mode", mode)
    assert content(data) == content(ref)
    assert verify(data)["ok"]
