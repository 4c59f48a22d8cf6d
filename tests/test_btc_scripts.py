"""The ``scripts`` stage (``btc reindex --mode full --scripts``) against Bitcoin Core.

Core's own engine (tests/bitcoin_core, ``-assumevalid=0`` unless a test says otherwise)
reindexes the same blk files: rechain's verdicts (which block, transaction and input), tip,
best chain and UTXO set must equal Core's, for a wrong signature on the main chain, on a
branch with more work (it must lose), under ``--assume-valid`` and on real mainnet blocks.
The stage's own behaviour (incremental runs, the folder remembering ``--scripts``, damaged
undo data) is checked beside.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import rocksdb as layout

from tests.conftest import cli, cli_json, gen_chain, reindex
from tests.test_btc_core_oracle import (
    MAINNET_255,
    REAL_BLK,
    assert_same_end,
    core_oracle,
    run_core,
)


@pytest.fixture(scope="module")
def core() -> Path:
    return core_oracle()


def script_meta(data: Path) -> dict[str, Any]:
    with DataDir(data, readonly=True) as d:
        return {
            "summary": d.meta_get(layout.META_BTC_SCRIPTS),
            "failures": d.meta_get(layout.META_BTC_SCRIPT_FAILURES) or {},
            "invalid": d.meta_get(layout.META_BTC_INVALID_BLOCKS) or {},
        }


def ran(result: dict[str, Any]) -> list[str]:
    """The stages a run ran, but the scan, which runs every time to look for new bytes."""
    return [s for s in result["run"]["stages_run"] if s != "scan"]


def core_reason(out: dict[str, Any], block_hash: str) -> str:
    """The reject reason Core logged for ``block_hash`` (its ConnectBlock failure line)."""
    for line in out["log_errors"]:
        if block_hash in line or "ConnectBlock" in line:
            m = re.search(r"(block-script-verify-flag-failed \([^)]*\))", line)
            if m:
                return m.group(1)
    raise AssertionError(f"Core logged no script failure for {block_hash}: {out['log_errors']}")


@pytest.fixture(scope="module")
def bad_main(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("bad_main")
    gen_chain(
        root / "node",
        "--blocks",
        "160",
        "--tx-per-block",
        "3:6",
        "--seed",
        "3",
        "--bad-signature",
        "130",
    )
    best = (root / "node" / "best_chain.txt").read_text().split()
    return root / "node" / "blocks", best


def test_a_wrong_signature_makes_its_block_invalid_as_core_does(
    core: Path, bad_main: tuple[Path, list[str]], tmp_path: Path
) -> None:
    blocks, best = bad_main
    out = run_core(core, "regtest", "--blocks", blocks, "--assumevalid", "0")
    assert out["tip_height"] == 129 and out["tip_hash"] == best[129]
    data = tmp_path / "data"
    result = reindex(blocks, data, "--mode", "full", "--scripts")
    assert result["tip_height"] == 129 and result["tip_hash"] == best[129]
    assert_same_end(out, data)
    meta = script_meta(data)
    # Core's reason, and where: the first spend of the block's first spending transaction.
    assert meta["invalid"] == {best[130]: core_reason(out, best[130])}
    failure = meta["failures"][best[130]]
    assert failure["height"] == 130 and failure["input"] == 0 and failure["tx_index"] == 1
    # Where the block is, as the headers table places it.
    [place] = cli_json(
        "query",
        "--data",
        data,
        f"SELECT file, \"offset\" FROM headers WHERE hash = '{best[130]}'",
        "--format",
        "json",
    )
    assert (failure["file"], failure["offset"]) == (f"blk{place['file']:05d}.dat", place["offset"])
    assert failure["reason"] == meta["invalid"][best[130]]
    # The headers table and `btc status` show it.
    rows = cli_json(
        "query",
        "--data",
        data,
        f"SELECT status, invalid_reason, copy_status FROM headers WHERE hash = '{best[130]}'",
        "--format",
        "json",
    )
    assert rows == [
        {"status": "invalid", "invalid_reason": failure["reason"], "copy_status": "invalid_block"}
    ]
    st = cli_json("btc", "status", "--data", data, "--json")
    assert {"hash": best[130], "reason": failure["reason"]} in st["invalid_blocks"]
    assert st["scripts"]["height"] == 129 and st["scripts"]["failures"] == meta["failures"]
    # Everything applied is checked, and no more.
    assert meta["summary"]["height"] == 129 and meta["summary"]["hash"] == best[129]
    assert meta["summary"]["inputs"] > 129


def test_a_branch_with_more_work_and_a_wrong_signature_loses(core: Path, tmp_path: Path) -> None:
    expected = gen_chain(
        tmp_path / "node",
        "--blocks",
        "120",
        "--tx-per-block",
        "3:5",
        "--seed",
        "5",
        "--reorg",
        "4",
        "--bad-signature-branch",
    )
    blocks = tmp_path / "node" / "blocks"
    # Without script checks the branch wins (it has more work) ...
    plain = reindex(blocks, tmp_path / "plain", "--mode", "full")
    assert plain["tip_hash"] == expected["tip_hash"]
    # ... Core rejects its first block and keeps the main chain, and so does rechain.
    out = run_core(core, "regtest", "--blocks", blocks, "--assumevalid", "0")
    assert out["tip_height"] == 119 and out["tip_hash"] != expected["tip_hash"]
    data = tmp_path / "data"
    result = reindex(blocks, data, "--mode", "full", "--scripts")
    assert result["tip_hash"] == out["tip_hash"]
    assert_same_end(out, data)
    (bad,) = script_meta(data)["invalid"]
    assert script_meta(data)["failures"][bad]["height"] == 116
    # The folder remembers --scripts: a rerun without flags stays on the main chain.
    again = reindex(blocks, data)
    assert again["tip_hash"] == out["tip_hash"]
    assert ran(again) == []


# Core's ConnectBlock failure line: block, reason, input, txid.
CORE_SCRIPT_FAILURE = re.compile(
    r"ConnectBlock (\w{64}) failed, (block-script-verify-flag-failed \(.*\)), "
    r"input (\d+) of (\w{64})"
)


def core_failures(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every script failure Core logged, by block: its reason, transaction and input."""
    found = {}
    for line in out["log_errors"]:
        m = CORE_SCRIPT_FAILURE.search(line)
        if m:
            found[m.group(1)] = {
                "reason": m.group(2),
                "input": int(m.group(3)),
                "txid": m.group(4),
            }
    return found


