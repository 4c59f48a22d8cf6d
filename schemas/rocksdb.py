"""RocksDB layout: column families, meta keys and value versions.

Block-index keys and values are encoded by the Rust core (``workers/native/src/store.rs``);
this module names where they live and wraps the encoders for Python callers.
"""

from __future__ import annotations

import struct

from rechain.workers import _native
from rechain.workers.native_results import IndexEntry

#: Run metadata: JSON values under the META_* keys.
CF_META = "meta"
#: Per blk file: scan progress and fingerprint (JSON, versioned).
CF_BTC_FILES = "btc_files"
#: Scan log: segments keyed by (file, cell start, kind), one per SCAN_CELL_BYTES of a file, so
#: its content is the same however a run was sharded or interrupted. A value is
#: SCAN_SEGMENT_VERSION then the name of an Arrow IPC file in DATADIR/SCAN_SEGMENT_DIR (written
#: and synced before the value): tens of MiB per shard that a write-ahead log, memtables and
#: compactions would copy three more times.
CF_BTC_SCAN = "btc_scan"
#: Block index: hash (internal order) -> index value v1.
CF_BTC_INDEX = "btc_index"
#: Best chain: bucket of heights (u32 big-endian) -> their hashes (internal order), see
#: ``best_chain_hash``.
CF_BTC_BEST = "btc_best"
#: The best chain's median times past (Core's ``GetMedianTimePast``): the keys of ``btc_best``
#: -> each height's as u32 little-endian (4 bytes a height), for lock times and BIP68.
CF_BTC_BEST_MTP = "btc_best_mtp"

#: Full decode: staged body parts (part name -> JSON {file, records, tables}), see
#: pipeline/bitcoin/body_parts.
CF_BTC_BODIES = "btc_bodies"
#: UTXO set at the best tip: Core's chainstate key ('C' | txid internal | VARINT(vout)) ->
#: code u32 LE (height * 2 + coinbase) | value u64 LE | row u32 LE (the output's place among
#: its block's outputs) | script (encoded in btc/chain_state.rs, ``coin_value``).
CF_BTC_UTXO = "btc_utxo"
#: Undo data of each applied best-chain block: height (u32 big-endian) -> the block's hash and
#: the coins it created and spent (encoded in btc/chain_state.rs), so that the UTXO set rolls
#: back exactly to a fork point.
CF_BTC_UNDO = "btc_undo"
#: Transaction index: txid (internal order) -> where the full-decode tables hold the
#: transaction (``TxPlace`` in btc/txindex.rs): a best-chain copy by height and position (8
#: bytes), any other by height range, block hash and position (40 bytes).
CF_BTC_TXINDEX = "btc_txindex"
#: The format of ``btc_txindex`` values, recorded in ``META_BTC_TXINDEX``: an index of another
#: format is built again from the staged txids (format 1 was UTF-8 text, 75 bytes a value).
TXINDEX_FORMAT = 2

#: Flow ledger column families (named in rechain.schemas.flow).
CF_FLOW_REGISTERS = "flow_registers"
CF_FLOW_ROOTS = "flow_roots"

#: Ethereum header index (keys and values encoded in workers/native/src/eth/import.rs): block
#: hash (32 bytes) -> number (u64 big-endian); number -> hash of the block imported there;
#: number -> total difficulty (32 bytes big-endian).
CF_ETH_NUMBERS = "eth_numbers"
CF_ETH_CANONICAL = "eth_canonical"
CF_ETH_TD = "eth_td"

COLUMN_FAMILIES = (
    CF_META,
    CF_BTC_FILES,
    CF_BTC_SCAN,
    CF_BTC_INDEX,
    CF_BTC_BEST,
    CF_BTC_BEST_MTP,
    CF_BTC_BODIES,
    CF_BTC_UTXO,
    CF_BTC_UNDO,
    CF_BTC_TXINDEX,
    CF_FLOW_REGISTERS,
    CF_FLOW_ROOTS,
    CF_ETH_NUMBERS,
    CF_ETH_CANONICAL,
    CF_ETH_TD,
)
#: Column families rebuilt whole by every link phase.
DERIVED_COLUMN_FAMILIES = (CF_BTC_INDEX, CF_BTC_BEST, CF_BTC_BEST_MTP)

