"""Every reason rechain rejects a block for, against Bitcoin Core.

For each reason one block breaking exactly that rule is built by hand (tests/btc_craft.py,
hashlib only) on the tip of a generated chain and appended in a new blk file. Core's engine
(tests/bitcoin_core, every script checked) and ``btc reindex --mode full --scripts`` read the
same folder: both must keep the old tip, and rechain's reason must be the one Core logs for
that block (the harness's ``--log-rejects`` shows the reasons Core logs only at debug level).
A header Core refuses (no index entry) rechain marks invalid in ``headers``; a block whose
body Core refuses is recorded invalid, or, where its body breaks a context-free rule, as a
counted skip of that record with the reason. Scripts that run out of the interpreter's limits
are recorded verdicts with the block's file and offset. A rule rechain does not check yet is
listed in ``NOT_CHECKED`` and its case is a strict xfail.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bitcoin.core import CBlock
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import rocksdb as layout

from tests import btc_craft as craft
from tests.btc_craft import COIN, Tx, TxIn
from tests.conftest import cli_json, gen_chain, reindex
from tests.test_btc_core_oracle import assert_same_end, core_oracle, run_core
from tests.test_btc_full import read_records
from tests.test_btc_scripts import core_failures

BASE_BLOCKS = 230  # heights 0..229: the coinbases up to height 130 are mature at the tip + 1


@dataclass(frozen=True)
class Base:
    """The generated chain the bad blocks go on: its tip, and coinbase outputs to spend."""

    node: Path
    tip: str
    height: int
    time: int
    mature: tuple[bytes, int, int]  # (txid, vout, value) of a coinbase output old enough
    immature: tuple[bytes, int, int]  # the tip's own coinbase output

    @property
    def next_height(self) -> int:
        return self.height + 1


def coinbase_output(blocks: Path, block_hash: str) -> tuple[bytes, int, int]:
    """The first output of a block's coinbase: (txid, vout, value), by python-bitcoinlib."""
    for raw in read_records(blocks):
        if craft.block_hash(raw) == block_hash:
            cb = CBlock.deserialize(raw).vtx[0]
            return cb.GetTxid(), 0, cb.vout[0].nValue
    raise AssertionError(f"{block_hash} is not in {blocks}")


@pytest.fixture(scope="module")
def core() -> Path:
    return core_oracle()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    return make_base(tmp_path_factory.mktemp("reject") / "node")


def make_base(node: Path) -> Base:
    """Generates the chain the bad blocks go on in ``node``."""
    expected = gen_chain(node, "--blocks", str(BASE_BLOCKS), "--tx-per-block", "1:1", "--no-xor")
    best = (node / "best_chain.txt").read_text().split()
    blocks = node / "blocks"
    height = expected["tip_height"]
    return Base(
        node=node,
        tip=expected["tip_hash"],
        height=height,
        time=1_700_000_000,
        mature=coinbase_output(blocks, best[10]),
        immature=coinbase_output(blocks, best[height]),
    )


