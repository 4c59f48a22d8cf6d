"""Flow ledger datasets: Parquet tables, RocksDB column families and meta keys."""

from __future__ import annotations

# Column families: CF_FLOW_REGISTERS (path -> value v1: version | u32 key length | encoded key |
# value) and CF_FLOW_ROOTS (update seq, u64 big-endian -> root hash), declared with the others.

#: One row per WAL record applied: seq, segment, parent_root, root, n_paths, op.
TRIE_UPDATES = "trie_updates"
#: The state after the replay: path, owner, key, value_size, value (+ encoded_key).
REGISTERS = "registers"
#: Same rows as `registers`: path, height, leaf_hash (HashLeaf), node_hash (the compact leaf
#: hash at that height), so a checkpoint write need not rerun every leaf's hash chain.
REGISTER_HASHES = "register_hashes"


META_FLOW_SUMMARY = b"flow/summary"
#: The last run's report (timings, workers): describes the run, not the state.
META_FLOW_RUN = b"flow/run"
#: The generation of the published Flow Parquet tables.
META_FLOW_GENERATION = b"flow/generation"
#: The last checkpoint read into the data folder: path, number, tries, root, reg_count.
META_FLOW_CHECKPOINT = b"flow/checkpoint"
REGISTER_VALUE_VERSION = 1
