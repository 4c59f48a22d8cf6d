"""UTXO snapshots (``btc dump-utxo``, ``btc check-utxo``): the set at any height of the applied
best chain, in Bitcoin Core's snapshot format (``dumptxoutset``/``loadtxoutset``) or as the
``utxo`` Parquet table, with the commitments Core reports for it (``hash_serialized_3``,
MuHash3072, ``m_chain_tx_count``).

A past height is reached by reading the undo records of the blocks above it into a net change
(held within the memory budget, spilled to ``tmp/`` past it) merged with the live set in key
order: the data folder is never rewound or written, bar its ``tmp/`` folder.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rechain.pipeline.bitcoin import chain_parts
from rechain.pipeline.errors import RechainError
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.runtime.executor import Executor
from rechain.pipeline.store.datadir import DataDir, land_files, land_folder, tmp_path
from rechain.schemas import rocksdb as layout
from rechain.schemas import tables
from rechain.workers import _native
from rechain.workers.fault_injection import kill_point
from rocksdict import ReadOptions

#: A dump's spill folder under ``DATADIR/tmp``, named by its process id.
SPILL_PREFIX = "utxo-rewind-"


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove_stale_spills(tmp: Path) -> None:
    """Spill folders of dumps that were killed (their process is gone)."""
    for folder in tmp.glob(f"{SPILL_PREFIX}*"):
        pid = folder.name.removeprefix(SPILL_PREFIX)
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _chain_tx_count(data: DataDir, best: bytes, height: int) -> int:
    """Core's ``m_chain_tx_count`` of the block at ``height``: transactions from genesis to it."""
    index = data.cf(layout.CF_BTC_INDEX)
    total = 0
    step = 4096
    for lo in range(0, height + 1, step):
        keys = [best[32 * h : 32 * h + 32] for h in range(lo, min(height + 1, lo + step))]
        for key, value in zip(keys, index[keys], strict=True):
            if value is None:
                raise RechainError(f"best-chain block {key[::-1].hex()} is not in the index")
            n_tx = layout.decode_index_value(bytes(value)).n_tx
            if n_tx is None:
                raise RechainError(f"best-chain block {key[::-1].hex()} has no body checked")
            total += n_tx
    return total


