"""Stage ``blocks``: every unit of the input (an era1 file, or 8,192 blocks of a freezer) read,
checked and converted by the workers, then committed in block order.

Units are committed in groups of up to ``COMMIT_UNITS``, in block order: their Parquet parts
made durable and renamed into the tables' folder, their index entries (hash → number, number →
hash, number → TD) ingested as one SST file per column family, then one RocksDB write with
their records (``eth/unit/<key>``: range, counts, verdicts, last header), so a killed run
redoes at most the units of the group being committed and those in flight. A rerun does only
the units whose input changed (a new era1 file, a freezer that grew, other options) and drops
the units no longer in the input.

A freezer without TD records gets its TDs here from the last block of the unit before it (or
from genesis); the links between units are checked by the next stage (``links``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rechain.pipeline import metrics
from rechain.pipeline.engine.driver import Done, Stage
from rechain.pipeline.errors import RechainError
from rechain.pipeline.ethereum.run import EthRun
from rechain.pipeline.ethereum.units import (
    STAGE,
    committed_units,
    part_path,
    table_dir,
    unit_key,
)
from rechain.pipeline.progress import Progress
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.store.datadir import DataDir, land_worker_files
from rechain.schemas import rocksdb as layout
from rechain.schemas import tables
from rechain.workers import _native
from rechain.workers.eth_import import EthStaged, EthUnit, import_unit, tmp_name, write_part
from rechain.workers.fault_injection import kill_point
from rechain.workers.memory import release_unused_memory

log = logging.getLogger(__name__)

#: Verdicts kept per unit in its record (all are counted).
VERDICTS_KEPT = 100
#: Units committed together (one SST file per index column family, one write of their records).
#: An ingestion costs fsyncs of its file, the manifest and the folder whatever its size, and the
#: hash-keyed files of ``eth_numbers`` all overlap one another: ingested unit by unit they cost
#: more than the units' own decoding and kept RocksDB compacting. A kill redoes at most a group.
COMMIT_UNITS = 16
#: What an era1 unit holds at its peak, per byte of its file: the file, its decompressed
#: records, the decoded Arrow columns and their Parquet encoding (measured about 5x, by
#: tests/test_memory_ci.py). The window of units in flight is sized by it; one unit always runs.
UNIT_BYTES_PER_FILE_BYTE = 5
#: The index column families a unit's entries go to.
INDEX_CFS = (layout.CF_ETH_NUMBERS, layout.CF_ETH_CANONICAL, layout.CF_ETH_TD)


class BlocksStage(Stage[EthRun]):
    name = "blocks"

    def output(self, ctx: EthRun) -> Any:
        units = committed_units(ctx.data)
        text = json.dumps(
            sorted((k, u["fingerprint"], u["end"]) for k, u in units.items()), sort_keys=True
        )
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def pending(self, ctx: EthRun) -> bool:
        units = committed_units(ctx.data)
        wanted = {u.key for u in ctx.units}
        return any(
            units.get(u.key, {}).get("fingerprint") != ctx.fingerprints[u.key] for u in ctx.units
        ) or any(k not in wanted for k in units)

    def reset(self, ctx: EthRun, data: DataDir) -> None:
        for key, unit in committed_units(data).items():
            _drop_unit(data, key, unit)

    def run(self, ctx: EthRun) -> Done:
        data, opts = ctx.data, ctx.opts
        committed = committed_units(data)
        wanted = {u.key for u in ctx.units}
        for key, unit in committed.items():
            if key not in wanted:
                log.info("unit %s is no longer in the input: dropped", key)
                _drop_unit(data, key, unit)
        todo = [
            u
            for u in ctx.units
            if committed.get(u.key, {}).get("fingerprint") != ctx.fingerprints[u.key]
        ]
        for t in tables.ETH_TABLES:
            table_dir(data, t.name).mkdir(parents=True, exist_ok=True)
        _remove_temp_parts(data)
        total = sum(_unit_bytes(u) for u in todo)
        use_ray = ctx.executor.on_ray
        if not use_ray and 0 < len(todo) < ctx.workers:
            # Fewer units than cores: each unit's proof-of-work checks share the spare ones.
            todo = [dataclasses.replace(u, pow_threads=ctx.workers // len(todo)) for u in todo]
        progress = Progress(total, enabled=opts.progress, label="eth import", unit="blocks")
        stats = {"units": 0, "blocks": 0, "worker_s": 0.0, "commit_s": 0.0, "ray_start_s": 0.0}
        units = committed_units(data)
        pending: list[_Pending] = []

        def flush() -> None:
            group, pending[:] = list(pending), []
            if not group:
                return
            t0 = time.perf_counter()
            _commit_group(data, group)
            dt = time.perf_counter() - t0
            stats["commit_s"] += dt
            metrics.COMMIT_SECONDS.labels(STAGE).observe(dt)
            for p in group:
                blocks = int(p.record["blocks"])
                stats["units"] += 1
                stats["blocks"] += blocks
                metrics.RECORDS.labels(STAGE).inc(blocks)
                progress.update(_unit_bytes(p.staged.unit), blocks)

        try:
            for staged in _results(ctx, todo, use_ray, stats):
                stats["worker_s"] += staged.seconds
                metrics.SHARD_DECODE_SECONDS.labels(STAGE).observe(staged.seconds)
                metrics.BYTES_READ.labels(STAGE).inc(int(staged.info.get("bytes", 0)))
                t0 = time.perf_counter()
                if staged.error is not None:
                    flush()
                    _commit_unreadable(data, staged, ctx, units)
                    stats["units"] += 1
                else:
                    pending.append(_prepare(data, staged, ctx, units))
                stats["commit_s"] += time.perf_counter() - t0
                if len(pending) >= COMMIT_UNITS:
                    flush()
        except RechainError:
            flush()  # the units before a failed one are kept, as those committed before it
            raise
        finally:
            progress.close()
        flush()
        ctx.report.update(stats, execution="ray" if use_ray and todo else "threads")
        units = committed_units(data)
        last = max(units.values(), key=lambda u: u["end"], default=None)
        return Done(
            rows=sum(u["blocks"] for u in units.values()),
            height=None if last is None or last["blocks"] == 0 else last["end"] - 1,
            detail={"units_run": stats["units"]},
        )


def _unit_bytes(unit: EthUnit) -> int:
    if unit.kind != "freezer":
        try:
            return os.path.getsize(unit.path)
        except OSError:
            return 0
    return unit.end - unit.first  # freezer: progress counts blocks


def _results(
    ctx: EthRun, units: list[EthUnit], use_ray: bool, stats: dict[str, Any]
) -> Iterator[EthStaged]:
    """Each unit's result, in unit order, from Ray tasks or this process's threads."""
    if not units:
        return
    data, opts, workers = ctx.data, ctx.opts, ctx.workers
    # The window keeps the units in flight (an archive file each, up to a few hundred MiB) within
    # the budget.
    biggest = max(_unit_bytes(u) if u.kind != "freezer" else 64 << 20 for u in units)
    cost = UNIT_BYTES_PER_FILE_BYTE * biggest
    in_flight = budget_share(opts.memory_budget, "eth", "blocks.units")
    window = max(1, min(2 * workers, in_flight // max(1, cost)))
    dirs = {t.name: str(table_dir(data, t.name)) for t in tables.ETH_TABLES}
    if use_ray:
        import ray

        stats["ray_start_s"] = ctx.executor.start()
        # Workers of a cluster this process did not start may not see the data folder.
        target = dirs if ctx.executor.workers_share_data_folder else None
        for unit, result in ctx.executor.ordered(import_unit, units, window, STAGE, target):
            if isinstance(result, ray.exceptions.RayError):
                raise RechainError(f"{unit.key}: {result}")
            yield result
    else:
        from rechain.pipeline.runtime.local_runner import ordered_local

        run = lambda u: import_unit(u, dirs, release_memory=False)  # noqa: E731
        try:
            for unit, result in ordered_local(run, units, workers, window):
                if isinstance(result, Exception):
                    raise RechainError(f"{unit.key}: {result}") from result
                yield result
        finally:
            release_unused_memory()
    metrics.QUEUE_DEPTH.labels(STAGE).set(0)


def _td_base(units: dict[str, dict[str, Any]], first: int, key: str) -> int | None:
    """The TD of block ``first - 1``: 0 below genesis, else from the committed unit ending
    there, if it knows its TDs."""
    if first == 0:
        return 0
    for k, u in units.items():
        if k != key and u["blocks"] and u["end"] == first and u.get("td_known"):
            return int(u["last_td"])
    return None


@dataclasses.dataclass
class _Pending:
    """A unit ready to commit: its record (``files`` filled in at the commit), its index
    entries, and the record it replaces, if any."""

    staged: EthStaged
    record: dict[str, Any]
    index: dict[str, tuple[pa.Array, pa.Array]]
    old: dict[str, Any] | None


def _commit_unreadable(
    data: DataDir, staged: EthStaged, ctx: EthRun, units: dict[str, dict[str, Any]]
) -> None:
    """Records a unit whose source cannot be opened at all (an era1 file whose layout is
    broken) as a skip, dropping what an earlier run committed for it."""
    unit = staged.unit
    old = units.get(unit.key)
    if old is not None:
        _drop_unit(data, unit.key, old)
    record: dict[str, Any] = {
        "kind": unit.kind,
        "fingerprint": ctx.fingerprints[unit.key],
        "part": unit.part,
    }
    record.update(first=unit.first, end=unit.first, blocks=0, transactions=0, violations=1)
    record["verdicts"] = [{"block": None, "rule": "unreadable", "detail": staged.error}]
    record["rules"] = {"unreadable": 1}
    metrics.SKIPS.labels(STAGE, "unreadable").inc()
    data.write({layout.CF_META: [(unit_key(unit.key), record)]})
    units[unit.key] = record


def _prepare(
    data: DataDir, staged: EthStaged, ctx: EthRun, units: dict[str, dict[str, Any]]
) -> _Pending:
    """A unit's record and index entries, its TDs rebased where the source holds none (on the
    unit before it, committed or pending: ``units`` gets the record at once)."""
    unit = staged.unit
    old = units.get(unit.key)
    record: dict[str, Any] = {
        "kind": unit.kind,
        "fingerprint": ctx.fingerprints[unit.key],
        "part": unit.part,
    }
    info = staged.info
    first = info["first"]
    verdicts = [{"block": b, "rule": r, "detail": d} for b, r, d in info["violations"]]
    td_known = not info["td_relative"]
    first_td, last_td = info["first_td"], info["last_td"]
    index = info["index"]
    if info["td_relative"] and first is not None:
        base = _td_base(units, first, unit.key)
        index = _rebase_blocks_part(data, staged, base)
        td_known = base is not None
        first_td, last_td = (
            None if base is None or td is None else str(base + int(td))
            for td in (first_td, last_td)
        )
    rules: dict[str, int] = {}
    for v in verdicts:
        rules[v["rule"]] = rules.get(v["rule"], 0) + 1
        metrics.SKIPS.labels(STAGE, v["rule"]).inc()
    record.update(
        first=first if first is not None else unit.first,
        end=info["end"] if first is not None else unit.first,
        blocks=info["blocks"],
        transactions=staged.rows.get(tables.ETH_TRANSACTIONS.name, 0),
        rows=staged.rows,
        first_header=info["first_header"].hex() if info["first_header"] else None,
        first_td=first_td,
        last_header=info["last_header"].hex() if info["last_header"] else None,
        last_td=last_td,
        td_known=td_known,
        accumulator=info["accumulator"],
        pow_checked=info["pow_checked"],
        proofs=info["proofs"],
        proofs_checked=info["proofs_checked"],
        unrecovered_senders=info["unrecovered_senders"],
        violations=len(verdicts),
        rules=rules,
        verdicts=verdicts[:VERDICTS_KEPT],
        files=[],
    )
    units[unit.key] = record
    return _Pending(staged, record, dict(index), old)


def _commit_group(data: DataDir, group: list[_Pending]) -> None:
    """Commits prepared units in block order: parts durable and renamed, the entries of units
    done again deleted, the group's index entries ingested (one SST file per column family),
    then the units' records in one write."""
    for p in group:
        p.record["files"] = _make_durable(data, p.staged)
        kill_point("eth.parts_renamed")
    # The old entries of units done again go first: the new ones are ingested over them.
    deletes: dict[str, list[bytes]] = {}
    for p in group:
        if p.old is not None:
            for cf, keys in _index_deletes(data, p.old).items():
                deletes.setdefault(cf, []).extend(keys)
    if deletes:
        data.write_columns({}, deletes)
    for cf in INDEX_CFS:
        # Hashes and numbers: block compression would cost time and save nothing.
        data.ingest_sorted_batches(cf, iter(_in_key_order([p.index[cf] for p in group])),
                                   compress=False)  # fmt: skip
    for _ in group:
        kill_point("eth.index_ingested")
    data.write({layout.CF_META: [(unit_key(p.staged.unit.key), p.record) for p in group]})
    for _ in group:
        kill_point("eth.unit_committed")


