"""What the ``scripts`` stage has checked, and which blocks ``--assume-valid`` lets it skip.

Checked runs of best-chain blocks are keys of their own (``layout.scripts_run_key``), each
naming the hash of its last block: a block hash commits to all its ancestors, so a run is
still the best chain's as long as the best chain has that hash at that height. The summary
(``META_BTC_SCRIPTS``) is written with every run, and is the stage's output token.

``--assume-valid HASH`` has Core's meaning (``ConnectBlock``): a block's scripts are skipped
when it is an ancestor of HASH (or HASH itself), HASH is on the best header chain, that chain
has at least the network's minimum chain work, and the best header is more than two weeks of
equivalent work past the block. ``0`` (the default) checks every script.
"""

from __future__ import annotations

import json
from typing import Any

from rechain.pipeline.errors import RechainError
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

#: Core's TWO_WEEKS_IN_SECONDS: a block this recent, in equivalent work, is always checked.
TWO_WEEKS = 60 * 60 * 24 * 7 * 2


def normalize_assume_valid(value: str | None) -> str | None:
    """``--assume-valid`` as stored: a display hash, or None for ``0`` / unset (check all)."""
    if value is None or value.strip() in ("", "0"):
        return None
    text = value.strip().lower().removeprefix("0x")
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise RechainError(f"--assume-valid wants a 64-digit block hash or 0, not {value!r}")
    return text


def summary(data: DataDir) -> dict[str, Any] | None:
    value = data.meta_get(layout.META_BTC_SCRIPTS)
    return None if value is None else dict(value)


def runs(data: DataDir) -> list[dict[str, Any]]:
    """The checked runs, in height order."""
    return [
        dict(json.loads(v))
        for _, v in data.items(layout.CF_META, layout.META_BTC_SCRIPTS_RUN_PREFIX)
    ]


def checked_prefix(
    listed: list[dict[str, Any]], best: bytes, tip: int, assumed_through: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(runs kept, runs to drop): the kept runs cover heights 0.. without a gap, each still on
    the best chain at or below ``tip``, and none assumed valid above ``assumed_through`` (a
    setting that no longer skips it)."""
    kept: list[dict[str, Any]] = []
    expected = 0
    for i, run in enumerate(listed):
        first, last = int(run["first"]), int(run["last"])
        on_chain = (
            first == expected
            and last <= tip
            and _native.display_hash(best[32 * last : 32 * last + 32]) == run["hash"]
        )
        if not on_chain or (run["assumed"] and last > assumed_through):
            return kept, listed[i:]
        kept.append(run)
        expected = last + 1
    return kept, []


def _chainwork(data: DataDir, block_hash: bytes) -> int:
    value = data.get(layout.CF_BTC_INDEX, block_hash)
    if value is None:
        raise RechainError(
            f"the block index lacks best-chain block {_native.display_hash(block_hash)}"
        )
    entry = layout.decode_index_value(value)
    return int(entry.chainwork or "0", 16)


def assumed_through(data: DataDir, network: str, assume_valid: str | None, best: bytes) -> int:
    """The highest height whose scripts ``assume_valid`` lets the stage skip (-1: none), by
    Core's rules over the best header chain ``best`` (hashes, internal order)."""
    if assume_valid is None or not best:
        return -1
    wanted = bytes.fromhex(assume_valid)[::-1]
    value = data.get(layout.CF_BTC_INDEX, wanted)
    if value is None:
        return -1  # Core: the assumed-valid block is not in the headers, check everything
    height = layout.decode_index_value(value).height
    if height is None or best[32 * height : 32 * height + 32] != wanted:
        return -1  # not an ancestor of the best header
    tip = len(best) // 32 - 1
    tip_hash = best[32 * tip : 32 * tip + 32]
    tip_work = _chainwork(data, tip_hash)
    info = _native.network_info(network)
    if tip_work < int(info.minimum_chain_work, 16):
        return -1
    # GetBlockProofEquivalentTime(best header, block, best header): the work between them in
    # seconds at the best header's own proof per block.
    tip_proof = tip_work - (_chainwork(data, best[32 * tip - 32 : 32 * tip]) if tip else 0)

    def far_enough(h: int) -> bool:
        work = tip_work - _chainwork(data, best[32 * h : 32 * h + 32])
        return work * info.target_spacing // max(tip_proof, 1) > TWO_WEEKS

    # Equivalent time shrinks with height: the highest height still far enough, by bisection.
    lo, hi = -1, height
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if far_enough(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
