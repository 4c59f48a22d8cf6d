"""The script checks of one run of best-chain blocks, wherever it runs: the blocks are read
from their blk files and every input verified by Bitcoin Core's interpreter against the coins
the block's undo record restores (``workers/native/src/btc/scripts/``). A run carries all it
needs, so runs are independent of each other and of their order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rechain.workers import _native
from rechain.workers.btc_chain_state import ChunkSpec


@dataclass(frozen=True)
class ScriptsUnit:
    """A run of best-chain blocks (``spec``) and their undo records (``btc_undo`` values)."""

    spec: ChunkSpec
    undos: tuple[bytes, ...]

    @property
    def last(self) -> int:
        return self.spec.first + len(self.spec.hashes) - 1


def check_scripts(unit: ScriptsUnit, threads: int = 1) -> dict[str, Any]:
    """{blocks, txs, inputs, failure (None or {height, block_hash, file, offset, tx_index,
    txid, input, reason})} of the unit's blocks, on at most ``threads`` threads."""
    spec = unit.spec
    checked = _native.verify_block_scripts(
        spec.network,
        spec.xor_key,
        spec.first,
        list(spec.hashes),
        list(spec.paths),
        list(spec.offsets),
        list(unit.undos),
        threads,
    )
    return dict(checked.as_dict())