# The generator's script kinds and the type the `inputs` table gives the output each spends.
KIND_TYPES = {
    "p2pkh": "p2pkh",
    "p2wpkh": "p2wpkh",
    "p2tr": "p2tr",
    "p2pk": "p2pk",
    "multisig": "multisig",
    "p2sh-p2wpkh": "p2sh",
    "p2wsh": "p2wsh",
    "p2tr-script": "p2tr",
}


def test_every_script_kind_validates_as_core_validates_it(core: Path, tmp_path: Path) -> None:
    """A chain whose wallet owns and spends every kind the generator signs: Core, checking
    every script, accepts all of it, and rechain ends where Core does."""
    expected = gen_chain(
        tmp_path / "node",
        "--blocks",
        "320",
        "--tx-per-block",
        "3:8",
        "--seed",
        "21",
        "--script-kinds",
        "all",
    )
    blocks = tmp_path / "node" / "blocks"
    out = run_core(core, "regtest", "--blocks", blocks, "--assumevalid", "0")
    assert out["invalid_blocks"] == [] and out["tip_hash"] == expected["tip_hash"]
    data = tmp_path / "data"
    reindex(blocks, data, "--mode", "full", "--scripts")
    assert_same_end(out, data)
    meta = script_meta(data)
    assert meta["invalid"] == {} and meta["failures"] == {}
    assert meta["summary"]["height"] == 319
    # Every kind was spent, so every kind went through the interpreter.
    rows = cli_json(
        "query",
        "--data",
        data,
        "SELECT prev_script_type AS t, count(*) AS n "
        "FROM inputs WHERE in_best_chain AND prev_script_type IS NOT NULL GROUP BY 1",
        "--format",
        "json",
    )
    spent = {r["t"]: r["n"] for r in rows}
    assert set(spent) == set(KIND_TYPES.values()), spent
    assert min(spent.values()) >= 10, spent
    assert meta["summary"]["inputs"] == sum(spent.values())