def subsidy(height: int) -> int:
    """Regtest's block subsidy (halving every 150 blocks)."""
    return (50 * COIN) >> (height // 150)


def spend(coin: tuple[bytes, int, int], outputs: list[tuple[int, bytes]], **kw: Any) -> Tx:
    """A transaction spending ``coin`` with an empty scriptSig (only checks that run before the
    scripts can pass it)."""
    txid, vout, _ = coin
    return Tx([TxIn(txid, vout)], outputs, **kw)


def with_coinbase(b: Base, *txs: Tx, **block_args: Any) -> bytes:
    cb = craft.coinbase(b.next_height, subsidy(b.next_height))
    return craft.block(b.tip, [cb, *txs], b.time, **block_args)


def heavy_witness(b: Base) -> bytes:
    """Serialized under 4,000,000 bytes (Core reads no bigger record) but over 4,000,000 weight
    units: 400 kB of base data and 2.6 MB of witness."""
    tx = spend(b.mature, [(1000, b"\x00" * 400_000)])
    tx.vin[0].witness = [b"\x00" * 2_600_000]
    cb = craft.coinbase(b.next_height, subsidy(b.next_height))
    cb = craft.coinbase(
        b.next_height, subsidy(b.next_height), commitment=craft.witness_commitment([cb, tx])
    )
    return craft.block(b.tip, [cb, tx], b.time)


def witness_block(b: Base, *, commitment: bytes | None, nonce: list[bytes] | None) -> bytes:
    return craft.block(
        b.tip,
        [craft.coinbase(b.next_height, subsidy(b.next_height), commitment=commitment, nonce=nonce)],
        b.time,
    )


OP_TRUE = b"\x51"


def on_an_invalid_block(b: Base) -> list[bytes]:
    """A valid block whose parent Core refuses as soon as it reads it (a wrong BIP34 height):
    the child's header then names an invalid parent. The child is judged (the last record)."""
    parent = CASES["bad-cb-height"](b)[0]
    h = b.next_height + 1
    child = craft.block(craft.block_hash(parent), [craft.coinbase(h, subsidy(h))], b.time + 600)
    return [parent, child]


# Each reason and the blocks that break that rule (and no earlier one) on the base tip; the
# last block is the one judged.
CASES: dict[str, Callable[[Base], list[bytes]]] = {
    "high-hash": lambda b: [with_coinbase(b, valid_pow=False)],
    # A target above regtest's limit: CheckProofOfWork fails, and Core says high-hash for that.
    "high-hash (nBits above the limit)": lambda b: [with_coinbase(b, bits=0x2100FFFF)],
    # nBits other than the retarget's (GetNextWorkRequired; regtest keeps the limit's).
    "bad-diffbits": lambda b: [with_coinbase(b, bits=0x207FFFFE)],
    "bad-txnmrklroot": lambda b: [with_coinbase(b, merkle=bytes(32))],
    # The same transaction twice at an even position: the merkle tree CVE-2012-2459 mutates.
    "bad-txns-duplicate": lambda b: [
        with_coinbase(
            b,
            spend(b.mature, [(999, OP_TRUE)]),
            spend(b.mature, [(1000, OP_TRUE)]),
            spend(b.mature, [(1000, OP_TRUE)]),
        )
    ],
    "bad-blk-length": lambda b: [craft.block(b.tip, [], b.time)],
    "bad-cb-missing": lambda b: [craft.block(b.tip, [spend(b.mature, [(1, OP_TRUE)])], b.time)],
    "bad-cb-multiple": lambda b: [
        with_coinbase(b, craft.coinbase(b.next_height, 1, script_sig_tail=b"\x01\x03"))
    ],
    "bad-cb-length": lambda b: [
        craft.block(
            b.tip,
            [craft.coinbase(b.next_height, 1, script_sig_tail=craft.pushdata(bytes(97)))],
            b.time,
        )
    ],
    "bad-txns-vin-empty": lambda b: [with_coinbase(b, Tx([], []))],
    "bad-txns-vout-empty": lambda b: [with_coinbase(b, spend(b.mature, []))],
    "bad-txns-vout-negative": lambda b: [with_coinbase(b, spend(b.mature, [(-1, OP_TRUE)]))],
    "bad-txns-vout-toolarge": lambda b: [
        with_coinbase(b, spend(b.mature, [(21_000_000 * COIN + 1, OP_TRUE)]))
    ],
    "bad-txns-txouttotal-toolarge": lambda b: [
        with_coinbase(
            b, spend(b.mature, [(20_000_000 * COIN, OP_TRUE), (2_000_000 * COIN, OP_TRUE)])
        )
    ],
    "bad-txns-inputs-duplicate": lambda b: [
        with_coinbase(b, Tx([TxIn(b.mature[0], 0), TxIn(b.mature[0], 0)], [(1, OP_TRUE)]))
    ],
    "bad-txns-prevout-null": lambda b: [
        with_coinbase(b, Tx([TxIn(b.mature[0], 0), TxIn(bytes(32), 0xFFFFFFFF)], [(1, OP_TRUE)]))
    ],
    # 1,001 OP_CHECKMULTISIGs count 20 sigops each: 20,020 > 80,000 / 4.
    "bad-blk-sigops": lambda b: [with_coinbase(b, spend(b.mature, [(1, b"\xae" * 1001)]))],
    "bad-cb-height": lambda b: [craft.block(b.tip, [craft.coinbase(b.next_height + 5, 1)], b.time)],
    "unexpected-witness": lambda b: [witness_block(b, commitment=None, nonce=[bytes(32)])],
    "bad-witness-nonce-size": lambda b: [witness_block(b, commitment=bytes(32), nonce=[bytes(31)])],
    "bad-witness-merkle-match": lambda b: [witness_block(b, commitment=bytes(32), nonce=None)],
    "bad-blk-weight": lambda b: [heavy_witness(b)],
    "bad-txns-inputs-missingorspent": lambda b: [
        with_coinbase(b, Tx([TxIn(b"\xab" * 32, 3)], [(1, OP_TRUE)]))
    ],
    "bad-txns-premature-spend-of-coinbase": lambda b: [
        with_coinbase(b, spend(b.immature, [(1, OP_TRUE)]))
    ],
    "bad-txns-in-belowout": lambda b: [
        with_coinbase(b, spend(b.mature, [(b.mature[2] + 1, OP_TRUE)]))
    ],
    "bad-cb-amount": lambda b: [
        craft.block(b.tip, [craft.coinbase(b.next_height, subsidy(b.next_height) + 1)], b.time)
    ],
    # The generated coinbase pays to a wallet key: an empty scriptSig cannot spend it.
    "block-script-verify-flag-failed": lambda b: [
        with_coinbase(b, spend(b.mature, [(b.mature[2] - 1000, OP_TRUE)]))
    ],
    "bad-prevblk": on_an_invalid_block,
    # Core's contextual header and block checks.
    "time-too-old": lambda b: [
        craft.block(b.tip, [craft.coinbase(b.next_height, subsidy(b.next_height))], 1_000_000_000)
    ],
    "time-too-new": lambda b: [
        craft.block(
            b.tip,
            [craft.coinbase(b.next_height, subsidy(b.next_height))],
            int(time.time()) + 10 * 3600,
        )
    ],
    "bad-version(0x00000001)": lambda b: [with_coinbase(b, version=1)],
    # A lock time far above the block's height, with a sequence that does not waive it.
    "bad-txns-nonfinal": lambda b: [
        with_coinbase(b, Tx([TxIn(b.mature[0], 0, sequence=0)], [(1000, OP_TRUE)], locktime=10**6))
    ],
}


#: The harness's debug log of Core's validation (reasons Core gives only there).
LOG_REJECTS = "--log-rejects"


def core_reason(out: dict[str, Any], block_hash: str) -> str:
    """The reject reason Core logged for ``block_hash``: the first reason-shaped word of a log
    line naming the block, or of the line its AcceptBlock/CheckBlock failure printed."""
    reasons = re.compile(
        r"\b((?:bad|high|unexpected|block-script|time)-[a-z0-9-]+(?:\(0x[0-9a-f]+\))?)"
    )
    for line in out["log_errors"] + (out["log_debug"] or []):
        if block_hash in line:
            # AcceptBlockHeader's line for a header whose parent is invalid names no reason.
            if f"header {block_hash} has prev block invalid" in line:
                return "bad-prevblk"
            m = reasons.search(line)
            if m:
                return m.group(1)
    for line in out["log_errors"]:
        if "AcceptBlock" in line or "CheckBlock" in line:
            m = reasons.search(line)
            if m:
                return m.group(1)
    raise AssertionError(f"Core logged no reason for {block_hash}: {out['log_errors']}")


def rechain_reason(data: Path, block_hash: str, file: str) -> tuple[str, str]:
    """Where rechain put the block (``invalid``, or the reason of its skip in ``file``) and its
    reject reason."""
    st = cli_json("btc", "status", "--data", data, "--json")
    for inv in st["invalid"] + st["invalid_blocks"]:
        if inv["hash"] == block_hash:
            return "invalid", inv["reason"]
    for skip in st["skipped"]:
        if skip["file"] == file:
            return skip["reason"], skip["detail"]
    raise AssertionError(f"rechain recorded nothing for {block_hash}: {st}")


#: Rules rechain does not check yet: the case fails until it does (strict).
NOT_CHECKED = {
    "time-too-new": "rechain does not compare a header's time with the clock: a reindex of the "
    "same files ends the same whenever it runs (Core does not keep such a block invalid either, "
    "BLOCK_TIME_FUTURE)",
}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(reason=NOT_CHECKED[c], strict=True))
        if c in NOT_CHECKED
        else c
        for c in CASES
    ],
)
def test_each_reject_reason_agrees_with_core(
    core: Path, base: Base, case: str, tmp_path: Path
) -> None:
    reason = case.split(" ")[0]
    node = tmp_path / "node"
    shutil.copytree(base.node, node)
    records = CASES[case](base)
    appended = craft.append_blocks(node / "blocks", *records)
    bad = craft.block_hash(records[-1])
    out = run_core(
        core, "regtest", "--blocks", node / "blocks", "--assumevalid", "0", LOG_REJECTS,
        "--lookup", bad,
    )  # fmt: skip
    assert out["tip_hash"] == base.tip
    assert core_reason(out, bad) == reason
    data = tmp_path / "data"
    result = reindex(node / "blocks", data, "--mode", "full", "--scripts")
    assert result["tip_hash"] == base.tip
    assert_same_end(out, data)
    where, got = rechain_reason(data, bad, appended.name)
    assert got.split(" ")[0] == reason, (where, got)
    # A block Core refuses before it has an index entry (its header) is one rechain refuses at
    # the header too: invalid in `headers`, not a skipped record of a known header.
    if out["lookups"][bad] is None:
        assert where == "invalid", (where, got)


