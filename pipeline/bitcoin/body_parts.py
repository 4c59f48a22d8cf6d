"""Staged block bodies of the full decode, and the verdicts they carry.

Each body unit's staged tables (``ds.BODY_SLIM``: ``blocks``, the copies' verdict rows, and
``txids``, each transaction's txid, block and position) are written as Parquet files under
``DATADIR/stage/bodies/`` (temp name, fsync, rename) and only then registered in the
``btc_bodies`` column family, so a killed run leaves either a registered part or an
unregistered file that the next run deletes. No other row is staged: the chain state reads,
checks and writes the best chain's rows from the blocks (parts hold the best chain's copies
only where it stopped, or where a reorg moved them), and the publish stage decodes the few
blocks off the best chain again from their files (``stages/publish.py``).

Parts staged before that (registry entries without ``tables``) hold the four tables of
``ds.BODY_STAGED_V1``; they are still read as they are: their ``blocks`` are the same verdict
rows and their ``transactions`` hold the ``txids`` columns (``txid_files``), and their
``inputs`` and ``outputs`` are no longer read (they go with the part).

The staged ``blocks`` rows are the body verdicts: a copy that failed to decode or check is
linked as ``invalid_body`` (another copy of the hash is used), and blocks found breaking a
consensus rule later (BIP34 height, spends) are linked as ``invalid_block``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rechain.pipeline.store.datadir import DataDir, land_worker_files
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout
from rechain.workers.btc_decode import StagedBody, tmp_name
from rechain.workers.fault_injection import kill_point

_OFFSET_BITS = 40


def stage_dir(data: DataDir) -> Path:
    return data.path / "stage" / "bodies"


def part_path(data: DataDir, part: str, table: str) -> Path:
    return stage_dir(data) / f"{part}.{table}.parquet"


def registered(data: DataDir) -> dict[str, dict[str, Any]]:
    """Registered part name -> its registry entry (``file``, ``records``, ``tables``)."""
    return {k.decode(): json.loads(v) for k, v in data.items(layout.CF_BTC_BODIES)}


def registered_parts(data: DataDir) -> list[str]:
    return [k.decode() for k, _ in data.items(layout.CF_BTC_BODIES)]


def part_tables(entry: dict[str, Any]) -> tuple[str, ...]:
    """The staged tables of a part, by its registry entry (parts staged before ``BODY_SLIM``
    have no ``tables``)."""
    return tuple(entry.get("tables") or ds.BODY_STAGED_V1)


def txid_files(data: DataDir) -> list[str]:
    """Per registered part, the staged file holding its transactions' ``txid``,
    ``block_hash`` and ``position``: ``txids``, or an older part's ``transactions``."""
    return [
        str(part_path(data, p, "txids" if "txids" in part_tables(e) else "transactions"))
        for p, e in registered(data).items()
    ]


def remove_unregistered(data: DataDir) -> int:
    """Deletes staged files no committed part owns (left by a killed run); returns how many."""
    folder = stage_dir(data)
    if not folder.exists():
        return 0
    keep = {part_path(data, p, t).name for p, e in registered(data).items() for t in part_tables(e)}
    removed = 0
    for f in folder.iterdir():
        if f.name not in keep:
            f.unlink()
            removed += 1
    return removed


def commit_part(data: DataDir, staged: StagedBody) -> None:
    """Makes a unit's staged tables durable under their final names (the files its worker
    wrote, or the bytes it returned), then registers the part in one RocksDB write."""
    folder = stage_dir(data)
    folder.mkdir(parents=True, exist_ok=True)
    part = staged.unit.part
    if sorted(staged.tables) != sorted(ds.BODY_SLIM):
        raise ValueError(f"unit {part} staged {sorted(staged.tables)}, not {list(ds.BODY_SLIM)}")
    try:
        land_worker_files(
            [
                (content, folder / tmp_name(part, table), part_path(data, part, table))
                for table, content in staged.tables.items()
            ]
        )
    except ValueError as e:
        raise ValueError(f"unit {part}: {e}") from e
    entry = {
        "file": staged.unit.file_no,
        "records": len(staged.unit.offsets),
        "tables": list(ds.BODY_SLIM),
    }
    kill_point("bodies.part_renamed")
    data.write({layout.CF_BTC_BODIES: [(part.encode(), entry)]})
    kill_point("bodies.part_registered")


