"""The chain state's staged parts and checkpoint, as the stages after it read them.

Each applied chunk leaves a *part* named by its heights in five folders under
``DATADIR/stage``: ``spends/`` and ``rows/<table>/`` for each of ``ROW_TABLES``, listed by a
key of its own (``layout.chain_part_key``) written in the same RocksDB write as the chunk's
set changes and the checkpoint (``commit_applied``). This module owns that layout; the
``chain_state`` stage writes it, ``publish``, ``indexes``, spend resolution and status read it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
from rechain.pipeline.errors import RechainError
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.btc_chain_state import ROW_TABLES, ChunkSpec
from rechain.workers.fault_injection import kill_point

if TYPE_CHECKING:
    from rechain.pipeline.bitcoin.run import BtcRun
    from rechain.workers.native_results import IndexEntry


#: Applied chunks whose rows may be written at once (``rows_threads``).
ROWS_IN_FLIGHT = 2


#: The checkpoint's layout: a checkpoint of another layout is rebuilt from the genesis block
#: (layout 6 added each coin's row to its ``btc_utxo`` value).
LAYOUT = 6


def spends_dir(data: DataDir) -> Path:
    return part_dirs(data)[0]


def rows_dir(data: DataDir, table: str) -> Path:
    return part_dirs(data)[1 + ROW_TABLES.index(table)]


def part_dirs(data: DataDir) -> list[Path]:
    """The folders holding a file per part, under the part's name: spends, then the rows of
    each of ``ROW_TABLES``."""
    return [f.parent for f in _part_paths(data.path, "-")]


def checkpoint(data: DataDir) -> dict[str, Any] | None:
    """The applied chain's tip and the set's figures, or None when nothing is applied."""
    cp: dict[str, Any] | None = data.meta_get(layout.META_BTC_CHAIN_STATE)
    return cp


Part = tuple[int, int, str]


def parts(data: DataDir) -> list[Part]:
    """The parts of the applied chain, in height order: (first, last, name)."""
    cp = checkpoint(data)
    if cp is None:
        # Keys a killed reset left behind are not parts of anything.
        return []
    entries = (
        json.loads(v) for _, v in data.items(layout.CF_META, layout.META_BTC_CHAIN_PART_PREFIX)
    )
    return [(int(lo), int(hi), str(name)) for lo, hi, name in entries]


def spend_files(data: DataDir, first: int = 0, last: int | None = None) -> list[str]:
    """The staged spends parts of the applied chain (those holding heights ``first`` to
    ``last``), in height order."""
    return [
        str(spends_dir(data) / name)
        for lo, hi, name in parts(data)
        if hi >= first and (last is None or lo <= last)
    ]


def part_entry(part: Part) -> tuple[bytes, bytes]:
    """A part's key and value (``layout.chain_part_key``)."""
    first, last, name = part
    return layout.chain_part_key(first), encode_json([first, last, name])


def empty_spends() -> pa.RecordBatch:
    batch: pa.RecordBatch = _native.empty_batch("btc_spends")
    return batch


#: Block-index entries read per multi-get while cutting the best chain into runs.
INDEX_READ_BLOCKS = 1_024


def best_chain(data: DataDir) -> bytes:
    """The best chain's hashes (internal order, 32 bytes per height from 0)."""
    return b"".join(v for _, v in data.items(layout.CF_BTC_BEST))


def best_chain_median_times(data: DataDir) -> bytes:
    """The best chain's median times past (u32 little-endian, 4 bytes per height from 0), as
    the link wrote them beside ``best_chain``."""
    return b"".join(v for _, v in data.items(layout.CF_BTC_BEST_MTP))


def best_chain_runs(
    data: DataDir, best: bytes, start: int, tip: int, max_bytes: int, segment: int
) -> Iterator[tuple[int, list[bytes], list[IndexEntry]]]:
    """(first height, hashes, block-index entries) of consecutive best-chain runs from
    ``start`` to ``tip``, each of at most ``max_bytes`` of blocks (or one block), none
    crossing a multiple of ``segment``."""
    index = data.cf(layout.CF_BTC_INDEX)
    first, hashes, entries, size = start, [], [], 0
    for lo in range(start, tip + 1, INDEX_READ_BLOCKS):
        heights = range(lo, min(tip + 1, lo + INDEX_READ_BLOCKS))
        batch = [best[32 * k : 32 * k + 32] for k in heights]
        for block_hash, value in zip(batch, index[batch], strict=True):
            if value is None:
                raise RechainError(
                    f"the best chain names block {_native.display_hash(block_hash)}, "
                    "which the block index lacks"
                )
            entry = layout.decode_index_value(value)
            hashes.append(block_hash)
            entries.append(entry)
            size += entry.size + 8
            if size >= max_bytes or (first + len(hashes)) % segment == 0:
                yield first, hashes, entries
                first, hashes, entries, size = first + len(hashes), [], [], 0
    if hashes:
        yield first, hashes, entries