def raw_tx(b: Base, marker_flag: bytes, witness: bytes) -> bytes:
    """A one-input, one-output transaction spending the mature coin, serialized by hand with
    the given BIP144 marker and flag and witness bytes."""
    plain = spend(b.mature, [(1000, OP_TRUE)]).serialize()
    body = plain[4:-4]  # between the version and the lock time
    return plain[:4] + marker_flag + body + witness + plain[-4:]


# Transactions Core's deserializer refuses (so Core cannot read their block at all), with the
# text it throws: a witness flag with every witness empty, and a flag with unknown bits.
UNREADABLE: dict[str, Callable[[Base], bytes]] = {
    "Superfluous witness record": lambda b: raw_tx(b, b"\x00\x01", b"\x00"),
    "Unknown transaction optional data": lambda b: raw_tx(b, b"\x00\x03", b"\x01\x01\x00"),
}


@pytest.mark.parametrize("why", list(UNREADABLE))
def test_a_block_core_cannot_deserialize_is_skipped_with_its_place(
    core: Path, base: Base, why: str, tmp_path: Path
) -> None:
    node = tmp_path / "node"
    shutil.copytree(base.node, node)
    cb = craft.coinbase(base.next_height, subsidy(base.next_height))
    tx = UNREADABLE[why](base)
    root = craft.merkle_root(
        [cb.txid, craft.sha256d(spend(base.mature, [(1000, OP_TRUE)]).serialize(witness=False))]
    )
    head = craft.header(base.tip, root, base.time)
    record = head + b"\x02" + cb.serialize() + tx
    appended = craft.append_blocks(node / "blocks", record)
    out = run_core(core, "regtest", "--blocks", node / "blocks", "--assumevalid", "0", LOG_REJECTS)
    assert out["tip_hash"] == base.tip
    assert any(why in line for line in out["log_debug"]), out["log_errors"]
    data = tmp_path / "data"
    result = reindex(node / "blocks", data, "--mode", "full", "--scripts")
    assert result["tip_hash"] == base.tip
    assert_same_end(out, data)
    st = cli_json("btc", "status", "--data", data, "--json")
    skips = [s for s in st["skipped"] if s["file"] == appended.name]
    assert len(skips) == 1 and skips[0]["offset"] == 0, st["skipped"]


