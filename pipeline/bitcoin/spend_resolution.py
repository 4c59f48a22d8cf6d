"""The chain state applied on Ray workers: spends resolved by txid partition, then every chunk
applied and written on its own, committed in height order by the coordinator.

Three rounds of tasks, data moving through Ray's object store (it spills to disk beyond its
memory, and reaches the nodes of a cluster that share no folder with the coordinator):

The range is applied in rounds of a bounded size (a quarter of the memory budget of blocks): a
round's partitions are what the object store holds, the next round's are resolved while this
one applies, and what a round leaves to the set is read once the rounds before it are committed.

1. *events*, a task per chunk: the chunk's blocks read from the blk files and split into
   txid partitions, each output created (with its coin) and each outpoint spent.
2. *resolve*, a task per partition: that partition's events of every chunk folded in chain
   order into, for each chunk, the coins it needs as the chunks before it left them, or
   "stored" for coins the range never touched before it.
3. *apply*, a task per chunk: the chunk applied to those coins (the stored ones read from
   RocksDB by the coordinator as the task is submitted: commits of earlier chunks never
   change a key they leave to the set), its part written (spends and rows), and its set
   changes and undo records returned.

The coordinator plans the chunks, reads the stored coins and commits each chunk in height
order, exactly as the sequential path does (same parts, same checkpoint after each chunk, same
kill points); a chunk's result is the sequential one (``btc/spend_resolve.rs``), so the first
failing block is too, and the chunks after it are dropped.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rechain.pipeline.bitcoin import chain_parts
from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.errors import RechainError
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.store.datadir import DataDir, land_tmp_files, tmp_path
from rechain.schemas import rocksdb as layout
from rechain.workers import fault_injection
from rechain.workers.btc_chain_state import (
    ROW_TABLES,
    ChunkSpec,
    chunk_events,
    load_chunk,
    resolve_partition,
    write_part,
)

log = logging.getLogger(__name__)
#: The metrics label of the chain state's tasks.
STAGE = "btc_chain_state"
#: A partition's events are about its share of the range's block bytes; a resolve task
#: holds them about twice over. Partitions are sized to a quarter of the budget each.
MAX_PARTITIONS = 4096


def partitions(block_bytes: int, memory_budget: int, cpus: int) -> int:
    """Txid partitions for a range: at least two per CPU, each a quarter of the budget."""
    quarter = budget_share(memory_budget, "bitcoin", "chain_state.rounds")
    by_memory = -(-2 * block_bytes // max(quarter, 1))
    return int(min(MAX_PARTITIONS, max(2 * cpus, by_memory, 1)))


def round_bytes(memory_budget: int) -> int:
    """Block bytes per round: two rounds' partitions are in the object store at once."""
    return budget_share(memory_budget, "bitcoin", "chain_state.rounds")


def rounds(specs: list[ChunkSpec], max_bytes: int) -> list[list[ChunkSpec]]:
    """Consecutive runs of chunks of at most ``max_bytes`` of blocks (or one chunk)."""
    out: list[list[ChunkSpec]] = []
    size = 0
    for spec in specs:
        if not out or size + spec.block_bytes > max_bytes:
            out.append([])
            size = 0
        out[-1].append(spec)
        size += spec.block_bytes
    return out


class _Round:
    """One round's resolution, submitted: its chunks' events, then each partition's fold."""

    def __init__(self, specs: list[ChunkSpec], memory_budget: int, cpus: int) -> None:
        from rechain.pipeline.runtime.ray_cluster import spread_tasks

        self.specs = specs
        n = partitions(sum(s.block_bytes for s in specs), memory_budget, cpus)
        self.events = spread_tasks(chunk_events, [(s, n) for s in specs], n)
        self.resolved = spread_tasks(
            resolve_partition, [tuple(e[p] for e in self.events) for p in range(n)], 2 * len(specs)
        )
        self.partitions = n

    def coins(self, c: int) -> list[Any]:
        """Chunk ``c``'s resolved records, one reference per partition."""
        return [r[c] for r in self.resolved]

    def stored_keys(self, c: int) -> list[bytes]:
        """The keys chunk ``c`` reads from the set (waits for the round's resolution)."""
        import ray

        keys: list[bytes] = []
        for part in ray.get([r[len(self.specs) + c] for r in self.resolved]):
            keys.extend(part)
        return keys

    def record_nodes(self) -> None:
        from rechain.pipeline.runtime.ray_cluster import record_nodes

        record_nodes(self.events)
        record_nodes(self.resolved)


