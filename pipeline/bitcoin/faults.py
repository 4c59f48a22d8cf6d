"""What the Bitcoin reindex does when a scan task fails, after Ray's own retries.

* A worker process that dies (killed, out of memory) is retried by Ray (``max_retries``); the
  retry scans the same bytes, so the result is identical. Only when every attempt died is the
  shard given up, as below.
* A task that raises on its bytes fails the same way on every attempt, so it is not retried: its
  byte range becomes a reported skip (event ``shard_failed`` with file, offset, end and reason)
  and the coordinator goes on with the other shards.
* A task that cannot read its file (``OSError``: gone, unreadable) stops the run with a clear
  error: that is the environment, not the bytes, and skipping it would hide the whole file.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
from rechain.pipeline.bitcoin.scan_log import BtcCommitter
from rechain.pipeline.errors import RechainError
from rechain.schemas import bitcoin as ds
from rechain.workers.btc_scan import ShardResult, WorkUnit

log = logging.getLogger(__name__)

#: Event kind of a shard whose task failed for good.
SHARD_FAILED = "shard_failed"


def failure_reason(unit: WorkUnit, error: Exception) -> str:
    """Why the shard is skipped; raises :class:`RechainError` when the run must stop instead."""
    import ray

    where = f"{Path(unit.path).name} at {unit.start}"
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = error.as_instanceof_cause()
        if isinstance(cause, OSError):
            raise RechainError(f"{where}: {cause}") from error
        first_line = str(error.cause if error.cause is not None else cause).splitlines()
        return f"{type(error.cause).__name__}: {first_line[0] if first_line else ''}".rstrip()
    if isinstance(error, ray.exceptions.WorkerCrashedError | ray.exceptions.OutOfMemoryError):
        return f"worker process died on every attempt ({type(error).__name__})"
    raise RechainError(f"{where}: {error}") from error


def local_failure_reason(unit: WorkUnit, error: Exception) -> str:
    """As :func:`failure_reason`, for a shard run in this process (no retries: an exception
    raised on the bytes would be raised again)."""
    if isinstance(error, OSError):
        raise RechainError(f"{Path(unit.path).name} at {unit.start}: {error}") from error
    first_line = str(error).splitlines()
    return f"{type(error).__name__}: {first_line[0] if first_line else ''}".rstrip()


def failed_shard(unit: WorkUnit, committer: BtcCommitter, reason: str) -> ShardResult:
    """A result standing in for a shard that could not be scanned: no records, one
    ``shard_failed`` event over its bytes, and scanning resumes at its bound."""
    # A record of the previous shard may run into this one: the skipped range starts after it.
    start = max(unit.start, committer.files[unit.file_no].pending.through)
    log.warning(
        "%s: skipping bytes %d..%d: %s", Path(unit.path).name, unit.start, unit.bound, reason
    )
    events = []
    if start < unit.bound:
        events.append(
            {
                "file": unit.file_no,
                "offset": start,
                "end": unit.bound,
                "kind": SHARD_FAILED,
                "declared": None,
                "consumed": None,
                "reason": reason,
            }
        )
    info: dict[str, Any] = {
        "start": start,
        "bound": unit.bound,
        "file_len": None,
        "leading_gap": None,
        "empty": start >= unit.bound,
        "pending_start": max(start, unit.bound),
        "pending_through": max(start, unit.bound),
        "pending_all_zero": True,
        "bytes_read": 0,
    }
    return ShardResult(
        unit,
        ds.empty(ds.RECORDS),
        pa.RecordBatch.from_pylist(events, schema=ds.schema(ds.EVENTS)),
        info,
        0.0,
    )