# Spends that break one of the interpreter's limits (no signature needed), by the error Core's
# interpreter names: (the output script, the spend's witness). 202 counted opcodes (limit 201),
# 1,001 stack items (limit 1,000), and a witness script of 10,001 bytes (limit 10,000; a bare
# output script that long is no coin at all, see the test after).
BIG_SCRIPT = b"\x61" * 10_000 + OP_TRUE
OVER_LIMITS: dict[str, tuple[bytes, list[bytes]]] = {
    "Operation limit exceeded": (b"\x61" * 202 + OP_TRUE, []),
    "Stack size limit exceeded": (OP_TRUE * 1001, []),
    "Script is too big": (b"\x00\x20" + hashlib.sha256(BIG_SCRIPT).digest(), [BIG_SCRIPT]),
}


def over_limit_spend(b: Base, script: bytes, witness: list[bytes]) -> list[bytes]:
    """A coinbase paying to ``script``, 99 blocks that mature it, then a block spending it with
    an empty scriptSig and ``witness``: the last block fails in the interpreter, and only
    there."""
    records: list[bytes] = []
    prev = b.tip
    paid = craft.coinbase(b.next_height, subsidy(b.next_height), pay_to=script)
    for i in range(101):
        height = b.next_height + i
        txs = [paid] if i == 0 else [craft.coinbase(height, subsidy(height))]
        if i == 100:
            tx = Tx(
                [TxIn(paid.txid, 0, witness=witness)], [(subsidy(b.next_height) - 1000, OP_TRUE)]
            )
            commitment = craft.witness_commitment([txs[0], tx]) if witness else None
            txs = [craft.coinbase(height, subsidy(height), commitment=commitment), tx]
        records.append(craft.block(prev, txs, b.time + i))
        prev = craft.block_hash(records[-1])
    return records


