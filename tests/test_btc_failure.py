"""The chain state's block failures cross from the Rust core as (height, hash, reason, kind):
Python reads them into ``BlockFailure`` with a ``FailureKind`` that must name exactly the
Rust core's kinds, and refuses a kind it does not know instead of taking another branch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rechain.pipeline.bitcoin.chain_parts import BlockFailure, FailureKind

ROOT = Path(__file__).resolve().parents[1]


def test_the_kinds_are_the_rust_cores() -> None:
    source = (ROOT / "workers" / "native" / "src" / "btc" / "error.rs").read_text()
    names = dict(re.findall(r'FailureKind::(\w+) => "(\w+)"', source))
    assert names, "FailureKind::name() not found in btc/error.rs"
    assert {k.name.title(): k.value for k in FailureKind} == names


def test_a_failure_is_read_typed() -> None:
    got = BlockFailure.of({"failure": (7, "ab" * 32, "bad-txns-inputs-missingorspent", "block")})
    assert got == BlockFailure(7, "ab" * 32, "bad-txns-inputs-missingorspent", FailureKind.BLOCK)
    assert got is not None and got.kind is FailureKind.BLOCK
    assert BlockFailure.of({"failure": None}) is None


def test_an_unknown_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="scripts"):
        BlockFailure.of({"failure": (7, "ab" * 32, "reason", "scripts")})


def test_a_bitcoin_error_says_where_and_why(tmp_path: Path) -> None:
    """A best-chain block whose record is not where the index puts it: the chain state's
    load raises ``BtcError`` naming the block, its file and offset and the problem, and
    the handlers written for the ``OSError`` it was still catch it."""
    from rechain.workers import _native

    blk = tmp_path / "blk00000.dat"
    blk.write_bytes(bytes(200))
    block_hash = bytes(range(32))  # internal order
    with pytest.raises(_native.BtcError) as raised:
        _native.ChainStateChunk("regtest", bytes(8), 7, [block_hash], [str(blk)], [0], [100])
    e = raised.value
    assert isinstance(e, OSError) and isinstance(e, ValueError)
    shown = _native.display_hash(block_hash)
    assert e.kind == "record"
    assert (e.block_hash, e.height, e.file, e.offset) == (shown, 7, str(blk), 100)
    assert e.reason == "no block magic at the indexed offset (file changed?)"
    # The message is the one Python always received.
    assert str(e) == f"block {shown} (height 7) at {blk}:100: {e.reason}"


def test_a_store_error_is_a_bitcoin_error_and_a_value_error() -> None:
    from rechain.workers import _native

    with pytest.raises(ValueError) as raised:
        _native.decode_index_value(b"\x00")
    e = raised.value
    assert isinstance(e, _native.BtcError)
    assert e.kind == "store" and e.reason == str(e)
    assert (e.block_hash, e.height, e.file, e.offset) == (None, None, None, None)