def apply_range(
    ctx: BtcRun,
    cp: dict[str, Any],
    chunks: list[tuple[int, list[bytes], list[dict[str, Any]]]],
    median_times: bytes,
) -> tuple[dict[str, Any], int, chain_parts.BlockFailure | None]:
    """Applies ``chunks`` (consecutive, from the checkpoint's height + 1) on Ray, the best
    chain's ``median_times`` past put in the object store once for every task, in rounds of
    at most a quarter of the memory budget of blocks (a round's partitions are what Ray's
    object store holds; the next round's are resolved while this one applies, and its
    stored coins read once this one is committed); returns the last checkpoint, the blocks
    applied and the first failure (``chain_parts.BlockFailure``) or None."""
    import ray
    from rechain.pipeline.runtime.ray_cluster import ordered_results

    if not chunks:
        return cp, 0, None
    # Partitioned means Ray workers, whichever way the run's units go.
    ctx.executor.start(ray=True)
    specs = [chain_parts.chunk_spec(ctx, c) for c in chunks]
    cpus = int(ray.cluster_resources().get("CPU", 1))
    budget = ctx.opts.memory_budget
    plan = rounds(specs, round_bytes(budget))
    log.info("chain state: %d chunk(s) in %d round(s) on Ray", len(specs), len(plan))
    shared = ctx.executor.workers_share_data_folder
    window = max(2, 2 * ctx.workers)
    group_bytes = chain_parts.row_group_bytes(ctx)
    folder = str(ctx.data.path) if shared else None
    store = ctx.data.cf(layout.CF_BTC_UTXO)
    times = ray.put(median_times)
    applied = 0
    failure: chain_parts.BlockFailure | None = None
    t0 = time.perf_counter()
    upcoming = _Round(plan[0], budget, cpus)
    for r in range(len(plan)):
        current = upcoming
        if r + 1 < len(plan):
            upcoming = _Round(plan[r + 1], budget, cpus)

        def units(
            current: _Round = current,
        ) -> Iterator[tuple[ChunkSpec, list[Any], list[bytes], list[bytes | None]]]:
            for c, spec in enumerate(current.specs):
                stored = current.stored_keys(c)
                values = store[stored] if stored else []
                yield spec, current.coins(c), stored, values

        results = ordered_results(_apply_task, units(), window, STAGE, group_bytes, folder, times)
        for unit, result in results:
            if isinstance(result, Exception):
                raise RechainError(f"chain state: chunk from height {unit[0].first}: {result}")
            ctx.add(result.pop("task_s"))
            t1 = time.perf_counter()
            if result["blocks"]:
                _land(ctx.data, unit[0].first, result)
                fault_injection.kill_point("chain_state.spends_written")
                ctx.add({"chain_state_rows_s": time.perf_counter() - t1})
                cp = chain_parts.commit_applied(ctx, cp, unit[0].first, result)
            applied += int(result["blocks"])
            failure = chain_parts.BlockFailure.of(result)
            if failure is not None:
                break
        current.record_nodes()
        if failure is not None:
            break
    ctx.add({"chain_state_tasks_s": time.perf_counter() - t0})
    return cp, applied, failure


def _apply_task(
    unit: tuple[ChunkSpec, list[Any], list[bytes], list[bytes | None]],
    group_bytes: int,
    data_path: str | None,
    median_times: bytes,
) -> dict[str, Any]:
    """A chunk applied to its resolved coins and its part written: into the data folder under
    temporary names (``data_path``: the worker shares the coordinator's file system), else as
    the files' bytes. Returns ``apply``'s result without its spends (they are in the part)
    and ``files``: each of the part's files, its path or its bytes."""
    import ray

    spec, resolved_refs, stored_keys, stored_values = unit
    t0 = time.perf_counter()
    resolved = ray.get(resolved_refs)
    t1 = time.perf_counter()
    chunk = load_chunk(spec)
    t2 = time.perf_counter()
    applied = chunk.apply_resolved(resolved, stored_keys, stored_values, median_times)
    result: dict[str, Any] = applied.as_dict()
    t3 = time.perf_counter()
    spends = result.pop("spends")
    blocks = int(result["blocks"])
    result["files"] = []
    # The part's files are written on one thread: the task holds one CPU (``ray_cluster``).
    if not blocks:
        pass
    elif data_path is not None:
        finals = chain_parts.part_files(Path(data_path), spec.first, blocks)
        tmps = [tmp_path(f) for f in finals]
        write_part(chunk, spends, tmps, group_bytes, 1)
        result["files"] = [str(t) for t in tmps]
    else:
        with tempfile.TemporaryDirectory(prefix="rechain-part-") as scratch:
            tmps = [Path(scratch) / f"{i}.parquet" for i in range(1 + len(ROW_TABLES))]
            write_part(chunk, spends, tmps, group_bytes, 1)
            result["files"] = [t.read_bytes() for t in tmps]
    # The workers' seconds per step, for the run report.
    result["task_s"] = {
        "chain_state_task_fetch_s": t1 - t0,
        "chain_state_task_load_s": t2 - t1,
        "chain_state_task_apply_s": t3 - t2,
        "chain_state_task_write_s": time.perf_counter() - t3,
    }
    return result


def _land(data: DataDir, first: int, result: dict[str, Any]) -> None:
    """Makes an applied chunk's part durable under its final names."""
    finals = chain_parts.part_files(data.path, first, int(result["blocks"]))
    files = result.pop("files")
    if len(files) != len(finals):
        raise RechainError(f"chain state: a part of {len(files)} files, not {len(finals)}")
    for final, content in zip(finals, files, strict=True):
        tmp = tmp_path(final)
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        elif Path(content) != tmp:
            raise RechainError(f"chain state: part file written at {content}, not at {tmp}")
    land_tmp_files(finals)
