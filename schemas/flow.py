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

#: `rechain flow checkpoint stats` (flow-go's checkpoint-collect-stats, streamed): one row per
#: trie (node counts, max depth, register totals), per depth, per register kind, per owner.
CHECKPOINT_TRIES = "flow_checkpoint_tries"
CHECKPOINT_DEPTHS = "flow_checkpoint_depths"
CHECKPOINT_REGISTER_KINDS = "flow_checkpoint_register_kinds"
CHECKPOINT_OWNERS = "flow_checkpoint_owners"
CHECKPOINT_STATS_TABLES = (
    CHECKPOINT_TRIES,
    CHECKPOINT_DEPTHS,
    CHECKPOINT_REGISTER_KINDS,
    CHECKPOINT_OWNERS,
)


META_FLOW_SUMMARY = b"flow/summary"
#: The last run's report (timings, workers): describes the run, not the state.
META_FLOW_RUN = b"flow/run"
#: The generation of the published Flow Parquet tables.
META_FLOW_GENERATION = b"flow/generation"
#: The last checkpoint read into the data folder: path, number, tries, root, reg_count.
META_FLOW_CHECKPOINT = b"flow/checkpoint"
#: The generation of the published `flow_checkpoint_*` stats tables, and what they describe.
META_FLOW_CHECKPOINT_STATS = b"flow/checkpoint_stats"
REGISTER_VALUE_VERSION = 1
