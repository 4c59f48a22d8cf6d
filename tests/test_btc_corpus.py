"""Every damaged blk file in the shared corpus gives its documented outcome (manifest.json)."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pytest
from rechain.workers import _native
from rechain.workers.btc_scan import WorkUnit

from tests.conftest import CORPUS, blocks_dir_with, cli, cli_json, reindex, scan_file

MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
CASES = {c["file"]: c for c in MANIFEST["cases"]}
NETWORK = {"regtest": "regtest", "main": "main", "testnet3": "testnet"}
#: Cases whose documented outcome needs the block body: header mode cannot see the damage.
BODY_ONLY = {
    "14a_tx_count_too_high.blk",
    "14b_tx_count_too_low_then_good_copy.blk",
    "15_segwit_flag_no_witness.blk",
    "16_cve_2012_2459_mutated_copy_then_good_copy.blk",
    "20_real_mainnet_witness_bitflip.blk",
}
#: Cases where the recommended scanner keeps blocks Core's reindex loses (spec §9, cases 6–7).
SCANNER_KEEPS_MORE = {
    "05_size_field_past_EOF.blk",
    "06b_oversized_record_of_out_of_order_block_hides_next.blk",
    "06c_size_field_mid_file_points_past_EOF.blk",
}


def unit(case: dict[str, Any], check_bodies: bool) -> WorkUnit:
    key = bytes.fromhex(case["read_with_xor_key"]) if case["read_with_xor_key"] else bytes(8)
    path = CORPUS / case["file"]
    return WorkUnit(
        0, str(path), 0, 0, path.stat().st_size, NETWORK[case["network"]], key, check_bodies
    )


def as_manifest(records: pa.Table, events: pa.Table) -> tuple[list[Any], list[Any]]:
    recs = []
    for r in records.to_pylist():
        recs.append(
            {
                "hash": _native.display_hash(r["hash"]),
                "magic_offset": r["magic_offset"],
                "data_pos": r["data_pos"],
                "declared_size": r["declared_size"],
                "consumed": None if r["status"] == "body_error" else r["consumed"],
                "status": r["status"],
                "error": r["reason"] if r["status"] == "body_error" else None,
            }
        )
    evs = []
    for e in events.to_pylist():
        kind = e["kind"]
        if e["end"] is not None:
            evs.append([kind, e["offset"], e["end"]])
        elif kind == "size_mismatch":
            evs.append([kind, e["offset"], [e["declared"], e["consumed"]]])
        elif kind == "bad_size_field":
            evs.append([kind, e["offset"], e["declared"]])
        else:
            evs.append([kind, e["offset"], e["reason"]])
    return recs, evs


def expected(case: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    recs = [
        {
            k: r[k]
            for k in (
                "hash",
                "magic_offset",
                "data_pos",
                "declared_size",
                "consumed",
                "status",
                "error",
            )
        }
        for r in case["recommended"]["records"]
    ]
    return recs, case["recommended"]["events"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_body_check_mode_matches_manifest_exactly(name: str) -> None:
    case = CASES[name]
    records, events = scan_file(unit(case, check_bodies=True))
    assert as_manifest(records, events) == expected(case)


@pytest.mark.parametrize("name", sorted(CASES))
def test_header_mode_matches_manifest_where_headers_can_tell(name: str) -> None:
    case = CASES[name]
    records, events = scan_file(unit(case, check_bodies=False))
    got_recs, got_events = as_manifest(records, events)
    want_recs, want_events = expected(case)
    if name not in BODY_ONLY:
        assert (got_recs, got_events) == (want_recs, want_events)
        return
    # Header mode finds every record at the same place with the same hash but, by design,
    # does not read the bodies whose damage these cases hide: each record is taken whole by
    # its declared size (so the garbage after a short body is never seen) and reads "ok".
    header_view = [
        {**r, "consumed": r["declared_size"], "status": "ok", "error": None} for r in want_recs
    ]
    assert (got_recs, got_events) == (header_view, [])
    body_checked = records.column("body_checked").to_pylist()
    assert body_checked and not any(body_checked)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("check_bodies", [False, True])
def test_any_shard_split_equals_one_sequential_scan(name: str, check_bodies: bool) -> None:
    case = CASES[name]
    u = unit(case, check_bodies)
    size = (CORPUS / name).stat().st_size
    whole = scan_file(u)
    rng = random.Random(name)
    for _ in range(6):
        cuts = sorted(rng.sample(range(1, size), min(rng.randint(1, 8), size - 1)))
        parts = scan_file(u, cuts)
        assert parts[0].equals(whole[0]) and parts[1].equals(whole[1]), cuts


def root_for(case: dict[str, Any]) -> str | None:
    """The Core model treats the real blocks of cases 17–20 as the root of their tree."""
    real = [r for r in case["recommended"]["records"] if r["block"] in ("MAIN", "T3")]
    return real[0]["hash"] if real else None


@pytest.mark.parametrize("name", sorted(CASES))
def test_linked_tree_matches_core_reindex(name: str) -> None:
    case = CASES[name]
    records, _ = scan_file(unit(case, check_bodies=True))
    batch = (
        records.combine_chunks().to_batches()[0]
        if records.num_rows
        else _native.empty_batch("btc_records")
    )
    tree = _native.HeaderTree([batch], NETWORK[case["network"]], root_for(case))
    headers = tree.headers(0, len(tree))
    complete = {
        h
        for h, s in zip(
            headers.column("hash").to_pylist(), headers.column("status").to_pylist(), strict=True
        )
        if s in ("active", "valid-fork")
    }
    core = {b["hash"] for b in case["core_reindex"]["indexed"]}
    if name in SCANNER_KEEPS_MORE:
        ok = {r["hash"] for r in case["recommended"]["records"] if r["status"] == "ok"}
        assert core <= complete == ok
    else:
        assert complete == core
    never = {b["hash"] for b in case["core_reindex"]["never_linked"]}
    assert not (never & complete) or name in SCANNER_KEEPS_MORE


def test_forks_duplicates_orphans_through_the_cli(tmp_path: Any) -> None:
    for name, check in [
        ("12_two_competing_forks.blk", "fork"),
        ("10_duplicated_block.blk", "dup"),
        ("11_parent_never_appears.blk", "orphan"),
        ("09_truncated_final_block.blk", "skip"),
    ]:
        case = CASES[name]
        blocks = blocks_dir_with(tmp_path / name, name, xor=False)
        data = tmp_path / name / "data"
        reindex(blocks, data)
        st = cli_json("btc", "status", "--data", data, "--json")
        by_block = {r["block"]: r["hash"] for r in case["recommended"]["records"]}
        if check == "fork":
            # B2 and B2b have equal work; B2 became linkable first, so it is the tip.
            assert st["tip_hash"] == by_block["B2"] and st["tip_height"] == 2
            assert st["blocks_indexed"] == 4
            assert st["chainwork"] == f"{6:064x}"
        elif check == "dup":
            assert st["duplicates"] == 1 and st["blocks_indexed"] == 3
        elif check == "orphan":
            assert st["orphans"] == [by_block["B3"]] and st["tip_hash"] == by_block["B1"]
        else:
            assert {(s["file"], s["offset"], s["reason"]) for s in st["skipped"]} == {
                ("blk00000.dat", 453, "body_error"),
                ("blk00000.dat", 541, "trailing_garbage"),
            }
            assert st["tip_hash"] == by_block["B1"]


def test_wrong_xor_key_is_a_clear_error(tmp_path: Any) -> None:
    blocks = blocks_dir_with(tmp_path, "19_real_mainnet_with_WRONG_xor_key.blk", xor=False)
    (blocks / "xor.dat").write_bytes(bytes.fromhex("0102030405060708"))
    code, _, err = cli(
        "btc", "reindex", "--blocks", blocks, "--data", tmp_path / "d", "--no-progress"
    )
    assert code != 0
    assert "wrong --network or XOR key" in err and err.count("\n") == 1


def test_other_networks_magic_names_the_network(tmp_path: Any) -> None:
    blocks = blocks_dir_with(tmp_path, "01_clean_in_order.blk", xor=False)
    code, _, err = cli(
        "btc",
        "reindex",
        "--blocks",
        blocks,
        "--data",
        tmp_path / "d",
        "--network",
        "main",
        "--no-progress",
    )
    assert code != 0 and "--network regtest" in err


@pytest.mark.parametrize(
    "content,message", [(b"\x01\x02\x03", "holds 3 bytes"), (None, "blocks folder not found")]
)
def test_bad_xor_dat_or_missing_folder(tmp_path: Any, content: bytes | None, message: str) -> None:
    if content is None:
        blocks = tmp_path / "nope"
    else:
        blocks = blocks_dir_with(tmp_path, "01_clean_in_order.blk", xor=False)
        (blocks / "xor.dat").write_bytes(content)
    code, _, err = cli(
        "btc",
        "reindex",
        "--blocks",
        blocks,
        "--data",
        tmp_path / "d",
        "--network",
        "regtest",
        "--no-progress",
    )
    assert code == 2 and message in err
