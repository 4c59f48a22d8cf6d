"""Lock times against Bitcoin Core: absolute lock times (``IsFinalTx``, by height and by the
median time past, BIP113) and BIP68 relative locks (by blocks and by time), each kept at its
boundary and broken one step past it.

On a generated regtest chain, hand-built blocks (tests/btc_craft.py, OP_TRUE coins, so every
script passes) mature two coinbases and split one into coins of height 330; block 331 then
spends them. Its times are 600 s apart, so the median times past around it are known exactly.
Core's engine (tests/bitcoin_core, every script checked) and ``btc reindex --mode full
--scripts`` read the same folder: the block that keeps every lock is accepted by both, each
block that breaks one is refused by both with ``bad-txns-nonfinal``, and they end on the same
tip and UTXO set.
"""

from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.table_view import newest_generation
from rechain.schemas import rocksdb as layout

from tests import btc_craft as craft
from tests.btc_craft import Tx, TxIn
from tests.conftest import reindex
from tests.test_btc_core_oracle import assert_same_end, core_oracle, run_core
from tests.test_btc_reject_reasons import (
    LOG_REJECTS,
    OP_TRUE,
    Base,
    core_reason,
    make_base,
    rechain_reason,
    subsidy,
)

SPACING = 600
#: BIP68's flags (Core's CTxIn): no relative lock; the lock counts 512-second units.
DISABLE = 1 << 31
TIME_UNITS = 1 << 22
#: An input sequence that waives nothing: not final, and no relative lock (disable bit set).
NOT_FINAL_NO_LOCK = 0xFFFFFFFE
SPLIT_OUTPUTS = 8


@pytest.fixture(scope="module")
def core() -> Path:
    return core_oracle()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    return make_base(tmp_path_factory.mktemp("locks") / "node")


@dataclass(frozen=True)
class Prefix:
    """Blocks 230..330 on the generated chain: the coinbase of 231 (OP_TRUE) and the split of
    230's into ``SPLIT_OUTPUTS`` coins of height 330, and the times the blocks carry."""

    first: int
    records: list[bytes]
    times: list[int]
    matured: Tx
    split: Tx

    @property
    def tip(self) -> str:
        return craft.block_hash(self.records[-1])

    def median_time_past(self, height: int) -> int:
        """The median of the crafted times of ``height`` and the ten blocks below it."""
        at = height - self.first
        assert 10 <= at < len(self.times), height  # all eleven crafted
        return sorted(self.times[at - 10 : at + 1])[5]


def prefix(b: Base) -> Prefix:
    assert b.next_height == 230  # the heights the cases name
    records: list[bytes] = []
    times: list[int] = []
    prev = b.tip
    paid = [craft.coinbase(h, subsidy(h)) for h in (b.next_height, b.next_height + 1)]
    value = (subsidy(b.next_height) - 10_000) // SPLIT_OUTPUTS
    split = Tx([TxIn(paid[0].txid, 0)], [(value, OP_TRUE)] * SPLIT_OUTPUTS)
    for i in range(101):
        height = b.next_height + i
        txs = [paid[i]] if i < 2 else [craft.coinbase(height, subsidy(height))]
        if i == 100:  # 230's coinbase is mature here (100 blocks on)
            txs.append(split)
        times.append(b.time + SPACING * i)
        records.append(craft.block(prev, txs, times[-1]))
        prev = craft.block_hash(records[-1])
    return Prefix(b.next_height, records, times, paid[1], split)


def spend(p: Prefix, coin: int | None, *, sequence: int, version: int = 2, lock: int = 0) -> Tx:
    """A transaction spending split output ``coin`` (None: the matured coinbase of 231)."""
    txid, vout, value = (
        (p.matured.txid, 0, p.matured.vout[0][0])
        if coin is None
        else (p.split.txid, coin, p.split.vout[coin][0])
    )
    return Tx([TxIn(txid, vout, sequence=sequence)], [(value - 1_000, OP_TRUE)], version, lock)


def kept(p: Prefix) -> list[Tx]:
    """One transaction at each lock's boundary in block 331 (parent 330, whose median time past
    is 600 s above 329's)."""
    mtp_330 = p.median_time_past(330)
    return [
        spend(p, None, sequence=100),  # a coin of 231: locked through 330
        spend(p, 0, sequence=1),  # a coin of 330: locked through 330
        spend(p, 1, sequence=TIME_UNITS | 1),  # until MTP(329) + 511 < MTP(330)
        spend(p, 2, sequence=0, lock=330),  # lock time 330 < 331
        spend(p, 3, sequence=NOT_FINAL_NO_LOCK, lock=mtp_330 - 1),  # below the cutoff
        spend(p, 4, sequence=5, version=1),  # BIP68 is for versions 2 and up
        spend(p, 5, sequence=DISABLE | 500),  # relative lock disabled
        spend(p, 6, sequence=0xFFFFFFFF, lock=1_000_000),  # every input final waives it
        spend(p, 7, sequence=1, version=-1),  # 0xffffffff: BIP68 applies (read unsigned)
    ]


