"""Stage ``chain_state``: the UTXO set in RocksDB advanced to the best tip, block by block.

The set (``btc_utxo``) is kept from run to run with each applied block's undo data
(``btc_undo``), as Core keeps its chainstate and ``rev*.dat``. A run finds the fork point
between the chain it applied and the best chain the link stage chose, unwinds the blocks
above it from their undo data (newest first) and applies the new best-chain blocks in
chunks of bounded bytes: the Rust core reads each chunk's blocks from the blk files, the
coins they spend are read from RocksDB in one multi-get, and the chunk's net change to the
set, its undo records and the stage's checkpoint (``META_BTC_CHAIN_STATE``) go in one atomic
write. A run killed anywhere resumes from the last chunk written, so its work grows with the
new blocks, not with the chain.

Reading a chunk makes the body pass's context-free checks of each block (merkle root,
coinbase and transaction rules, sigops, witness commitment, weight): the body pass leaves
the best chain above the applied tip to this stage, so that it is decoded once. Applying
checks the consensus rules that need the set (BIP34 coinbase height, missing or spent
inputs, premature coinbase spends, inputs below outputs, coinbase amount). At the first
block that fails either, the blocks below it stay applied, the body pass stages the
verdicts of the best-chain copies from it up (``body_units.stage_unreached``: the failed copy's
verdict among them, and those the body pass would have staged had it decoded them), a block
that breaks a rule is recorded invalid, and the link stage is invalidated: it picks another
copy of a failed one, or switches to the best valid chain, as Core does.

A chunk never crosses a multiple of ``SEGMENT_BLOCKS`` heights, and each one leaves a *part*
named by its heights in five folders under ``DATADIR/stage``, listed by a key of its own
(``layout.chain_part_key``) written with the chunk's checkpoint: ``spends/`` (one row per
best-chain input: its value and the output it spent, by height and row among that block's
outputs, which every coin in the set carries, for the publish stage's ``spent`` flags), and
``rows/blocks/``, ``rows/transactions/``, ``rows/inputs/`` and ``rows/outputs/``: those tables'
rows for the chunk's blocks, written once by the Rust core while the chunk's blocks are in
memory and its spends resolved. The publish stage links the first three into the tables as they
are; ``outputs`` rows are written unspent (later blocks spend them), and the publish stage
copies them with their ``spent`` column encoded again.

The chunks apply here in height order, or, on a Ray cluster, on its workers from coins
resolved by txid partition (``spend_resolution``); both commit the same chunks in the same
order with the same checkpoints.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rechain.pipeline.bitcoin import body_parts, body_units, chain_parts, spend_resolution
from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.engine.driver import Done, Invalidate, Stage
from rechain.pipeline.errors import RechainError
from rechain.pipeline.progress import Progress
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.runtime.local_runner import ordered_local
from rechain.pipeline.store.datadir import DataDir, write_file_atomic, write_files_atomic
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.schemas import tables
from rechain.workers import _native
from rechain.workers.btc_chain_state import ROW_TABLES, load_chunk, write_part
from rechain.workers.fault_injection import kill_point
from rechain.workers.memory import release_unused_memory
from rechain.workers.native_results import IndexEntry

log = logging.getLogger(__name__)
#: Block bytes applied per chunk: at most this, and at most 1/32 of the memory budget shared by
#: the ``ROWS_IN_FLIGHT`` chunks whose rows are written at once (a chunk
#: holds its blocks, their parsed spans and the coins they read and touch, a few times the
#: blocks' bytes; the next chunk is read meanwhile and ``ROWS_IN_FLIGHT`` earlier ones are
#: still held while their rows are written).
MAX_CHUNK_BYTES = 64 << 20
MIN_CHUNK_BYTES = 4 << 20
#: Blocks unwound per atomic write.
UNWIND_BLOCKS = 1_000
#: Chunks (and so the published tables' segments) never cross a multiple of this many heights:
#: a fresh run and runs that grew the chain in steps cut the chain at the same heights.
SEGMENT_BLOCKS = 1_000


def _release_ray() -> None:
    from rechain.pipeline.runtime.ray_cluster import release_ray

    if release_ray():
        log.info("decode: stopped the embedded Ray cluster")


class ChainStateStage(Stage[BtcRun]):
    name = "chain_state"

    def output(self, ctx: BtcRun) -> Any:
        cp = chain_parts.checkpoint(ctx.data)
        if cp is None:
            return None
        return [cp["height"], cp["hash"], cp["utxo_count"], cp["total_amount"]]

    def unwind(self, ctx: BtcRun, data: DataDir) -> None:
        """Kept: the next run unwinds to the fork point with the new best chain itself."""

    def reset(self, ctx: BtcRun, data: DataDir) -> None:
        """``--from-stage``: the set is rebuilt from the genesis block."""
        reset(data)

    def run(self, ctx: BtcRun) -> Done | Invalidate:
        ctx.close()
        # The body pass is done: its embedded Ray cluster stops (a second or two of shutdown)
        # on a thread of its own while the first chunks are read and applied, and is gone
        # before this stage returns (a consensus failure that needs another decode restarts
        # Ray). A run that decoded on threads never imported Ray (a second of start-up).
        # Partitioned, the chain state's own tasks run on Ray (``spend_resolution``).
        on_ray = ctx.executor.partitioned
        release = None
        if "rechain.pipeline.runtime.ray_cluster" in sys.modules and not on_ray:
            release = threading.Thread(target=_release_ray, name="rechain-ray-release")
            release.start()
        try:
            return self._apply(ctx, on_ray)
        finally:
            if release is not None:
                release.join()

    def _apply(self, ctx: BtcRun, on_ray: bool) -> Done | Invalidate:
        release_unused_memory()
        data = ctx.data
        t0 = time.perf_counter()
        cp = chain_parts.checkpoint(data)
        if cp is not None and cp.get("layout") != chain_parts.LAYOUT:
            log.info("chain state: a checkpoint of another layout, rebuilt from the genesis block")
            cp = None
        if cp is None:
            reset(data)
            cp = {
                "height": -1,
                "hash": None,
                "utxo_count": 0,
                "total_amount": 0,
                "layout": chain_parts.LAYOUT,
            }
        _remove_unlisted_parts(data, chain_parts.parts(data))
        best = chain_parts.best_chain(data)
        tip = len(best) // 32 - 1
        median_times = chain_parts.best_chain_median_times(data)
        if len(median_times) != 4 * (tip + 1):
            raise RechainError(
                f"the best chain has {tip + 1} block(s) but {len(median_times) // 4} median "
                "time(s) past: rerun with --from-stage link"
            )
        fork = _fork_point(data, cp, best, tip)
        unwound = 0
        if fork < cp["height"]:
            unwound = cp["height"] - fork
            log.info("chain state: unwinding %d block(s) to height %d", unwound, fork)
            cp = _unwind_to(data, cp, fork)
        # The chunks whose rows are being written share the chain state's part of the budget.
        chunks = budget_share(ctx.opts.memory_budget, "bitcoin", "chain_state.chunks")
        share = chunks // chain_parts.ROWS_IN_FLIGHT
        chunk_bytes = max(MIN_CHUNK_BYTES, min(MAX_CHUNK_BYTES, share))
        chunks = chain_parts.best_chain_runs(
            data, best, cp["height"] + 1, tip, chunk_bytes, SEGMENT_BLOCKS
        )
        if on_ray:
            cp, applied, failure = spend_resolution.apply_range(ctx, cp, list(chunks), median_times)
        else:
            bar = Progress(
                tip - cp["height"], enabled=ctx.opts.progress, label="chain state", unit="blocks"
            )
            cp, applied, failure = _apply_in_order(ctx, cp, chunks, median_times, bar)
            bar.close()
        release_unused_memory()
        ctx.add({"chain_state_s": time.perf_counter() - t0})
        detail = {"applied": applied, "unwound": unwound, "fork_height": fork}
        ctx.full["chain_state_applied"] = ctx.full.get("chain_state_applied", 0) + applied
        ctx.full["chain_state_unwound"] = ctx.full.get("chain_state_unwound", 0) + unwound
        if failure is not None:
            return _stop_at(ctx, failure)
        return Done(rows=int(cp["utxo_count"]), height=int(cp["height"]), detail=detail)


def _stop_at(ctx: BtcRun, failure: chain_parts.BlockFailure) -> Invalidate:
    """The applied chain stopped below the failed block: a copy that failed its body checks
    (``FailureKind.BODY``) or a block that breaks a consensus rule. The verdicts of the
    best-chain copies from it up are staged, then the link stage invalidated."""
    height, block_hash, reason, kind = failure
    data = ctx.data
    decoded = body_units.stage_unreached(ctx, height)
    log.info(
        "chain state: staged the verdicts of %d best-chain copies from height %d", decoded, height
    )
    if kind is chain_parts.FailureKind.BODY:
        log.warning(
            "block %s at height %d: its copy failed its body checks: %s", block_hash, height, reason
        )
        verdicts = body_parts.staged_blocks(data, ["hash", "valid"])
        wanted = pa.scalar(bytes.fromhex(block_hash), ds.STAGED_HASH_TYPE)
        mine = verdicts.filter(pc.equal(verdicts.column("hash"), wanted))
        if pc.all(mine.column("valid")).as_py() is not False:
            raise RechainError(
                f"block {block_hash} at height {height} failed its body checks as the chain "
                f"state read it ({reason}), but the body pass staged no failed copy of it"
            )
        return Invalidate("link", f"block {block_hash} at height {height}: copy failed: {reason}")
    log.warning("block %s at height %d is invalid: %s", block_hash, height, reason)
    invalid = body_parts.invalid_blocks(data)
    invalid[block_hash] = reason
    data.write({layout.CF_META: [(layout.META_BTC_INVALID_BLOCKS, invalid)]})
    return Invalidate("link", f"block {block_hash} at height {height}: {reason}")


def _apply_in_order(
    ctx: BtcRun,
    cp: dict[str, Any],
    chunks: Iterator[tuple[int, list[bytes], list[IndexEntry]]],
    median_times: bytes,
    progress: Progress,
) -> tuple[dict[str, Any], int, chain_parts.BlockFailure | None]:
    """Applies ``chunks`` in height order on this process, the best chain's
    ``median_times`` past beside them; returns the last checkpoint, the blocks applied and
    the first failure (``BlockFailure``) or None."""
    applied = 0
    failure: chain_parts.BlockFailure | None = None
    # The next chunk is read and framed (GIL released) while this one is applied, and
    # the rows of the ones before are written (``rows_threads``).
    loads = ordered_local(partial(_load_chunk, ctx), chunks, threads=1, window=2)
    pending: deque[Pending] = deque()
    in_flight, threads = rows_threads(ctx.workers)
    with (
        contextlib.closing(loads),
        ThreadPoolExecutor(max(in_flight, 1), "rechain-rows") as rows_pool,
    ):
        for (first, _, _), chunk in loads:
            if isinstance(chunk, Exception):
                raise chunk
            result = _apply_chunk(ctx, chunk, pending, median_times)
            while pending and (len(pending) >= max(in_flight, 1) or pending[0].rows.done()):
                cp = _commit_chunk(ctx, cp, pending.popleft())
            applied += int(result["blocks"])
            progress.update(int(result["blocks"]), int(result["blocks"]))
            if result["blocks"]:
                pool = rows_pool if in_flight else None
                pending.append(_stage_chunk(ctx, first, chunk, result, pool, threads))
            failure = chain_parts.BlockFailure.of(result)
            if failure is not None:
                break
        while pending:
            cp = _commit_chunk(ctx, cp, pending.popleft())
    return cp, applied, failure


def rows_threads(workers: int) -> tuple[int, int]:
    """How a run of ``workers`` writes the applied chunks' rows: (chunks written at once on
    threads of their own, threads writing each one's files). Their threads number
    ``workers``, beside the thread that applies (a chunk's rows take several times as long to
    write as to apply); one worker writes each chunk's rows on the thread that applies, so
    that it keeps to one core as a Ray task of one CPU does."""
    if workers <= 1:
        return 0, 1
    return chain_parts.ROWS_IN_FLIGHT, max(1, workers // chain_parts.ROWS_IN_FLIGHT)


def reset(data: DataDir) -> None:
    """Forgets the applied chain: checkpoint first (so a killed reset is redone), then the part
    keys, the set, the undo data and the staged parts."""
    data.write({}, {layout.CF_META: [layout.META_BTC_CHAIN_STATE]})
    stale = [k for k, _ in data.items(layout.CF_META, layout.META_BTC_CHAIN_PART_PREFIX)]
    if stale:
        data.write({}, {layout.CF_META: stale})
    data.reset_column_family(layout.CF_BTC_UTXO)
    data.reset_column_family(layout.CF_BTC_UNDO)
    for folder in chain_parts.part_dirs(data):
        shutil.rmtree(folder, ignore_errors=True)


def _remove_unlisted_parts(data: DataDir, listed: list[chain_parts.Part]) -> None:
    """Deletes part files no part key lists (written by a run killed before its commit, or
    dropped by an unwind)."""
    keep = {name for _, _, name in listed}
    for folder in chain_parts.part_dirs(data):
        if not folder.exists():
            continue
        for f in folder.iterdir():
            if f.name not in keep:
                f.unlink()


def _fork_point(data: DataDir, cp: dict[str, Any], best: bytes, tip: int) -> int:
    """The highest height where the applied chain and the best chain have the same block."""
    h = min(int(cp["height"]), tip)
    while h >= 0:
        undo = data.get(layout.CF_BTC_UNDO, layout.undo_key(h))
        if undo is not None and _native.undo_block_hash(undo) == _native.display_hash(
            best[32 * h : 32 * h + 32]
        ):
            return h
        h -= 1
    return -1


def _unwind_to(data: DataDir, cp: dict[str, Any], fork: int) -> dict[str, Any]:
    """Unwinds the applied chain down to ``fork``, newest blocks first, ``UNWIND_BLOCKS`` per
    atomic write (each with its checkpoint, so a killed unwind resumes where it stopped)."""
    height = int(cp["height"])
    while height > fork:
        low = max(fork + 1, height - UNWIND_BLOCKS + 1)
        heights = range(height, low - 1, -1)
        keys = [layout.undo_key(h) for h in heights]
        undos = data.cf(layout.CF_BTC_UNDO)[keys]
        missing = [h for h, u in zip(heights, undos, strict=True) if u is None]
        if missing:
            raise RechainError(
                f"the chain state has no undo data for height(s) {missing[:5]}: "
                "rerun with --from-stage chain_state"
            )
        change = _native.unwind_chain_state(undos)
        below = low - 1
        below_undo = data.get(layout.CF_BTC_UNDO, layout.undo_key(below)) if below >= 0 else None
        cp = {
            **cp,
            "height": below,
            "hash": None if below_undo is None else _native.undo_block_hash(below_undo),
            "utxo_count": cp["utxo_count"] + change.count_delta,
            "total_amount": cp["total_amount"] + change.amount_delta,
        }
        current = chain_parts.parts(data)
        unchanged = set(current)
        trimmed = [
            chain_parts.part_entry(p)
            for p in _trim_parts(data, current, below)
            if p not in unchanged
        ]
        dropped = [layout.chain_part_key(first) for first, _, _ in current if first > below]
        data.write_columns(
            {
                layout.CF_BTC_UTXO: change.puts,
                layout.CF_META: (
                    [layout.META_BTC_CHAIN_STATE, *(k for k, _ in trimmed)],
                    [chain_parts.encode_json(cp), *(v for _, v in trimmed)],
                ),
            },
            {
                layout.CF_BTC_UTXO: change.deletes,
                layout.CF_BTC_UNDO: keys,
                layout.CF_META: dropped,
            },
        )
        kill_point("chain_state.unwound")
        height = below
    _remove_unlisted_parts(data, chain_parts.parts(data))
    return cp


def _trim_parts(
    data: DataDir, listed: list[chain_parts.Part], below: int
) -> list[chain_parts.Part]:
    """The parts of heights up to ``below``: those above it dropped, the one reaching across
    it rewritten without its rows above (under a new name; the old files go once no part key
    lists them)."""
    kept: list[chain_parts.Part] = []
    for first, last, name in listed:
        if last <= below:
            kept.append((first, last, name))
        elif first <= below:
            trimmed = chain_parts.part_name(first, below)
            # Each file in its dataset's declared layout, as ``write_part`` wrote it: the
            # publish stage links the rows' files into the tables' segments as they are, and
            # copies the ``outputs`` file's pages (by its page indexes).
            declared = [tables.BTC_SPENDS, *(tables.TABLES[t] for t in ROW_TABLES)]
            for folder, table in zip(chain_parts.part_dirs(data), declared, strict=True):
                whole = pq.read_table(folder / name)
                rows = whole.filter(pc.less_equal(whole["height"], below))
                write = partial(pq.write_table, rows, **table.pyarrow_options())
                write_file_atomic(folder / trimmed, write)
            kept.append((first, below, trimmed))
    return kept


def _load_chunk(ctx: BtcRun, chunk: tuple[int, list[bytes], list[IndexEntry]]) -> Any:
    """A chunk's blocks read from their files and framed."""
    try:
        return load_chunk(chain_parts.chunk_spec(ctx, chunk))
    except (OSError, KeyError) as e:
        raise RechainError(f"chain state: {e}") from e