@pytest.mark.parametrize("kind", list(KIND_TYPES))
def test_a_wrong_signature_of_each_kind_fails_where_core_says(
    core: Path, kind: str, tmp_path: Path
) -> None:
    height = 120 + 5 * list(KIND_TYPES).index(kind)
    expected = gen_chain(
        tmp_path / "node",
        "--blocks",
        str(height + 20),
        "--tx-per-block",
        "3:7",
        "--seed",
        "8",
        "--script-kinds",
        "all",
        "--bad-signature",
        str(height),
        "--bad-signature-kind",
        kind,
    )
    assert expected["bad_signature_kind"] == kind
    blocks = tmp_path / "node" / "blocks"
    best = (tmp_path / "node" / "best_chain.txt").read_text().split()
    out = run_core(core, "regtest", "--blocks", blocks, "--assumevalid", "0")
    assert out["tip_height"] == height - 1
    data = tmp_path / "data"
    reindex(blocks, data, "--mode", "full", "--scripts")
    assert_same_end(out, data)
    meta = script_meta(data)
    failure = meta["failures"][best[height]]
    assert core_failures(out) == {
        best[height]: {k: failure[k] for k in ("reason", "input", "txid")}
    }
    assert meta["invalid"] == {best[height]: failure["reason"]}


def test_a_plain_folder_with_scripts_turned_on_drops_the_invalid_branch(
    core: Path, tmp_path: Path
) -> None:
    """A folder reindexed without checks follows the branch; --scripts then checks the
    applied chain, rejects the branch's block and unwinds to the main chain."""
    expected = gen_chain(
        tmp_path / "node",
        "--blocks",
        "140",
        "--tx-per-block",
        "2:4",
        "--seed",
        "8",
        "--reorg",
        "3",
        "--bad-signature-branch",
    )
    blocks = tmp_path / "node" / "blocks"
    data = tmp_path / "data"
    assert reindex(blocks, data, "--mode", "full")["tip_hash"] == expected["tip_hash"]
    result = reindex(blocks, data, "--scripts")
    out = run_core(core, "regtest", "--blocks", blocks, "--assumevalid", "0")
    assert result["tip_hash"] == out["tip_hash"] != expected["tip_hash"]
    assert result["run"]["chain_state_unwound"] >= 1
    assert_same_end(out, data)


def test_checks_are_incremental_and_off_by_default(tmp_path: Path) -> None:
    gen_chain(tmp_path / "node", "--blocks", "150", "--tx-per-block", "2:5", "--seed", "21")
    blocks = tmp_path / "node" / "blocks"
    data = tmp_path / "data"
    plain = reindex(blocks, data, "--mode", "full")
    assert "scripts" not in plain["run"]["stages_run"]
    assert script_meta(data)["summary"] is None
    first = reindex(blocks, data, "--scripts")
    # Turned on over a reindexed chain: the checks run, and nothing after them changes.
    assert ran(first) == ["scripts"]
    checked = first["run"]["scripts_inputs_checked"]
    assert checked == script_meta(data)["summary"]["inputs"] > 149
    # Nothing new: nothing checked again.
    again = reindex(blocks, data)
    assert ran(again) == []
    # --from-stage scripts checks every input again, to the same figures.
    redo = reindex(blocks, data, "--from-stage", "scripts")
    assert redo["run"]["scripts_inputs_checked"] == checked
    assert script_meta(data)["summary"]["inputs"] == checked


def test_assume_valid_skips_what_core_skips(core: Path, tmp_path: Path) -> None:
    """Core skips the scripts of an assumed-valid block's ancestors only when the best header
    is more than two weeks of work past them (2,016 regtest blocks): a wrong signature below
    the assumed-valid block is accepted by both, and rejected by both with ``0``."""
    gen_chain(
        tmp_path / "node",
        "--blocks",
        "2200",
        "--tx-per-block",
        "1:3",
        "--seed",
        "4",
        "--bad-signature",
        "120",
    )
    blocks = tmp_path / "node" / "blocks"
    best = (tmp_path / "node" / "best_chain.txt").read_text().split()
    assumed = best[150]
    out = run_core(core, "regtest", "--blocks", blocks, "--assumevalid", assumed)
    assert out["tip_hash"] == best[-1] and out["invalid_blocks"] == []
    data = tmp_path / "data"
    reindex(blocks, data, "--mode", "full", "--scripts", "--assume-valid", assumed)
    assert_same_end(out, data)
    summary = script_meta(data)["summary"]
    assert summary["assumed_blocks"] == 151 and summary["assume_valid"] == assumed
    # --assume-valid 0 checks everything: the block at 120 fails, in Core and in rechain.
    out0 = run_core(core, "regtest", "--blocks", blocks, "--assumevalid", "0")
    assert out0["tip_height"] == 119
    result = reindex(blocks, data, "--assume-valid", "0")
    assert result["tip_height"] == 119
    assert_same_end(out0, data)
    assert list(script_meta(data)["invalid"]) == [best[120]]