def _undos(data: DataDir, above: bytes, height: int) -> Iterator[tuple[int, bytes, bytes]]:
    """(height, best-chain hash, undo record) from the tip down to ``height + 1``; ``above``
    holds the best chain's hashes of the heights above ``height``, in height order."""
    for k in range(len(above) // 32 - 1, -1, -1):
        h = height + 1 + k
        raw = data.get(layout.CF_BTC_UNDO, layout.undo_key(h))
        if raw is None:
            raise RechainError(f"no undo record for height {h}: rerun the reindex")
        yield h, above[32 * k : 32 * k + 32], raw


@dataclass(frozen=True)
class DumpJob:
    """What every part of a split dump needs (plain values: a part may run as a Ray task)."""

    data: str
    height: int
    #: The best chain's hashes above ``height``.
    above: bytes
    network: str
    base_hash: bytes
    #: Bytes each part may hold for its rewind, and for a Parquet file's rows.
    rewind_budget: int
    row_bytes: int
    spill: str
    #: The folder the table's files are written to (``fmt`` "parquet").
    table: str
    fmt: str


def _parquet_spec(folder: str | Path, row_bytes: int, prefix: str) -> tuple[Any, ...]:
    group_bytes = max(row_bytes // 4, 1 << 12)
    layout_ = tables.UTXO.native_layout(group_bytes)
    return (Path(folder), tables.UTXO.schema, layout_, max(row_bytes, 1 << 12), prefix)


def dump_part(unit: tuple[int, bytes, bytes], job: DumpJob) -> dict[str, Any]:
    """One key range of a split dump: its coins as a snapshot part (and the table's files of
    the range), its count, amount and MuHash state."""
    index, lo, hi = unit
    with DataDir(Path(job.data), readonly=True) as data:
        read = ReadOptions()
        if hi:
            read.set_iterate_upper_bound(hi)
        part = Path(job.spill) / "parts" / f"part-{index:04d}.coins"
        figures: dict[str, Any] = _native.utxo_set_at(
            data.cf(layout.CF_BTC_UTXO).items(from_key=lo, read_opt=read),
            _undos(data, job.above, job.height),
            height=job.height,
            budget=job.rewind_budget,
            spill_dir=Path(job.spill) / f"part-{index:04d}",
            network=job.network,
            base_hash=job.base_hash,
            snapshot=part,
            parquet=_parquet_spec(job.table, job.row_bytes, f"part-{index:04d}-")
            if job.fmt == "parquet"
            else None,
            key_range=(lo, hi),
        )
    return figures | {"part": str(part)}


def _split_dump(
    job: DumpJob, parts: int, executor: Executor, snapshot: Path | None
) -> dict[str, Any]:
    """The dump cut into key ranges, run on the executor's threads or Ray tasks, then put
    together in key order: the snapshot (metadata, then the parts), ``hash_serialized_3``
    read through the parts, MuHash from their states."""
    Path(job.spill, "parts").mkdir(parents=True, exist_ok=True)
    executor.start()
    units = [(i, lo, hi) for i, (lo, hi) in enumerate(_native.utxo_key_ranges(parts))]
    done = []
    for _, result in executor.ordered(dump_part, units, executor.workers, "dump_utxo", job):
        if isinstance(result, BaseException):
            raise result
        done.append(result)
    whole: dict[str, Any] = _native.assemble_utxo_snapshot(
        [(Path(r["part"]), r["coins"]) for r in done],
        [r["muhash_state"] for r in done],
        network=job.network,
        base_hash=job.base_hash,
        out=snapshot,
    )
    for r in done:
        Path(r["part"]).unlink(missing_ok=True)
    assert whole["coins"] == sum(r["coins"] for r in done)
    return whole | {
        "blocks_rewound": done[0]["blocks_rewound"],
        "spilled_runs": sum(r["spilled_runs"] for r in done),
        "parquet_files": sum(r["parquet_files"] for r in done),
    }


def set_at(
    data_path: Path,
    height: int | None,
    *,
    memory_budget: int,
    snapshot: Path | None = None,
    fmt: str = "core",
    workers: int = 1,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """The UTXO set at ``height`` (default: the applied tip): its figures, and with
    ``snapshot`` the set written there: a file in Core's format (``fmt`` "core") or a folder of
    the ``utxo`` table (``fmt`` "parquet"), atomically (a temporary name, then renamed)."""
    if fmt not in ("core", "parquet"):
        raise RechainError(f"no UTXO format {fmt!r} (core or parquet)")
    t0 = time.perf_counter()
    executor = Executor.choose(ray_address, workers)
    # A part per worker, a few more on Ray so that a lost node costs a small one.
    parts = (
        1
        if executor.workers == 1 and not executor.on_ray
        else executor.workers * (4 if executor.on_ray else 1)
    )
    with DataDir(data_path, readonly=True) as data:
        summary = data.meta_get(layout.META_BTC_SUMMARY) or {}
        cp = chain_parts.checkpoint(data)
        if not cp or cp["height"] < 0 or data.meta_get(layout.META_BTC_FULL) is None:
            raise RechainError(
                f"{data_path}: no applied chain state here (btc reindex --mode full)"
            )
        tip = int(cp["height"])
        height = tip if height is None else height
        if not 0 <= height <= tip:
            raise RechainError(f"height {height} is not on the applied chain (0 to {tip})")
        best = chain_parts.best_chain(data)
        if len(best) < 32 * (tip + 1) or best[32 * tip : 32 * tip + 32][::-1].hex() != cp["hash"]:
            raise RechainError(
                f"{data_path}: the best chain is ahead of the chain state: rerun the reindex"
            )
        block_hash = best[32 * height : 32 * height + 32]
        spill = data_path / "tmp" / f"{SPILL_PREFIX}{os.getpid()}"
        if snapshot is not None and snapshot.exists():
            raise RechainError(f"{snapshot} exists: name a new file or folder")
        target = tmp_path(snapshot) if snapshot is not None else None
        if target is not None:
            # What a killed dump left under the temporary name is started again.
            _remove(target)
            target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_spills(data_path / "tmp")
        job = DumpJob(
            data=str(data_path),
            height=height,
            above=best[32 * (height + 1) : 32 * (tip + 1)],
            network=summary["network"],
            base_hash=block_hash,
            rewind_budget=budget_share(memory_budget, "bitcoin", "dump_utxo.rewind") // parts,
            row_bytes=budget_share(memory_budget, "bitcoin", "dump_utxo.rows") // parts,
            spill=str(spill),
            table=str(target),
            fmt=fmt if target is not None else "core",
        )
        if target is not None and fmt == "parquet":
            target.mkdir()
        try:
            if parts == 1:
                figures = _native.utxo_set_at(
                    data.cf(layout.CF_BTC_UTXO).items(),
                    _undos(data, job.above, height),
                    height=height,
                    budget=job.rewind_budget,
                    spill_dir=spill,
                    network=job.network,
                    base_hash=block_hash,
                    snapshot=target if fmt == "core" else None,
                    parquet=_parquet_spec(target, job.row_bytes, "part-")
                    if target is not None and fmt == "parquet"
                    else None,
                )
            else:
                figures = _split_dump(job, parts, executor, target if fmt == "core" else None)
            if target is not None and snapshot is not None:
                kill_point("utxo_dump.written")
                if fmt == "parquet":
                    land_folder(target, snapshot)
                else:
                    land_files([(target, snapshot)])
        except OSError as e:  # BtcError: stored bytes that do not decode, a file not written
            raise RechainError(str(e)) from e
        finally:
            shutil.rmtree(spill, ignore_errors=True)
            if target is not None:
                _remove(target)
        chain_tx = _chain_tx_count(data, best, height)
    return {
        "block_hash": block_hash[::-1].hex(),
        "height": height,
        "coins": figures["coins"],
        "total_amount": figures["total_amount"],
        "chain_tx_count": chain_tx,
        "hash_serialized_3": figures["hash_serialized_3"],
        "muhash": figures["muhash"],
        "network": summary["network"],
        "tip_height": tip,
        "blocks_rewound": figures["blocks_rewound"],
        "spilled_runs": figures["spilled_runs"],
        "format": fmt,
        "parquet_files": figures["parquet_files"],
        "parts": parts,
        "execution": executor.kind,
        "out": None if snapshot is None else str(snapshot),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def check(path: Path, data_path: Path | None = None, *, memory_budget: int) -> dict[str, Any]:
    """A snapshot in Core's format read through: its base block, coin count and commitments;
    with ``data_path``, whether they equal rechain's set at that block."""
    try:
        read = _native.read_utxo_snapshot(path)
    except OSError as e:  # BtcError: a damaged file names its byte offset, a missing one its path
        raise RechainError(str(e)) from e
    out: dict[str, Any] = {
        "file": str(path),
        "block_hash": read["block_hash"],
        "height": None,
        "coins": read["coins"],
        "total_amount": read["total_amount"],
        "chain_tx_count": None,
        "hash_serialized_3": read["hash_serialized_3"],
        "muhash": read["muhash"],
        "network_magic": read["network_magic"],
        "bytes": read["bytes"],
    }
    if data_path is None:
        return out
    with DataDir(data_path, readonly=True) as data:
        best = chain_parts.best_chain(data)
        summary = data.meta_get(layout.META_BTC_SUMMARY) or {}
    key = bytes.fromhex(read["block_hash"])[::-1]
    heights = [h for h in range(len(best) // 32) if best[32 * h : 32 * h + 32] == key]
    if not heights:
        out["matches"] = False
        out["mismatch"] = ["block_hash: not on this data folder's best chain"]
        return out
    ours = set_at(data_path, heights[0], memory_budget=memory_budget)
    magic = _native.network_info(summary["network"]).magic.hex()
    mismatch = [
        f"{k}: snapshot {out[k]}, data folder {ours[k]}"
        for k in ("coins", "total_amount", "hash_serialized_3", "muhash")
        if out[k] != ours[k]
    ]
    if read["network_magic"] != magic:
        mismatch.append(f"network_magic: snapshot {read['network_magic']}, data folder {magic}")
    out.update(
        height=ours["height"],
        chain_tx_count=ours["chain_tx_count"],
        matches=not mismatch,
        mismatch=mismatch,
    )
    return out
