"""Stage ``replay``: WAL segments decoded and applied to the MTrie forest in WAL order.

Without --ray-address (the run's ``executor``), each segment is decoded and applied record by
record in this process (Rust, GIL released), holding only the segment's bytes and the forest; on
a cluster, Ray workers decode segments ahead of the apply. With ``--checkpoint-every N`` a
checkpoint is written every N segments as the forest reaches it. Bad input stops the replay
where flow-go would, but says what it found (segment, offset, reason, as a skip); nothing past
the last good update is applied.

The forest lives in this process: the stage is ephemeral. Resumed from a checkpoint too large
for ``--memory-budget`` (``flow_checkpoint.needs_paging``), or replaying a WAL that could build
a state too large for it, the forest is paged: nodes live in a node store under
``DATADIR/stage/flow_nodes`` (scratch; a checkpoint is streamed into it), loaded through a cache
as updates reach them, new ones written out as they pile up
(``workers/native/src/flow/node_store.rs``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from rechain.pipeline import metrics
from rechain.pipeline.engine.driver import Done, Stage
from rechain.pipeline.errors import RechainError
from rechain.pipeline.flow.run import FlowRun
from rechain.pipeline.progress import Progress
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.runtime.executor import Executor
from rechain.workers import _native
from rechain.workers.fault_injection import kill_point
from rechain.workers.flow_decode import SegmentResult, SegmentUnit, decode_unit

#: The metrics label of the replay.
STAGE = "flow_wal"
#: Scratch folder (under the data folder) of a paged forest's node store.
NODE_STORE = Path("stage") / "flow_nodes"


class ReplayStage(Stage[FlowRun]):
    name = "replay"
    ephemeral = True

    def output(self, ctx: FlowRun) -> Any:
        # The forest is a function of the WAL and options replayed: the pipeline's source.
        from rechain.pipeline.flow.run import source_token

        return source_token(ctx.opts, ctx.segments)

    def run(self, ctx: FlowRun) -> Done:
        opts, workers = ctx.opts, ctx.workers
        segments = ctx.segments
        ctx.skipped = []
        ctx.written = []
        ctx.resumed = None
        if opts.checkpoint is not None:
            forest, ctx.resumed, segments = _resume(opts, segments, workers)
        else:
            forest = _new_forest(opts, segments, workers)
        ctx.forest = forest
        ctx.replayed = segments
        resumed = ctx.resumed
        cp_dir = opts.checkpoint_dir or opts.wal
        written = ctx.written
        # Checkpoint N covers segments 0..N; the next one is due `checkpoint_every` later.
        last_checkpoint = resumed["number"] if resumed is not None else -1
        skipped = ctx.skipped
        ray_start = 0.0
        total = sum(Path(p).stat().st_size for _, p in segments)
        progress = Progress(total, enabled=opts.progress, label="replay", unit="updates")
        stopped = False
        # Applying updates, not decoding, bounds a replay (decoding is ~1% of it): on one
        # machine Ray's start-up, processes and hand-over cost more than parallel decoding.
        decode_on_ray = ctx.executor.on_ray
        steps = (
            _apply_ray_decoded(forest, segments, opts, ctx.executor)
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
        ctx.report.update(
            {
                "ray_start_s": ray_start,
                "decode": "ray" if decode_on_ray else "in_process",
                # The hashing work, the floor of the replay's time, and how much of it large
                # updates split across threads.
                "hash_permutations": int(forest.hash_permutations),
                "parallel_subtries": int(forest.parallel_subtries),
                "node_store": _store_traffic(forest),
            }
        )
        return Done(rows=int(forest.updates_applied), detail={"segments": len(segments)})


def _resume(
    opts: Any, segments: list[tuple[int, str]], workers: int
) -> tuple[Any, dict[str, Any], list[tuple[int, str]]]:
    """Loads the latest checkpoint of `opts.checkpoint` and keeps the segments after it. As in
    flow-go, checkpoint N covers segments 0..N, so the next segment must be N+1."""
    from rechain.pipeline.flow import checkpoint as flow_checkpoint

    assert opts.checkpoint is not None
    found = flow_checkpoint.list_checkpoints(opts.checkpoint)
    if not found:
        raise RechainError(f"{opts.checkpoint}: no checkpoint.NNNNNNNN file to resume from")
    number, name = found[-1]
    paged = flow_checkpoint.needs_paging(opts.checkpoint, name, opts.memory_budget)
    loaded = None
    if paged:
        loaded = flow_checkpoint.page_forest(
            opts.checkpoint,
            name,
            opts.data / NODE_STORE,
            opts.memory_budget,
            workers,
            trust_hashes=opts.trust_hashes,
        )
    if loaded is not None:
        forest, info = loaded
    else:
        # Small enough, or several tries (flow-go's checkpoints may hold them): in memory.
        paged = False
        forest, info = flow_checkpoint.load_forest(
            opts.checkpoint, name, workers, opts.ray_address, trust_hashes=opts.trust_hashes
        )
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
        "paged": paged,
    }
    return forest, resumed, rest


def _new_forest(opts: Any, segments: list[tuple[int, str]], workers: int) -> Any:
    """An empty forest, paged when the WAL could build a state too large for the budget (the
    state holds at most the payloads the WAL writes, and memory about three times that)."""
    from rechain.pipeline.flow import checkpoint as flow_checkpoint

    wal_bytes = sum(Path(p).stat().st_size for _, p in segments)
    if wal_bytes * flow_checkpoint.IN_MEMORY_FACTOR <= opts.memory_budget:
        return _native.FlowForest(threads=workers)
    store = opts.data / NODE_STORE
    shutil.rmtree(store, ignore_errors=True)
    return _native.FlowForest(
        threads=workers, node_store=str(store), **flow_checkpoint.paging_split(opts.memory_budget)
    )


def _store_traffic(forest: Any) -> dict[str, Any] | None:
    """A paged forest's node store traffic for the report (None for a forest in memory)."""
    stats = forest.node_store()
    return None if stats is None else stats.as_dict()