def test_assume_valid_too_close_to_the_tip_checks_everything(tmp_path: Path) -> None:
    gen_chain(tmp_path / "node", "--blocks", "200", "--seed", "9", "--bad-signature", "150",
              "--tx-per-block", "2:3")  # fmt: skip
    blocks = tmp_path / "node" / "blocks"
    best = (tmp_path / "node" / "best_chain.txt").read_text().split()
    data = tmp_path / "data"
    result = reindex(blocks, data, "--mode", "full", "--scripts", "--assume-valid", best[170])
    assert result["tip_height"] == 149
    assert script_meta(data)["summary"]["assumed_blocks"] == 0


def test_real_mainnet_blocks_validate_in_full(core: Path, tmp_path: Path) -> None:
    files = [REAL_BLK / "mainnet-blocks-1-255.blk", REAL_BLK / "mainnet-block-277647.blk"]
    datadir = tmp_path / "core"
    args = [a for f in files for a in ("--loadblock", f)]
    out = run_core(core, "main", *args, "--datadir", datadir, "--assumevalid", "0")
    assert out["invalid_blocks"] == [] and out["tip_hash"] == MAINNET_255
    data = tmp_path / "data"
    result = cli_json(
        "btc", "reindex", "--blocks", datadir / "blocks", "--data", data, "--network", "main",
        "--mode", "full", "--scripts", "--no-progress", "--json",
    )  # fmt: skip
    assert result["full"]["invalid_blocks"] == []
    assert_same_end(out, data)
    summary = script_meta(data)["summary"]
    # Block 170 (Satoshi to Hal Finney) and the spends after it, all P2PK.
    assert summary["height"] == 255 and summary["inputs"] >= 1 and summary["txs"] >= 1


def test_scripts_need_full_mode(tmp_path: Path) -> None:
    gen_chain(tmp_path / "node", "--blocks", "20")
    code, _, err = cli(
        "btc", "reindex", "--blocks", tmp_path / "node" / "blocks", "--data", tmp_path / "d",
        "--network", "regtest", "--scripts", "--no-progress",
    )  # fmt: skip
    assert code == 2 and "--mode full" in err
    code, _, err = cli(
        "btc", "reindex", "--blocks", tmp_path / "node" / "blocks", "--data", tmp_path / "d",
        "--network", "regtest", "--mode", "full", "--scripts", "--assume-valid", "xyz",
        "--no-progress",
    )  # fmt: skip
    assert code == 2 and "--assume-valid" in err


def drop_a_restored_coin(undo: bytes) -> bytes:
    """The ``btc_undo`` record without its first restored coin (workers/native/src/btc/undo.rs:
    version, block hash, created (key, value u64) entries, restored (key, value) entries)."""
    at = 33
    (created,) = struct.unpack_from("<I", undo, at)
    at += 4
    for _ in range(created):
        at += 1 + undo[at] + 8
    (restored,) = struct.unpack_from("<I", undo, at)
    assert restored > 0
    first = at + 4
    (vlen,) = struct.unpack_from("<I", undo, first + 1 + undo[first])
    end = first + 1 + undo[first] + 4 + vlen
    return undo[:at] + struct.pack("<I", restored - 1) + undo[first + (end - first) :]


def test_damaged_undo_data_is_a_clear_error_with_its_repair(tmp_path: Path) -> None:
    gen_chain(tmp_path / "node", "--blocks", "140", "--tx-per-block", "3:4", "--seed", "2")
    blocks = tmp_path / "node" / "blocks"
    data = tmp_path / "data"
    reindex(blocks, data, "--mode", "full")
    with DataDir(data) as d:
        good = bytes(d.get(layout.CF_BTC_UNDO, layout.undo_key(130)))
        d.write({layout.CF_BTC_UNDO: [(layout.undo_key(130), drop_a_restored_coin(good))]})
        d.write({layout.CF_BTC_UNDO: [(layout.undo_key(120), b"\x01garbage")]})
    code, _, err = cli(
        "btc", "reindex", "--blocks", blocks, "--data", data, "--scripts", "--no-progress"
    )
    assert code == 2 and "Traceback" not in err, err
    assert "undo" in err and "height 120" in err, err
    # Height 120 whole again (its own record back), 130 still lacks a coin: named, with the
    # input that spends it and the repair.
    with DataDir(data) as d:
        d.write({layout.CF_BTC_UNDO: [(layout.undo_key(120), undo_of(blocks, tmp_path, 120))]})
    code, _, err = cli(
        "btc", "reindex", "--blocks", blocks, "--data", data, "--scripts", "--no-progress"
    )
    assert code == 2 and "Traceback" not in err, err
    assert "height 130 restores no coin" in err and "--from-stage chain_state" in err, err
    # The repair it names works: nothing is invalid, every input checked.
    reindex(blocks, data, "--from-stage", "chain_state")
    meta = script_meta(data)
    assert meta["invalid"] == {} and meta["summary"]["height"] == 139


