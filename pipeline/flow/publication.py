"""A Flow forest's current trie and update log published to RocksDB and Parquet as a new
generation: ``publish_forest`` from a forest in this process (the ``publish`` stage, a
checkpoint read in memory), ``publish_staged_registers`` from the parts and SST files a
streamed checkpoint read has staged (same tables, same summary)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout
from rechain.schemas import tables
from rechain.workers.fault_injection import kill_point
from rechain.workers.memory import DEFAULT_MEMORY_BUDGET, release_unused_memory


def publish_forest(
    data: DataDir,
    forest: Any,
    segments: list[tuple[int, str]],
    skipped: list[dict[str, Any]],
    last_segment: int | None = None,
    resumed_from: dict[str, Any] | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> dict[str, Any]:
    """Publishes the forest's current trie and update log: the Parquet tables (written by the
    Rust core, so this process never loads pyarrow), then RocksDB's registers and roots,
    within ``memory_budget``."""
    t0 = time.perf_counter()
    release_unused_memory()
    gen_key = fs.META_FLOW_GENERATION
    generation = int(data.meta_get(gen_key) or 0) + 1
    register_rows = 0
    # The registers' SST files (current payloads, path order = key order) come from the same
    # walk of the trie as their Parquet tables, complete before the database changes.
    sst_dir = data.sst_dir(layout.CF_FLOW_REGISTERS)
    sst_files: list[Path] = []

    def registers(parts: list[Path]) -> None:
        nonlocal register_rows, sst_files
        register_rows, files = forest.write_registers(
            str(parts[0]),
            str(parts[1]),
            tables.REGISTERS.native_layout(),
            tables.REGISTER_HASHES.native_layout(),
            sst_dir=str(sst_dir),
            # An SST file closes once its filter's key hashes and index take this share.
            sst_memory=budget_share(memory_budget, "flow", "publish.sst"),
            sst_version=fs.REGISTER_VALUE_VERSION,
        )
        sst_files = [Path(f) for f in files]

    data.stage_parquet_files(
        [fs.TRIE_UPDATES],
        generation,
        lambda parts: forest.write_trie_updates(str(parts[0]), tables.TRIE_UPDATES.native_layout()),
    )
    # Each step's buffers go back to the OS before the next: freed heap pages are otherwise
    # kept, and the steps' transients would add up on top of the forest.
    release_unused_memory()
    data.stage_parquet_files([fs.REGISTERS, fs.REGISTER_HASHES], generation, registers)
    release_unused_memory()
    # RocksDB: current payloads and the root history.
    for cf in (layout.CF_FLOW_REGISTERS, layout.CF_FLOW_ROOTS):
        data.reset_column_family(cf)
    kill_point("flow_publish.registers_reset")
    if sst_files:
        data.ingest_sst(layout.CF_FLOW_REGISTERS, sst_files)
    data.ingest_sorted_slices(layout.CF_FLOW_ROOTS, forest.log_len, forest.root_entries)
    kill_point("flow_publish.registers_ingested")
    summary = {
        "root": forest.root_hex,
        "updates_applied": int(forest.updates_applied),
        "registers": int(forest.register_count()),
        # flow-go's AllocatedRegSize (accumulated per update), for the checkpoint writer.
        "reg_size": int(forest.reg_size()),
        "register_rows": register_rows,
        "segments": len(segments),
        "last_segment": segments[-1][0] if segments else last_segment,
        "skipped": skipped,
        "publish_s": time.perf_counter() - t0,
    }
    if resumed_from is not None:
        # The checkpoint's tries are where the replayed updates start from (`rechain verify`).
        summary["resumed_from"] = resumed_from
    data.write({layout.CF_META: [(fs.META_FLOW_SUMMARY, summary), (gen_key, generation)]})
    kill_point("flow_publish.summary_written")
    for t in (fs.TRIE_UPDATES, fs.REGISTERS, fs.REGISTER_HASHES):
        data.remove_other_generations(t, generation)
    data.publish_view()
    return summary


def publish_staged_registers(
    data: DataDir,
    generation: int,
    staged: dict[str, Path],
    ssts: list[Path],
    root: str,
    registers: int,
    reg_size: int,
    rows: int,
    last_segment: int | None,
) -> dict[str, Any]:
    """Publishes a trie whose ``registers`` and ``register_hashes`` parts were staged (in
    ``data.begin_generation`` folders of ``generation``, path order) by a streamed checkpoint
    read, with RocksDB's registers from its SST files ``ssts`` (key order): an empty update
    log, the staged tables, the ingested registers and the summary ``publish_forest``
    writes."""
    from rechain.workers import _native

    t0 = time.perf_counter()
    empty = _native.FlowForest()
    data.stage_parquet_files(
        [fs.TRIE_UPDATES],
        generation,
        lambda parts: empty.write_trie_updates(str(parts[0]), tables.TRIE_UPDATES.native_layout()),
    )
    for table in (fs.REGISTERS, fs.REGISTER_HASHES):
        data.publish_generation(table, generation, staged[table])
    for cf in (layout.CF_FLOW_REGISTERS, layout.CF_FLOW_ROOTS):
        data.reset_column_family(cf)
    kill_point("flow_publish.registers_reset")
    if ssts:
        data.ingest_sst(layout.CF_FLOW_REGISTERS, ssts)
    kill_point("flow_publish.registers_ingested")
    summary = {
        "root": root,
        "updates_applied": 0,
        "registers": registers,
        "reg_size": reg_size,
        "register_rows": rows,
        "segments": 0,
        "last_segment": last_segment,
        "skipped": [],
        "publish_s": time.perf_counter() - t0,
    }
    gen_key = fs.META_FLOW_GENERATION
    data.write({layout.CF_META: [(fs.META_FLOW_SUMMARY, summary), (gen_key, generation)]})
    kill_point("flow_publish.summary_written")
    for t in (fs.TRIE_UPDATES, fs.REGISTERS, fs.REGISTER_HASHES):
        data.remove_other_generations(t, generation)
    data.publish_view()
    return summary