#: Block 331 with one lock broken one step past its boundary.
BROKEN = {
    "relative blocks, mature coin": lambda p: spend(p, None, sequence=101),
    "relative blocks, coin of the parent": lambda p: spend(p, 0, sequence=2),
    "relative time": lambda p: spend(p, 1, sequence=TIME_UNITS | 2),
    "relative, version 0xffffffff": lambda p: spend(p, 7, sequence=2, version=-1),
    "absolute height": lambda p: spend(p, 2, sequence=0, lock=331),
    "absolute time (median time past)": lambda p: spend(
        p, 3, sequence=NOT_FINAL_NO_LOCK, lock=p.median_time_past(330)
    ),
}


def block_331(p: Prefix, txs: list[Tx]) -> bytes:
    cb = craft.coinbase(331, subsidy(331))
    return craft.block(p.tip, [cb, *txs], p.times[-1] + SPACING)


def run_both(
    oracle: Path, b: Base, p: Prefix, last: bytes, tmp: Path
) -> tuple[dict[str, Any], Path, str]:
    """Core and rechain over the generated chain, the prefix and ``last``: Core's output,
    rechain's data folder and the blk file the crafted blocks went to."""
    node = tmp / "node"
    shutil.copytree(b.node, node)
    appended = craft.append_blocks(node / "blocks", *p.records, last)
    blocks = node / "blocks"
    out = run_core(oracle, "regtest", "--blocks", blocks, "--assumevalid", "0", LOG_REJECTS)
    data = tmp / "data"
    reindex(node / "blocks", data, "--mode", "full", "--scripts")
    assert_same_end(out, data)
    return out, data, appended.name


def test_a_block_that_keeps_every_lock_is_accepted_as_core_accepts_it(
    core: Path, base: Base, tmp_path: Path
) -> None:
    p = prefix(base)
    assert p.median_time_past(330) - p.median_time_past(329) == SPACING
    last = block_331(p, kept(p))
    out, data, _ = run_both(core, base, p, last, tmp_path)
    assert out["tip_hash"] == craft.block_hash(last) and out["tip_height"] == 331
    # The median times the link kept are the ones computed here from the headers table.
    with DataDir(data, readonly=True) as d:
        stored = b"".join(v for _, v in d.items(layout.CF_BTC_BEST_MTP))
    gen = newest_generation(data / "parquet" / "headers")
    assert gen is not None
    headers = pq.read_table(gen, columns=["height", "time", "in_best_chain"])
    best = headers.filter(headers["in_best_chain"]).sort_by("height").to_pylist()
    assert [h["height"] for h in best] == list(range(332))
    times = [h["time"] for h in best]
    want = [sorted(times[max(0, h - 10) : h + 1])[(min(h, 10) + 1) // 2] for h in range(332)]
    assert stored == struct.pack(f"<{len(want)}I", *want)
    assert want[330] == p.median_time_past(330)


@pytest.mark.parametrize("lock", list(BROKEN))
def test_a_block_that_breaks_a_lock_is_refused_as_core_refuses_it(
    core: Path, base: Base, lock: str, tmp_path: Path
) -> None:
    p = prefix(base)
    last = block_331(p, [BROKEN[lock](p)])
    bad = craft.block_hash(last)
    out, data, file = run_both(core, base, p, last, tmp_path)
    assert out["tip_hash"] == p.tip
    assert core_reason(out, bad) == "bad-txns-nonfinal"
    where, reason = rechain_reason(data, bad, file)
    assert (where, reason.split(" ")[0]) == ("invalid", "bad-txns-nonfinal"), reason


def test_a_folder_linked_without_median_times_links_again(base: Base, tmp_path: Path) -> None:
    """A folder linked before the median times were kept has none: the next run links again
    instead of applying blocks without them."""
    data = tmp_path / "data"
    reindex(base.node / "blocks", data, "--mode", "full")
    with DataDir(data) as d:
        d.reset_column_family(layout.CF_BTC_BEST_MTP)
    result = reindex(base.node / "blocks", data)
    assert "link" in result["run"]["stages_run"], result["run"]
    with DataDir(data, readonly=True) as d:
        assert len(b"".join(v for _, v in d.items(layout.CF_BTC_BEST_MTP))) == 4 * (base.height + 1)
