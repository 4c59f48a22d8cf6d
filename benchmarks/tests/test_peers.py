"""The benchmark's peer parsers (benchmarks/peers, run by benchmarks/peer_parsers.py): built
from crates.io (cached under ~/.cache/rechain/peers), each run on a small generated chain with
xor.dat, shuffled arrival, side branches, orphans and several files, and every count each one
reports equal to rechain's full reindex of the same files, so the harness of btc_full.py cannot
rot unnoticed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import peer_parsers
import pytest
from common import host_steal_s, steal_ticks

from tests.conftest import gen_chain, oracle_tools, reindex


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    oracle_tools("benchmark peers", "cargo")
    root = tmp_path_factory.mktemp("peers")
    expected = gen_chain(
        root / "node",
        "--blocks",
        "240",
        "--side-branches",
        "4",
        "--orphans",
        "2",
        "--tx-per-block",
        "1:40",
        "--file-size",
        "400000",
        "--seed",
        "11",
    )
    blocks = root / "node" / "blocks"
    reindex(blocks, root / "data", "--mode", "full")
    return blocks, root / "data", expected


@pytest.fixture(scope="module")
def binary() -> Path:
    return peer_parsers.build()


@pytest.mark.parametrize("peer", list(peer_parsers.SUBCOMMANDS))
def test_peer_counts_equal_rechains(
    peer: str, binary: Path, chain: tuple[Path, Path, dict[str, Any]]
) -> None:
    blocks, data, expected = chain
    result = peer_parsers.run(binary, peer, blocks)
    assert result["read"]["xor"] is True  # each peer de-obfuscates the files itself
    assert result["read"]["blk_files"] == expected["files"] > 1
    ours = peer_parsers.rechain_counts(data)
    assert ours["tip_height"] == expected["tip_height"]
    assert ours["utxo_count"] == expected["utxo_count"]
    check = peer_parsers.check(peer, result, data, ours)
    assert check["ok"], check["mismatches"]
    want = {
        "block_parser": {"blocks", "transactions", "inputs", "outputs", "output_value"},
        "utxo_parser": {"input_value", "unspent_outputs", "utxo_count", "utxo_value"},
        "blocks_iterator": {"blocks", "transactions", "inputs_with_value", "input_value"},
    }[peer]
    assert want <= set(check["compared"])
    assert result["cpu_s"] > 0 and result["mb_per_s"] > 0
    assert 0 <= result["steal_s"] <= result["process_wall_s"] * (os.cpu_count() or 1)
    if peer == "blocks_iterator":
        assert result["blocks"] == expected["tip_height"] + 1 - result["max_reorg"]
    else:
        assert result["blocks"] == expected["tip_height"] + 1


def test_a_count_off_by_one_is_reported(
    binary: Path, chain: tuple[Path, Path, dict[str, Any]]
) -> None:
    blocks, data, _ = chain
    result = peer_parsers.run(binary, "block_parser", blocks)
    ours = peer_parsers.rechain_counts(data)
    result["inputs"] += 1
    check = peer_parsers.check("block_parser", result, data, ours)
    assert not check["ok"]
    assert check["mismatches"] == [
        f"inputs: peer {result['inputs']} != rechain {result['inputs'] - 1}"
    ]


def test_steal_is_the_eighth_value_of_the_cpu_line() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    assert steal_ticks("cpu  1542372 90117 165663 564490 13369 0 5181 23035 0 0\n") == 23035
    assert steal_ticks("cpu0 1 2 3 4 5 6 7 8 9 10") == 0  # one core's line, not the sum
    assert steal_ticks("cpu  1 2 3 4") == 0  # a kernel that reports no steal
    assert host_steal_s() >= 0
