"""The full decode's set-based chain state (``build_chain_state`` of the chain_state
stage) on hand-made tables: spends resolve to the latest earlier copy of an output id that
BIP30's duplicate coinbases created twice, and only that copy counts in the UTXO set."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from rechain.pipeline.stages.bitcoin.chain_state import build_chain_state
from rechain.pipeline.stages.bitcoin.indexes import write_utxo_set
from rechain.pipeline.store import DataDir

X = bytes.fromhex("aa" * 32)  # a coinbase txid at heights 1 and 2 (as mainnet's d5d2...8599)
T = bytes.fromhex("bb" * 32)  # a transaction at height 3 spending (X, 0) and a missing output
U = bytes.fromhex("cc" * 32)  # a coinbase at height 3
H1, H2, H3 = (bytes([n]) * 32 for n in (1, 2, 3))
HASH = pa.binary(32)  # staged hashes: raw bytes in display order


def _views(con: duckdb.DuckDBPyConnection) -> None:
    headers = pa.table({
        "hash": [h.hex() for h in (H1, H2, H3)], "height": [1, 2, 3], "in_best_chain": [True] * 3,
    })  # fmt: skip
    outputs = pa.table({
        "txid": pa.array([X, X, U, T], HASH),
        "vout": pa.array([0, 0, 0, 0], pa.uint32()),
        "value": pa.array([50, 60, 70, 55], pa.uint64()),
        "script_pubkey": pa.array([b"\x51"] * 4, pa.large_binary()),  # OP_TRUE, staged as bytes
        "block_hash": pa.array([H1, H2, H3, H3], HASH),
        "tx_position": pa.array([0, 0, 0, 1], pa.uint32()),
    })  # fmt: skip
    inputs = pa.table({
        "txid": pa.array([T, T], HASH),
        "vin": pa.array([0, 1], pa.uint32()),
        "prev_txid": pa.array([X, b"\xdd" * 32], HASH),
        "prev_vout": pa.array([0, 0], pa.uint32()),
        "block_hash": pa.array([H3, H3], HASH),
        "tx_position": pa.array([1, 1], pa.uint32()),
    })  # fmt: skip
    for name, table in (("headers", headers), ("so_raw", outputs), ("si_raw", inputs)):
        con.register(f"{name}_arrow", table)
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM {name}_arrow")


@pytest.mark.parametrize("bits", [0, 3])  # one slice; eight, most of them empty
def test_a_duplicate_output_id_resolves_to_its_latest_copy(tmp_path: Path, bits: int) -> None:
    con = duckdb.connect(":memory:")
    _views(con)
    slices = build_chain_state(con, tmp_path / "slices", 1 << 30, bits)
    res = con.sql("SELECT vin, value, prev_height FROM res ORDER BY vin").fetchall()
    # (X, 0) is the height-2 copy (60 sat); the unknown output does not resolve.
    assert res == [(0, 60, 2), (1, None, None)]
    with DataDir(tmp_path / "d") as data:
        utxo = write_utxo_set(con, data, slices)
    # Unspent: U:0 (70) and T:0 (55); X:0 at height 1 was overwritten by its height-2 copy,
    # which T spent.
    assert (utxo["utxo_count"], utxo["total_amount"]) == (2, 125)