def undo_of(blocks: Path, tmp_path: Path, height: int) -> bytes:
    """The undo record at ``height`` of a fresh full reindex of ``blocks``."""
    fresh = tmp_path / f"fresh-{height}"
    if not fresh.exists():
        reindex(blocks, fresh, "--mode", "full")
    with DataDir(fresh, readonly=True) as d:
        value = d.get(layout.CF_BTC_UNDO, layout.undo_key(height))
    assert value is not None
    return bytes(value)


def test_on_ray_each_run_of_blocks_is_a_task_and_the_verdicts_are_the_same(
    bad_main: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on a cluster (``--ray-address``): the chain state partitioned on Ray and the script
    checks as Ray tasks, a run of blocks each; the verdict,
    tip, tables and set equal the threads' run's."""
    from rechain.pipeline.bitcoin.stages import scripts
    from rechain.pipeline.runtime import executor
    from rechain.pipeline.runtime.local_runner import EXECUTION_ENV

    from tests.test_btc_reorg import content

    blocks, best = bad_main
    ref = reindex(blocks, tmp_path / "ref", "--mode", "full", "--scripts")
    # Runs of about 20 kB: several runs, several tasks.
    monkeypatch.setattr(scripts, "MIN_RUN_BYTES", 1)
    monkeypatch.setattr(scripts, "MAX_RUN_BYTES", 20_000)
    monkeypatch.setenv(EXECUTION_ENV, "ray")
    monkeypatch.setenv(executor.PARTITIONED_ENV, "partitioned")
    got = reindex(blocks, tmp_path / "got", "--mode", "full", "--scripts", "--memory-budget", "4M")
    assert got["tip_hash"] == ref["tip_hash"] == best[129]
    assert script_meta(tmp_path / "got") == script_meta(tmp_path / "ref")
    assert content(tmp_path / "got") == content(tmp_path / "ref")
    assert sum(got["run"]["placement"]["scripts"]["ray_tasks"].values()) >= 3


def test_inputs_carry_the_output_they_spend(tmp_path: Path) -> None:
    """``prev_script_pubkey``, ``prev_script_type`` and ``prev_address`` of every best-chain
    input are those of the ``outputs`` row it spends (through a reorg); a coinbase's are null."""
    gen_chain(tmp_path / "node", "--blocks", "180", "--tx-per-block", "2:6", "--seed", "13",
              "--side-branches", "2", "--reorg", "3")  # fmt: skip
    data = tmp_path / "data"
    reindex(tmp_path / "node" / "blocks", data, "--mode", "full")
    (row,) = cli_json(
        "query", "--data", data, """
        SELECT count(*) FILTER (WHERE NOT is_coinbase) AS spends,
          count(*) FILTER (WHERE NOT is_coinbase AND o.txid IS NOT NULL
            AND i.prev_script_pubkey = o.script_pubkey
            AND i.prev_script_type = o.script_type
            AND i.prev_address IS NOT DISTINCT FROM o.address) AS matching,
          count(*) FILTER (WHERE is_coinbase AND i.prev_script_pubkey IS NULL
            AND i.prev_script_type IS NULL AND i.prev_address IS NULL) AS coinbase_nulls,
          count(*) FILTER (WHERE is_coinbase) AS coinbases
        FROM inputs i
        JOIN transactions t ON t.txid = i.txid AND t.in_best_chain
        LEFT JOIN outputs o ON o.txid = i.prev_txid AND o.vout = i.prev_vout AND o.in_best_chain
        WHERE i.in_best_chain""", "--format", "json",
    )  # fmt: skip
    assert row["spends"] > 100 and row["matching"] == row["spends"], row
    # The reorg branch is one block longer: heights 0..180.
    assert row["coinbase_nulls"] == row["coinbases"] == 181, row
