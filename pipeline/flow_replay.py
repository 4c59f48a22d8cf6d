"""Flow LedgerWAL replay: segments applied in WAL order to the flow-go-compatible MTrie forest
(Rust core; decoded record by record in this process, or on Ray ahead of the apply for very
large WALs or a given cluster), state published to RocksDB and Parquet.

Bad input stops the replay where flow-go would, but says what it found: the segment, offset and
reason are reported as a skip, and nothing past the last good update is applied.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rechain.pipeline import metrics
from rechain.pipeline.errors import RechainError
from rechain.pipeline.progress import Progress
from rechain.pipeline.store import DataDir
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.flow_decode import SegmentResult, SegmentUnit, decode_unit
from rechain.workers.memory import release_unused_memory

log = logging.getLogger(__name__)
STAGE = "flow_wal"
ROW_GROUP = 65_536
#: A row group is also closed once its encoded columns, which the writer holds until then,
#: reach this size: register values are mostly incompressible, so 65,536 of them could hold
#: tens of MiB.
ROW_GROUP_BYTES = 1 << 20
#: Registers handed to the SST writer at a time, as Python bytes (~300 B each at Flow's sizes).
REGISTER_SLICE_ROWS = 2048
#: Up to this many WAL bytes, and without --ray-address, each segment is decoded and applied
#: record by record in this process (Rust, GIL released), holding only the segment's bytes and
#: the forest. Applying updates, not decoding, bounds a replay (decoding is ~1% of it), so for
#: such a WAL Ray's start-up (seconds), its processes (hundreds of MiB) and the decoded batches
#: it hands over cost more than parallel decoding could save.
LOCAL_DECODE_MAX_BYTES = 1 << 30


@dataclass
class ReplayOptions:
    wal: Path
    data: Path
    workers: int = 0
    ray_address: str | None = None
    memory_budget: int = 1 << 30
    progress: bool = True
    #: Resume from the latest checkpoint in this folder (replay only the segments after it).
    checkpoint: Path | None = None
    #: Write a checkpoint after every N segments (0: never), as flow-go's checkpointer does.
    checkpoint_every: int = 0
    #: Where those checkpoints go (default: the WAL folder, like flow-go).
    checkpoint_dir: Path | None = None


def _segments(wal: Path) -> list[tuple[int, str]]:
    if not wal.is_dir():
        raise RechainError(f"{wal}: WAL folder not found")
    try:
        return [(int(n), str(p)) for n, p in _native.flow_list_segments(str(wal))]
    except Exception as e:  # FlowWalError (segment gap) and OS errors carry their own message
        raise RechainError(f"{wal}: {e}") from e


def run(opts: ReplayOptions) -> dict[str, Any]:
    t_start = time.perf_counter()
    segments = _segments(opts.wal)
    workers = opts.workers or os.cpu_count() or 1
    resumed = None
    if opts.checkpoint is not None:
        forest, resumed, segments = _resume(opts, segments, workers)
    else:
        forest = _native.FlowForest(threads=workers)
    cp_dir = opts.checkpoint_dir or opts.wal
    written: list[str] = []
    # Checkpoint N covers segments 0..N; the next one is due `checkpoint_every` segments later.
    last_checkpoint = resumed["number"] if resumed is not None else -1
    with DataDir(opts.data) as data:
        skipped: list[dict[str, Any]] = []
        ray_start = 0.0
        total = sum(Path(p).stat().st_size for _, p in segments)
        progress = Progress(total, enabled=opts.progress, label="replay")
        stopped = False
        decode_on_ray = opts.ray_address is not None or total > LOCAL_DECODE_MAX_BYTES
        steps = (
            _apply_ray_decoded(forest, segments, opts, workers)
            if decode_on_ray
            else _apply_streamed(forest, segments)
        )
        for unit, applied, info in steps:
            ray_start = info.pop("ray_start_s", ray_start)
            name = Path(unit.path).name
            metrics.RECORDS.labels(STAGE).inc(applied)
            metrics.BYTES_READ.labels(STAGE).inc(int(info.get("file_len", 0)))
            progress.update(int(info.get("file_len", 0)), applied)
            error = info.get("error")
            if error:
                skipped.append(
                    {
                        "segment": name,
                        "offset": error.get("offset"),
                        "reason": error.get("kind"),
                        "detail": error.get("message"),
                    }
                )
                metrics.SKIPS.labels(STAGE, str(error.get("kind"))).inc()
                stopped = True
            elif info.get("torn"):
                # flow-go treats a torn final record as the end of the log (a crash while
                # writing); anywhere else it is damage.
                is_last = unit.seq == len(segments) - 1
                skipped.append(
                    {
                        "segment": name,
                        "offset": info.get("end_offset"),
                        "reason": "torn_record" if is_last else "torn_record_mid_log",
                    }
                )
                stopped = not is_last
            if stopped:
                break
            seg_no = unit.segment
            if opts.checkpoint_every and seg_no - last_checkpoint >= opts.checkpoint_every:
                written.append(_write_checkpoint(forest, cp_dir, seg_no))
                last_checkpoint = seg_no
        steps.close()  # a replay that stopped early leaves no decode running
        progress.close()
        summary = _publish(
            data,
            forest,
            segments,
            skipped,
            last_segment=resumed["number"] if resumed is not None else None,
            resumed_from=resumed,
        )
        if written:
            summary["checkpoints_written"] = written
        report = {
            "ray_start_s": ray_start,
            "total_s": time.perf_counter() - t_start,
            "segments": len(segments),
            "updates": summary["updates_applied"],
            "workers": workers,
            "decode": "ray" if decode_on_ray else "in_process",
        }
        data.write({layout.CF_META: [(fs.META_FLOW_RUN, report)]})
        data.write_report("flow_replay", {**summary, **report})
        return {**summary, "run": report}


def _resume(
    opts: ReplayOptions, segments: list[tuple[int, str]], workers: int
) -> tuple[Any, dict[str, Any], list[tuple[int, str]]]:
    """Loads the latest checkpoint of `opts.checkpoint` and keeps the segments after it. As in
    flow-go, checkpoint N covers segments 0..N, so the next segment must be N+1."""
    from rechain.pipeline import flow_checkpoint

    assert opts.checkpoint is not None
    found = flow_checkpoint.list_checkpoints(opts.checkpoint)
    if not found:
        raise RechainError(f"{opts.checkpoint}: no checkpoint.NNNNNNNN file to resume from")
    number, name = found[-1]
    forest, info = flow_checkpoint.load_forest(opts.checkpoint, name, workers, opts.ray_address)
    rest = [s for s in segments if s[0] > number]
    if rest and rest[0][0] != number + 1:
        raise RechainError(
            f"{opts.wal}: gap between checkpoint {name} and the first later segment "
            f"{rest[0][0]:08d}"
        )
    resumed = {
        "checkpoint": str(opts.checkpoint / name),
        "number": number,
        "root": info["tries"][-1]["root"],
        "roots": [t["root"] for t in info["tries"]],
        "tries": len(info["tries"]),
        "load_s": info["load_s"],
    }
    return forest, resumed, rest


def _write_checkpoint(forest: Any, directory: Path, segment: int) -> str:
    from rechain.pipeline.flow_checkpoint import checkpoint_name

    name = checkpoint_name(segment)
    try:
        _native.flow_checkpoint_write(forest, str(directory), name)
    except _native.FlowCheckpointError as e:
        raise RechainError(str(e)) from e
    return str(directory / name)


#: A segment applied: its unit, the records applied (all in the forest's update log) and the
#: decode info.
Step = tuple[SegmentUnit, int, dict[str, Any]]


def _apply_streamed(forest: Any, segments: list[tuple[int, str]]) -> Generator[Step, None, None]:
    """Each segment decoded and applied record by record in Rust (GIL released), streamed from
    its file: per segment, the records applied and the decode info, whose `error` also covers
    an unknown parent root."""
    for i, (n, p) in enumerate(segments):
        t0 = time.perf_counter()
        try:
            applied, info = forest.replay_segment(p, n)
        except _native.FlowWalError as e:  # the file could not be read
            raise RechainError(f"{p}: {e}") from e
        metrics.SHARD_DECODE_SECONDS.labels(STAGE).observe(time.perf_counter() - t0)
        yield SegmentUnit(i, n, p), applied, dict(info)


def _apply_ray_decoded(
    forest: Any, segments: list[tuple[int, str]], opts: ReplayOptions, workers: int
) -> Generator[Step, None, None]:
    """Segments decoded on Ray ahead of the apply, then applied here in order; same steps as
    `_apply_streamed`."""
    for result in _decode_in_order(segments, opts, workers):
        metrics.SHARD_DECODE_SECONDS.labels(STAGE).observe(result.seconds)
        info = result.info
        try:
            roots = forest.apply(result.records)
        except _native.FlowWalError as e:  # unknown parent root: nothing after it is applied
            roots = list(getattr(e, "roots", []))
            info["error"] = {
                "offset": getattr(e, "offset", None),
                "kind": getattr(e, "kind", "error"),
                "message": str(e),
            }
            info["torn"] = False
        yield result.unit, len(roots), info


def _decode_in_order(
    segments: list[tuple[int, str]], opts: ReplayOptions, workers: int
) -> Iterator[SegmentResult]:
    import ray
    from rechain.pipeline.ray_runtime import ensure_ray

    if not segments:
        return
    ray_start = ensure_ray(opts.ray_address, workers)
    remote = ray.remote(num_cpus=1, max_retries=3)(decode_unit)
    # A decoded segment holds at most about its own size in Arrow buffers.
    window = max(1, min(2 * workers, opts.memory_budget // (2 * 32 * 2**20)))
    units = iter(SegmentUnit(i, n, p) for i, (n, p) in enumerate(segments))
    queue: deque[Any] = deque()
    for unit in units:
        queue.append(remote.remote(unit))
        if len(queue) >= window:
            break
    first = True
    while queue:
        metrics.QUEUE_DEPTH.labels(STAGE).set(len(queue))
        result: SegmentResult = ray.get(queue.popleft())
        if first:
            result.info["ray_start_s"] = ray_start
            first = False
        nxt = next(units, None)
        if nxt is not None:
            queue.append(remote.remote(nxt))
        yield result
    metrics.QUEUE_DEPTH.labels(STAGE).set(0)


def _publish(
    data: DataDir,
    forest: Any,
    segments: list[tuple[int, str]],
    skipped: list[dict[str, Any]],
    last_segment: int | None = None,
    resumed_from: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Publishes the forest's current trie and update log: the Parquet tables (written by the
    Rust core, so this process never loads pyarrow), then RocksDB's registers and roots."""
    t0 = time.perf_counter()
    release_unused_memory()
    gen_key = fs.META_FLOW_GENERATION
    generation = int(data.meta_get(gen_key) or 0) + 1
    register_rows = 0

    def registers(parts: list[Path]) -> None:
        nonlocal register_rows
        register_rows = forest.write_registers(
            str(parts[0]), str(parts[1]), ROW_GROUP, ROW_GROUP_BYTES
        )

    data.stage_parquet_files(
        [fs.TRIE_UPDATES],
        generation,
        lambda parts: forest.write_trie_updates(
            str(parts[0]), ROW_GROUP, ROW_GROUP_BYTES, fs.DICTIONARY_COLUMNS
        ),
    )
    # Each step's buffers go back to the OS before the next: freed heap pages are otherwise
    # kept, and the steps' transients would add up on top of the forest.
    release_unused_memory()
    data.stage_parquet_files([fs.REGISTERS, fs.REGISTER_HASHES], generation, registers)
    release_unused_memory()
    # The registers' SST file (current payloads, path order = key order) is complete before
    # the database changes.
    sst = data.write_sst(
        layout.CF_FLOW_REGISTERS,
        forest.register_entries(fs.REGISTER_VALUE_VERSION, REGISTER_SLICE_ROWS),
    )
    release_unused_memory()
    # RocksDB: current payloads and the root history.
    for cf in (layout.CF_FLOW_REGISTERS, layout.CF_FLOW_ROOTS):
        data.reset_column_family(cf)
    if sst is not None:
        data.ingest_sst(layout.CF_FLOW_REGISTERS, sst)
    data.ingest_sorted_slices(layout.CF_FLOW_ROOTS, forest.log_len, forest.root_entries)
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
    for t in (fs.TRIE_UPDATES, fs.REGISTERS, fs.REGISTER_HASHES):
        data.remove_other_generations(t, generation)
    return summary


def status(data_path: Path) -> dict[str, Any]:
    with DataDir(data_path, readonly=True) as data:
        summary = data.meta_get(fs.META_FLOW_SUMMARY)
        if summary is None:
            raise RechainError(f"{data_path}: no Flow replay here yet")
        return {**summary, "run": data.meta_get(fs.META_FLOW_RUN)}