@pytest.mark.parametrize("error", list(OVER_LIMITS))
def test_a_script_over_an_interpreter_limit_is_a_verdict_with_its_place(
    core: Path, base: Base, error: str, tmp_path: Path
) -> None:
    """Item 8 of the script issue: a script that runs out of the interpreter's limits fails
    its block with Core's reason, recorded with the block's file, offset and height and the
    transaction and input, and the chain ends where Core's does."""
    node = tmp_path / "node"
    shutil.copytree(base.node, node)
    records = over_limit_spend(base, *OVER_LIMITS[error])
    appended = craft.append_blocks(node / "blocks", *records)
    bad, parent = craft.block_hash(records[-1]), craft.block_hash(records[-2])
    out = run_core(core, "regtest", "--blocks", node / "blocks", "--assumevalid", "0", LOG_REJECTS)
    assert out["tip_hash"] == parent
    core_failure = core_failures(out)[bad]
    assert error in core_failure["reason"] and core_failure["input"] == 0
    data = tmp_path / "data"
    result = reindex(node / "blocks", data, "--mode", "full", "--scripts")
    assert result["tip_hash"] == parent
    assert_same_end(out, data)
    with DataDir(data, readonly=True) as d:
        failure = (d.meta_get(layout.META_BTC_SCRIPT_FAILURES) or {})[bad]
    assert {k: failure[k] for k in ("reason", "input", "txid")} == core_failure
    assert failure["height"] == base.next_height + 100 and failure["tx_index"] == 1
    offset = sum(8 + len(r) for r in records[:-1])
    assert (failure["file"], failure["offset"]) == (appended.name, offset)


def test_an_output_script_over_10000_bytes_is_never_a_coin(
    core: Path, base: Base, tmp_path: Path
) -> None:
    """Core never adds an output whose script is over the interpreter's size limit to the UTXO
    set (it could never be spent): a spend of one is a spend of a missing coin, in both."""
    node = tmp_path / "node"
    shutil.copytree(base.node, node)
    records = over_limit_spend(base, BIG_SCRIPT, [])
    appended = craft.append_blocks(node / "blocks", *records)
    bad, parent = craft.block_hash(records[-1]), craft.block_hash(records[-2])
    out = run_core(core, "regtest", "--blocks", node / "blocks", "--assumevalid", "0", LOG_REJECTS)
    assert out["tip_hash"] == parent
    assert core_reason(out, bad) == "bad-txns-inputs-missingorspent"
    data = tmp_path / "data"
    assert reindex(node / "blocks", data, "--mode", "full", "--scripts")["tip_hash"] == parent
    assert_same_end(out, data)
    where, got = rechain_reason(data, bad, appended.name)
    assert (where, got.split(" ")[0]) == ("invalid", "bad-txns-inputs-missingorspent")