META_LAYOUT = b"layout"
#: What the folder holds: JSON {pipeline ("bitcoin", "flow" or "eth"), and the settings a
#: rerun inherits (Bitcoin: network, mode)} (pipeline/store/folder.py).
META_FOLDER = b"folder"
META_BTC_NETWORK = b"btc/network"
META_BTC_SUMMARY = b"btc/summary"
META_BTC_DIRTY = b"btc/dirty"
META_BTC_RUN = b"btc/run"
#: Blocks that break a consensus rule found by the full decode: JSON {display hash: reason}.
META_BTC_INVALID_BLOCKS = b"btc/invalid_blocks"
#: Result of the last full decode (UTXO figures, tables published): JSON.
META_BTC_FULL = b"btc/full"
#: How far the UTXO set has been applied: JSON {layout, height, hash, utxo_count,
#: total_amount}, written with each applied chunk.
META_BTC_CHAIN_STATE = b"btc/chain_state"
#: The applied chain's parts, one key each (``chain_part_key(first height)``): JSON [first
#: height, last height, part file], written in the same write as the chunk's checkpoint, so a
#: commit writes one part, not the list of every part before it.
META_BTC_CHAIN_PART_PREFIX = b"btc/chain_part/"
#: Script validation (``--scripts``, pipeline/bitcoin/script_checks.py): how far the applied
#: chain's scripts are checked, JSON {height, hash (display), assume_valid, blocks, txs,
#: inputs, assumed_blocks}, written with each checked run's key.
META_BTC_SCRIPTS = b"btc/scripts"
#: One key per checked run of best-chain blocks (``scripts_run_key(first height)``): JSON
#: {first, last, hash (display, of the block at last), assumed, txs, inputs}. A run whose last
#: block left the best chain is checked again.
META_BTC_SCRIPTS_RUN_PREFIX = b"btc/scripts_run/"
#: Blocks found invalid by a script: JSON {display hash: {height, tx_index, txid, input,
#: reason}} (the reason is also in ``META_BTC_INVALID_BLOCKS``).
META_BTC_SCRIPT_FAILURES = b"btc/script_failures"
#: The published full-decode tables' segments: JSON {generation, segments: [{first, last,
#: hash (display, of the block at last), path, spent (fingerprint)}]} (pipeline/bitcoin/stages/
#: publish.py).
META_BTC_PUBLISHED = b"btc/published"
#: Which generation of the tables ``btc_txindex`` matches: JSON {generation, segments ([path,
#: hash of the block at its end]), entries, format} (pipeline/bitcoin/stages/indexes.py).
META_BTC_TXINDEX = b"btc/txindex"
#: Published generation of the full-decode tables.
META_BTC_FULL_GENERATION = b"btc/full_generation"
#: Published generation of the headers table (a run artefact, not content).
META_BTC_GENERATION = b"btc/generation"

#: The Ethereum import: what it reads (JSON {kind, source, network, pow, from, to}), and per
#: unit (``eth/unit/<unit key>``) what it committed: JSON {first, end, blocks, transactions,
#: fingerprint, part, last_header, last_td, td_known, accumulator, violations, ...}, written in
#: the same RocksDB write as the unit's index entries (pipeline/ethereum/stages/blocks.py).
META_ETH_IMPORT = b"eth/import"
META_ETH_UNIT_PREFIX = b"eth/unit/"
#: The checks between neighbouring units and the gaps between them: JSON {token, checked,
#: verdicts, gaps} (pipeline/ethereum/stages/links.py).
META_ETH_LINKS = b"eth/links"
#: The last run's report (JSON).
META_ETH_RUN = b"eth/run"

#: Stage checkpoints: ``stage/<pipeline>/<stage>`` -> JSON (see pipeline/engine/driver.py).
META_STAGE_PREFIX = b"stage/"

#: Version of this layout; a data folder written by another version is refused.
LAYOUT_VERSION = 2
FILE_ENTRY_VERSION = 1
SCAN_SEGMENT_VERSION = 2
SCAN_SEGMENT_DIR = "scan"

SCAN_CELL_BYTES = 16 << 20
SEGMENT_RECORDS = b"r"
SEGMENT_EVENTS = b"e"


def file_key(file_no: int) -> bytes:
    return struct.pack(">I", file_no)


def segment_key(file_no: int, start: int, kind: bytes) -> bytes:
    return struct.pack(">IQ", file_no, start) + kind


def parse_segment_key(key: bytes) -> tuple[int, int, bytes]:
    file_no, start = struct.unpack(">IQ", key[:12])
    return file_no, start, key[12:]


def best_chain_key(height: int) -> bytes:
    """Key of the ``btc_best`` bucket that holds ``height``."""
    return bytes(_native.best_chain_key(height))


def undo_key(height: int) -> bytes:
    return struct.pack(">I", height)


def chain_part_key(first: int) -> bytes:
    """``META_BTC_CHAIN_PART_PREFIX`` key of the chain-state part from height ``first``: keys
    in height order."""
    return META_BTC_CHAIN_PART_PREFIX + struct.pack(">I", first)


def scripts_run_key(first: int) -> bytes:
    """``META_BTC_SCRIPTS_RUN_PREFIX`` key of the checked run from height ``first``: keys in
    height order."""
    return META_BTC_SCRIPTS_RUN_PREFIX + struct.pack(">I", first)


def best_chain_hash(bucket: bytes | None, height: int) -> bytes | None:
    """``height``'s hash (internal order) from its ``btc_best`` bucket value, if on the chain."""
    start, end = _native.best_chain_slot(height)
    return bucket[start:end] if bucket is not None and len(bucket) >= end else None


def index_key(display_hash: str) -> bytes:
    return bytes(_native.parse_hash(display_hash))


def decode_index_value(value: bytes) -> IndexEntry:
    """One `btc_index` value decoded (the Rust core's `IndexEntry`)."""
    entry: IndexEntry = _native.decode_index_value(value)
    return entry