def _write_checkpoint(forest: Any, directory: Path, segment: int) -> str:
    from rechain.pipeline.flow.checkpoint import checkpoint_name

    name = checkpoint_name(segment)
    kill_point("flow_replay.checkpoint_writing")
    try:
        # Writes the files under temporary names and renames them into place (Rust).
        _native.flow_checkpoint_write(forest, str(directory), name)
    except _native.FlowCheckpointError as e:
        raise RechainError(str(e)) from e
    kill_point("flow_replay.checkpoint_written")
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
        yield SegmentUnit(i, n, p), applied, info.as_dict()


def _apply_ray_decoded(
    forest: Any, segments: list[tuple[int, str]], opts: Any, executor: Executor
) -> Generator[Step, None, None]:
    """Segments decoded on Ray ahead of the apply, then applied here in order; same steps as
    `_apply_streamed`."""
    for result in _decode_in_order(segments, opts, executor):
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
    segments: list[tuple[int, str]], opts: Any, executor: Executor
) -> Iterator[SegmentResult]:
    if not segments:
        return
    ray_start = executor.start()
    workers = executor.workers
    # A decoded segment holds at most about its own size in Arrow buffers.
    in_flight = budget_share(opts.memory_budget, "flow", "replay.decoded")
    window = max(1, min(2 * workers, in_flight // (32 * 2**20)))
    units = (SegmentUnit(i, n, p) for i, (n, p) in enumerate(segments))
    first = True
    for _, result in executor.ordered(decode_unit, units, window, STAGE):
        if isinstance(result, Exception):
            raise result
        if first:
            result.info["ray_start_s"] = ray_start
            first = False
        yield result
    metrics.QUEUE_DEPTH.labels(STAGE).set(0)