def _in_key_order(parts: list[tuple[pa.Array, pa.Array]]) -> list[tuple[pa.Array, pa.Array]]:
    """Key-sorted entries of several units (each key-sorted, in block order) as key-ordered
    chunks: the units' own when each starts after the one before ends (keys by block number),
    else one merged run. A key in two units (the same block in two files) keeps the later
    unit's value, as when each unit's file was ingested over the ones before."""
    runs = [(k, v) for k, v in parts if len(k)]
    if all(a[0][-1].as_py() < b[0][0].as_py() for a, b in itertools.pairwise(runs)):
        return runs
    keys, values = _native.merge_sorted_runs(runs)
    return [(keys, values)]


def _rebase_blocks_part(
    data: DataDir, staged: EthStaged, base: int | None
) -> dict[str, tuple[pa.Array, pa.Array]]:
    """Rewrites the unit's ``eth_blocks`` part with absolute TDs (relative ones plus ``base``,
    the TD of the unit's parent), or none where that TD is unknown; returns its index
    entries."""
    name = tables.ETH_BLOCKS.name
    content = staged.tables[name]
    source = pa.BufferReader(content) if isinstance(content, bytes) else content
    table = pq.read_table(source, schema=tables.ETH_BLOCKS.schema)
    batch = table.combine_chunks().to_batches()[0] if table.num_rows else None
    if batch is None:
        return dict(staged.info["index"])
    if base is None:
        i = batch.schema.get_field_index("total_difficulty")
        batch = batch.set_column(
            i, batch.schema.field(i), pa.nulls(batch.num_rows, batch.schema.field(i).type)
        )
    else:
        batch = _native.eth_rebase_td(batch, str(base))
    where = None if isinstance(content, bytes) else content
    staged.tables[name] = write_part(batch, where, name)
    return dict(_native.eth_index_entries(batch))