@dataclass
class Pending:
    """A chunk applied but not yet committed: its result, part and rows being written."""

    chunk: Any
    first: int
    result: dict[str, Any]
    rows: Future[None]


def _apply_chunk(
    ctx: BtcRun, chunk: Any, pending: deque[Pending], median_times: bytes
) -> dict[str, Any]:
    """Applies one chunk to the stored set, seen through the changes of the chunks before it
    that are not committed yet (oldest first)."""
    t1 = time.perf_counter()
    needed = chunk.needed()
    coins = ctx.data.cf(layout.CF_BTC_UTXO)[needed] if needed else []
    if needed and pending:
        coins = chunk.overlay(coins, [before.chunk for before in pending])
    t2 = time.perf_counter()
    result: dict[str, Any] = chunk.apply(coins, median_times).as_dict()
    ctx.add({"chain_state_get_s": t2 - t1, "chain_state_apply_s": time.perf_counter() - t2})
    return result


def _stage_chunk(
    ctx: BtcRun,
    first: int,
    chunk: Any,
    result: dict[str, Any],
    pool: ThreadPoolExecutor | None,
    threads: int,
) -> Pending:
    """Starts writing an applied chunk's part (its spends and rows, on ``threads`` threads) on
    ``pool``, off the thread that applies the next chunk; without a pool, writes it here."""
    finals = chain_parts.part_files(ctx.data.path, first, int(result["blocks"]))
    group_bytes = chain_parts.row_group_bytes(ctx)

    def write(tmps: list[Path]) -> None:
        write_part(chunk, result["spends"], tmps, group_bytes, threads)

    if pool is None:
        written: Future[None] = Future()
        write_files_atomic(finals, write)
        written.set_result(None)
        return Pending(chunk, first, result, written)
    return Pending(chunk, first, result, pool.submit(write_files_atomic, finals, write))


def _commit_chunk(ctx: BtcRun, cp: dict[str, Any], pending: Pending) -> dict[str, Any]:
    """Once its part (spends and rows) is written, commits a chunk (``commit_applied``)."""
    t0 = time.perf_counter()
    pending.rows.result()
    kill_point("chain_state.spends_written")
    # The rows' time is what the commit waited for them, not the time they took alongside.
    ctx.add({"chain_state_rows_s": time.perf_counter() - t0})
    return chain_parts.commit_applied(ctx, cp, pending.first, pending.result)