def forget_file_parts(data: DataDir, file_no: int) -> list[bytes]:
    """Keys of the parts staged from ``file_no`` (to delete with the file's scan log); their
    files go at once, as unregistered files would at the next start anyway."""
    keys = []
    for part, entry in registered(data).items():
        if entry["file"] == file_no:
            keys.append(part.encode())
            for table in part_tables(entry):
                part_path(data, part, table).unlink(missing_ok=True)
    return keys


def forget_failed_parts(data: DataDir, file_no: int, start: int) -> list[bytes]:
    """Keys of the parts staged from ``file_no`` holding a failed copy at or past ``start``
    (a provisional tail a node may since have completed; see ``scan_log``). Their files
    go at once; their other blocks are decoded again, as any block without a verdict."""
    keys = []
    for part, entry in registered(data).items():
        if entry["file"] != file_no:
            continue
        blocks = pq.read_table(part_path(data, part, "blocks"), columns=["offset", "valid"])
        late = pc.greater_equal(blocks.column("offset"), start)
        if pc.any(pc.and_(late, pc.invert(blocks.column("valid")))).as_py():
            keys.append(part.encode())
            for table in part_tables(entry):
                part_path(data, part, table).unlink(missing_ok=True)
    return keys


def staged_blocks(
    data: DataDir, columns: list[str] | None = None, parts: list[str] | None = None
) -> pa.Table:
    """The staged ``blocks`` rows of the given parts (default: every registered part)."""
    names = registered_parts(data) if parts is None else parts
    files = [str(part_path(data, p, "blocks")) for p in names]
    schema = ds.schema(ds.BODY_STAGED["blocks"])
    if not files:
        return pa.Table.from_batches([], schema=schema).select(columns or schema.names)
    # Only the columns asked for are read: every part is read at each run.
    return pq.read_table(files, schema=schema, columns=columns)


def invalid_blocks(data: DataDir) -> dict[str, str]:
    return dict(data.meta_get(layout.META_BTC_INVALID_BLOCKS) or {})


def copy_key(file: pa.Array, offset: pa.Array) -> pa.Array:
    """One number per copy: its file and offset."""
    return pc.add(
        pc.shift_left(pc.cast(file, pa.uint64()), _OFFSET_BITS), pc.cast(offset, pa.uint64())
    )


def apply_verdicts(data: DataDir, log: pa.Table) -> pa.Table:
    """The scan log as the linker must see it: failed body copies and invalid blocks marked.
    Returned as it came (chunks untouched) when there is nothing to mark."""
    failed = staged_blocks(data, ["file", "offset", "valid", "invalid_reason"])
    failed = failed.filter(pc.invert(failed.column("valid"))).combine_chunks()
    invalid = invalid_blocks(data)
    if not failed.num_rows and not invalid:
        return log
    records = log.combine_chunks().to_batches()[0] if log.num_rows else ds.empty(ds.RECORDS)
    status = records.column("status")
    reason = records.column("reason")
    if failed.num_rows:
        keys = copy_key(records.column("file"), records.column("magic_offset"))
        failed_keys = copy_key(failed.column("file").chunk(0), failed.column("offset").chunk(0))
        idx = pc.index_in(keys, value_set=failed_keys)
        hit = pc.is_valid(idx)
        status = pc.if_else(hit, "invalid_body", status)
        reason = pc.if_else(hit, pc.take(failed.column("invalid_reason").chunk(0), idx), reason)
    if invalid:
        hashes = pa.array([bytes.fromhex(h)[::-1] for h in invalid], pa.binary(32))
        reasons = pa.array(list(invalid.values()), pa.string())
        idx = pc.index_in(records.column("hash"), value_set=hashes)
        hit = pc.is_valid(idx)
        status = pc.if_else(hit, "invalid_block", status)
        reason = pc.if_else(hit, pc.take(reasons, idx), reason)
    names = records.schema.names
    cols: list[Any] = list(records.columns)
    cols[names.index("status")] = status
    cols[names.index("reason")] = reason
    return pa.Table.from_batches([pa.RecordBatch.from_arrays(cols, schema=records.schema)])
