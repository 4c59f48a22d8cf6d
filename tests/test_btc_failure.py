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