def applied_copies(data: DataDir) -> pa.Table:
    """The file and offset of each block copy the applied chain read (its parts' ``blocks``
    rows): the chain state checked their bodies as the body pass would have."""
    files = [str(rows_dir(data, ds.BLOCKS) / name) for _, _, name in parts(data)]
    if not files:
        return pa.table({"file": pa.array([], pa.uint32()), "offset": pa.array([], pa.uint64())})
    return pq.read_table(files, columns=["file", "offset"])


def transaction_files(data: DataDir) -> list[str]:
    """The applied chain's staged ``transactions`` rows (txid, block hash and position, as
    the tx index reads them), in height order."""
    return [str(rows_dir(data, ds.TRANSACTIONS) / name) for _, _, name in parts(data)]


def part_name(first: int, last: int) -> str:
    return f"{first:010d}-{last:010d}.parquet"


def part_files(data_path: Path, first: int, blocks: int) -> list[Path]:
    """The files of the part of ``blocks`` heights from ``first`` in the data folder at
    ``data_path``, as ``write_part`` fills them; their folders made."""
    finals = _part_paths(data_path, part_name(first, first + blocks - 1))
    for f in finals:
        f.parent.mkdir(parents=True, exist_ok=True)
    return finals


def _part_paths(data_path: Path, name: str) -> list[Path]:
    """A part's files: its spends, then its rows of each of ``ROW_TABLES``."""
    stage = data_path / "stage"
    return [stage / "spends" / name, *(stage / "rows" / t / name for t in ROW_TABLES)]


def row_group_bytes(ctx: BtcRun) -> int:
    """Encoded bytes at which a part's row group closes early: the chunks whose rows are
    written at once share the budget."""
    groups = budget_share(ctx.opts.memory_budget, "bitcoin", "chain_state.row_groups")
    return max(groups // ROWS_IN_FLIGHT, 1 << 20)


def chunk_spec(ctx: BtcRun, chunk: tuple[int, list[bytes], list[IndexEntry]]) -> ChunkSpec:
    """A chunk (first height, hashes, index entries) as the workers read it."""
    first, hashes, entries = chunk
    paths = ctx.paths
    return ChunkSpec(
        first=first,
        hashes=tuple(hashes),
        paths=tuple(paths[e.file] for e in entries),
        files=tuple(e.file for e in entries),
        offsets=tuple(e.offset for e in entries),
        network=ctx.opts.network,
        xor_key=ctx.key,
        block_bytes=sum(e.size for e in entries),
    )


def commit_applied(
    ctx: BtcRun, cp: dict[str, Any], first: int, result: dict[str, Any]
) -> dict[str, Any]:
    """Commits an applied chunk whose part is written: its set changes and undo records with
    the checkpoint and its part's key, in one write; returns the new checkpoint."""
    t1 = time.perf_counter()
    last = first + int(result["blocks"]) - 1
    cp = {
        "layout": LAYOUT,
        "height": last,
        "hash": result["tip"][1],
        "utxo_count": cp["utxo_count"] + result["count_delta"],
        "total_amount": cp["total_amount"] + result["amount_delta"],
    }
    part_key, part_value = part_entry((first, last, part_name(first, last)))
    ctx.data.write_columns(
        {
            layout.CF_BTC_UTXO: result["puts"],
            layout.CF_BTC_UNDO: result["undo"],
            layout.CF_META: (
                [layout.META_BTC_CHAIN_STATE, part_key],
                [encode_json(cp), part_value],
            ),
        },
        {layout.CF_BTC_UTXO: result["deletes"]},
    )
    kill_point("chain_state.applied")
    ctx.add({"chain_state_commit_s": time.perf_counter() - t1})
    return cp


def encode_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


class FailureKind(Enum):
    """Which check stopped the applied chain at a block (the Rust core's ``FailureKind``)."""

    #: The block's header (its proof of work or its link).
    HEADER = "header"
    #: The copy's body: merkle root, transaction rules, sigops, witness commitment, weight.
    BODY = "body"
    #: A consensus rule that needs the UTXO set: BIP34 height, spends, amounts.
    BLOCK = "block"


class BlockFailure(NamedTuple):
    """The first block a chunk could not apply, as the chain state reports it."""

    height: int
    block_hash: str
    reason: str
    kind: FailureKind

    @classmethod
    def of(cls, result: dict[str, Any]) -> BlockFailure | None:
        """An applied chunk's failure (``result["failure"]``: height, hash, reason, kind), or
        None; a kind the Rust core does not name is an error, not a silent other branch."""
        raw = result["failure"]
        if raw is None:
            return None
        height, block_hash, reason, kind = raw
        return cls(int(height), str(block_hash), str(reason), FailureKind(kind))
