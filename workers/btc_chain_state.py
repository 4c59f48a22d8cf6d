"""The chain state's work on one chunk of best-chain blocks, wherever it runs.

A chunk (``ChunkSpec``: consecutive heights, their blk files and offsets) is read and framed
by the Rust core (``load_chunk``). Applied in height order on the coordinator, it reads its
coins from RocksDB; applied on a worker, it takes the coins the spend resolution gave it
(``chunk_events``, then ``resolve_partition`` per txid partition, see
``workers/native/src/btc/spend_resolve.rs``). Either way it writes its part the same way
(``write_part``): the resolved spends and its rows of the four tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from rechain.schemas import bitcoin as ds
from rechain.schemas import tables
from rechain.workers import _native

#: The tables whose best-chain rows the chain state writes itself (``write_rows``); their
#: ``outputs`` rows are written unspent, the publish stage sets the flags.
ROW_TABLES = (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS)


@dataclass(frozen=True)
class ChunkSpec:
    """Best-chain blocks from height ``first``: their hashes (internal order), blk files
    (path and number) and record offsets, from the block index."""

    first: int
    hashes: tuple[bytes, ...]
    paths: tuple[str, ...]
    files: tuple[int, ...]
    offsets: tuple[int, ...]
    network: str
    xor_key: bytes
    #: The records' bytes as the block index gives them.
    block_bytes: int


def load_chunk(spec: ChunkSpec) -> Any:
    """The chunk's blocks read from their files and framed (``_native.ChainStateChunk``)."""
    return _native.ChainStateChunk(
        spec.network,
        spec.xor_key,
        spec.first,
        list(spec.hashes),
        list(spec.paths),
        list(spec.files),
        list(spec.offsets),
    )


def write_part(
    chunk: Any, spends: pa.RecordBatch, tmps: list[Path], group_bytes: int, threads: int
) -> None:
    """Writes an applied chunk's part: its resolved spends to ``tmps[0]`` and its rows of
    ``ROW_TABLES`` to the others, on at most ``threads`` Rust threads (one: on this thread)."""
    # ROW_TABLES grow from blocks to outputs: the largest start first.
    files = reversed(list(zip(ROW_TABLES, tmps[1:], strict=True)))
    chunk.write_rows(
        [
            (t, tables.TABLES[t].schema, tmp, tables.TABLES[t].native_layout(group_bytes))
            for t, tmp in files
        ],
        spends,
        tmps[0],
        tables.BTC_SPENDS.native_layout(group_bytes),
        threads,
    )


def chunk_events(spec: ChunkSpec, partitions: int) -> list[bytes]:
    """The chunk's spend-resolution events, one buffer per txid partition."""
    events: list[bytes] = load_chunk(spec).events(partitions)
    return events


def resolve_partition(*events: bytes) -> list[Any]:
    """One partition's resolution over every chunk (``events``: that partition's buffer of
    each chunk, in height order): each chunk's records, then each chunk's keys left to the
    stored set (a list of ``btc_utxo`` keys)."""
    records: list[bytes] = _native.resolve_spends(list(events))
    return [*records, *(_native.resolved_stored_keys(r) for r in records)]