def _make_durable(data: DataDir, staged: EthStaged) -> list[str]:
    """Each table's part of the unit durable under its final name; returns the paths."""
    moves = [
        (
            content,
            table_dir(data, name) / tmp_name(staged.unit.part),
            part_path(data, name, staged.unit.part),
        )
        for name, content in staged.tables.items()
    ]
    try:
        land_worker_files(moves)
    except ValueError as e:
        raise ValueError(f"unit {staged.unit.key}: {e}") from e
    return [str(final.relative_to(data.path)) for _, _, final in moves]


def _index_deletes(data: DataDir, unit: dict[str, Any]) -> dict[str, list[bytes]]:
    """The index entries of a committed unit (to drop or replace it)."""
    numbers = [int(n).to_bytes(8, "big") for n in range(unit["first"], unit["end"])]
    hashes = [h for h in (data.get(layout.CF_ETH_CANONICAL, k) for k in numbers) if h]
    return {
        layout.CF_ETH_NUMBERS: hashes,
        layout.CF_ETH_CANONICAL: numbers,
        layout.CF_ETH_TD: numbers,
    }


def _drop_unit(data: DataDir, key: str, unit: dict[str, Any]) -> None:
    """Removes a committed unit: its record and index entries in one write, then its parts."""
    deletes = _index_deletes(data, unit)
    deletes[layout.CF_META] = [unit_key(key)]
    data.write_columns({}, deletes)
    for t in tables.ETH_TABLES:
        part_path(data, t.name, unit["part"]).unlink(missing_ok=True)


def _remove_temp_parts(data: DataDir) -> None:
    """Temp parts a killed run left (no committed unit owns a temp name)."""
    for t in tables.ETH_TABLES:
        folder = table_dir(data, t.name)
        for f in folder.glob(".*.parquet.tmp"):
            f.unlink(missing_ok=True)
